"""Records and stages as the stage tests build them: a record decoded as the runtime would (at the
next offset of its partition), job commands, host states, statuses and placements, and a stage
bound to a recording emitter."""

from __future__ import annotations

import uuid

from peloton.config import Settings
from peloton.runtime import Record, RecordingEmitter, Stage
from peloton.serde import registry
from peloton.topics import Catalogue

POOL = """
resources:
- {kind: cpu, reservation: 8, limit: 8, share: 1}
- {kind: memory, reservation: 4096, limit: 4096, share: 1}
- {kind: disk, reservation: 1000, limit: 1000, share: 1}
"""

JOB = """
name: {name}
instancecount: {count}
sla: {{minimumRunningInstances: {gang}}}
defaultconfig:
  resource: {{cpulimit: {cpu}, memlimitmb: 16}}
  command: {{shell: true, value: 'true'}}
"""

_offsets: dict[tuple[str, int], int] = {}


def record(topic: str, schema: str, value: dict, key: str = "k", partition: int = 0) -> Record:
    """A record as the runtime would decode it, with its bytes, at the next offset."""
    tp = (topic, partition)
    _offsets[tp] = _offsets.get(tp, -1) + 1
    raw = registry().encode(schema, value)
    _, value = registry().decode(raw)  # with the defaults of the fields not given
    return Record(topic, partition, _offsets[tp], key, schema, value, key.encode(), raw)


def command(job_id: str, config: str, pool: str = "/p") -> Record:
    return record("job-commands", "peloton.JobCommand", {
        "command_id": uuid.uuid4().hex, "kind": "CREATE", "job_id": job_id, "pool": pool, "config": config,
        "requested_by": "test", "timestamp_ms": 1}, key=job_id)


def host_state(host_id: str, cpu: float) -> dict:
    return {"host_id": host_id, "shard": 0, "driver": "sim", "state": "UP",
            "capacity": {"cpu": cpu, "mem_mb": 65536.0, "disk_mb": 100000.0, "gpu": 0.0},
            "allocated": {"cpu": 0.0, "mem_mb": 0.0, "disk_mb": 0.0, "gpu": 0.0}, "task_count": 0,
            "labels": {"hostname": host_id, "driver": "sim"}, "applied_placements": [], "updated_ms": 1,
            "task_labels": [], "job_tasks": {}, "used_ports": [], "port_ranges": []}


def bound(stage: Stage, **settings) -> RecordingEmitter:
    out = RecordingEmitter(stage.name)
    stage.bind(out, Settings(**settings), Catalogue())
    return out


def status_record(task_id: str, state: str, reason: str = "", host: str = "") -> Record:
    job_id, instance, run = task_id.rsplit("-", 2)
    return record("task-status", "peloton.TaskStatus", {
        "event_id": uuid.uuid4().hex, "task_id": task_id, "job_id": job_id, "instance": int(instance),
        "run_id": int(run), "host_id": host, "state": state, "reason": reason, "message": "no room",
        "exit_code": None, "signal": None, "timestamp_ms": 1}, key=job_id)


def one_task_gang(gang_id: str, pool: str = "/p", cpu: float = 1.0, priority: int = 0) -> dict:
    job_id, instance, run = gang_id.rsplit("-", 2)
    task = {"task_id": gang_id, "job_id": job_id, "instance": int(instance), "run_id": int(run),
            "resources": {"cpu": cpu, "mem_mb": 1.0, "disk_mb": 0.0, "gpu": 0.0}, "dynamic_ports": 0,
            "command": "true", "shell": True, "arguments": [], "environment": {}, "labels": {},
            "constraint_json": None, "kill_grace_seconds": 1.0, "controller": False}
    return {"gang_id": gang_id, "job_id": job_id, "pool": pool, "priority": priority, "preemptible": True,
            "revocable": False, "placement_strategy": "PACK_HOST", "tasks": [task], "created_ms": 1}


def placement_of(gang: dict, host_id: str = "sim-0") -> Record:
    return record("placements", "peloton.Placement", {
        "placement_id": uuid.uuid4().hex, "gang_id": gang["gang_id"], "pool": gang["pool"], "shard": 0,
        "assignments": [{"host_id": host_id, "task": t} for t in gang["tasks"]], "placed_ms": 1})


def control(kind: str, job_id: str, instances: str | None = None, command_id: str | None = None) -> Record:
    return record("job-commands", "peloton.JobCommand", {
        "command_id": command_id or uuid.uuid4().hex, "kind": kind, "job_id": job_id, "pool": "/p", "config": None,
        "instances": instances, "requested_by": "tester", "timestamp_ms": 1}, key=job_id)


def killed_instances(out: RecordingEmitter) -> list[str]:
    return sorted({v["task_id"] for _, _, schema, v in out.take("placements") if schema == "peloton.TaskKill"})


def agent_report(host_id: str, running: list[str], partition: int, read: int | None = None) -> Record:
    return record("agent-reports", "peloton.AgentReport", {
        "host_id": host_id, "agent_id": "a1", "capacity": {"cpu": 8.0, "mem_mb": 1024.0, "disk_mb": 1000.0, "gpu": 0.0},
        "labels": {}, "running": running, "port_ranges": [{"low": 31000, "high": 32000}], "updates": [],
        "sent_ms": 1, "commands_read": read}, key=host_id, partition=partition)


def update_command(job_id: str, text: str, command_id: str, **options) -> Record:
    return record("job-commands", "peloton.JobCommand", {
        "command_id": command_id, "kind": "UPDATE", "job_id": job_id, "pool": "/p", "config": text,
        "requested_by": "tester", "timestamp_ms": 1, **options}, key=job_id)
