"""What the API's tests serve: a pool's resources, a job and a host, and a store holding them."""

from __future__ import annotations

from pathlib import Path

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


def seeded_store(path: Path, user: str, groups: list[str]):
    """A SQLite store at `path` holding pool /a (team-a's), job j1 in it, and a token of `user` in
    `groups`: (the store, the token)."""
    from peloton.auth.tokens import issue
    from peloton.model.jobconfig import parse_job_config
    from peloton.model.pool import parse_pool_config
    from peloton.store import open_store
    from stages.admit.expand import expand_job

    store = open_store(path)
    store.put_pool("/a", parse_pool_config("name: a\nowningTeam: team-a\n" + RESOURCES, "/a"))
    job, tasks = expand_job("j1", "/a", parse_job_config(JOB), JOB, 1)
    store.create_jobs([job], tasks)
    token, row = issue(user, groups, False, now_ms=1)
    store.add_token(row)
    return store, token
