"""What the API's tests serve: a pool's resources, a job and a host."""

from __future__ import annotations

RESOURCES = """resources:
- {kind: cpu, reservation: 4, limit: 4, share: 1}
- {kind: memory, reservation: 4096, limit: 4096, share: 1}
- {kind: disk, reservation: 4096, limit: 4096, share: 1}
"""
JOB = """name: hello
instanceCount: 2
defaultConfig:
  resource: {cpuLimit: 0.5, memLimitMb: 64, diskLimitMb: 64}
  command: {value: "echo hello"}
"""
HOST = {"host_id": "h0", "shard": 0, "driver": "sim", "state": "UP",
        "capacity": {"cpu": 8.0, "mem_mb": 65536.0, "disk_mb": 100000.0, "gpu": 0.0},
        "allocated": {"cpu": 0.0, "mem_mb": 0.0, "disk_mb": 0.0, "gpu": 0.0}, "task_count": 0,
        "labels": {"hostname": "h0"}, "applied_placements": [], "updated_ms": 1, "task_labels": [], "job_tasks": {},
        "used_ports": [], "port_ranges": []}
