"""A store seeded for Peloton's query forms: pools, jobs, runs, queued gangs and allocations."""

from __future__ import annotations

from peloton.model.jobconfig import parse_job_config
from peloton.model.pool import parse_pool_config
from peloton.store import Allocation, QueuedGang
from stages.admit.expand import expand_job

RESOURCES = "resources:\n- {kind: cpu, reservation: 4, limit: 4, share: 1}\n"
JOB = """name: {name}
owningTeam: {owner}
description: "{description}"
labels:
- {{key: tier, value: "{tier}"}}
instanceCount: 3
defaultConfig:
  name: worker
  resource: {{cpuLimit: 0.5, memLimitMb: 64, diskLimitMb: 64}}
  command: {{value: "echo hello"}}
instanceConfig:
  2:
    name: special
    command: {{value: "echo secretword"}}
"""
DAY = 86_400_000


def seed(store) -> None:
    """Pools /a, /a/x and /b; jobs etl (/a, day 1), web (/b, day 2), backup (/a/x, day 3, completed
    day 4); etl's instance 1 RUNNING on h1 and 2 FAILED on h2; backup's gang queued in /a/x and
    etl's instance 1 admitted in /a."""
    store.put_pool("/a", parse_pool_config("name: a\nowningTeam: team-a\n" + RESOURCES, "/a"))
    store.put_pool("/a/x", parse_pool_config("name: x\n" + RESOURCES, "/a/x"))
    store.put_pool("/b", parse_pool_config("name: b\nowningTeam: team-b\n" + RESOURCES, "/b"))
    for job_id, name, owner, description, tier, pool, day in (
            ("etl", "etl", "data", "Nightly ETL", "1", "/a", 1), ("web", "web", "front", "serves pages", "2", "/b", 2),
            ("backup", "backup", "data", "nightly copy", "2", "/a/x", 3)):
        text = JOB.format(name=name, owner=owner, description=description, tier=tier)
        job, tasks = expand_job(job_id, pool, parse_job_config(text), text, day * DAY)
        if job_id == "backup":
            job.state, job.completed_ms = "SUCCEEDED", 4 * DAY
        store.create_jobs([job], tasks)
    tasks = store.tasks_of_job("etl")
    tasks[1].state, tasks[1].host_id = "RUNNING", "h1"
    tasks[2].state, tasks[2].host_id, tasks[2].reason = "FAILED", "h2", "REASON_COMMAND_EXITED"
    store.update_task_runs(tasks)
    store.record_task_events([("etl-1-1", "etl", 1, 1, "RUNNING", "", None, DAY + 50, "h1", "")])
    gang = {"gang_id": "backup-0-1", "job_id": "backup", "pool": "/a/x", "priority": 0, "preemptible": False,
            "revocable": False, "created_ms": 3 * DAY,
            "tasks": [{"task_id": f"backup-{i}-1", "job_id": "backup", "instance": i, "run_id": 1,
                       "controller": False, "resources": {"cpu": 0.5, "mem_mb": 64.0, "disk_mb": 0.0, "gpu": 0.0}}
                      for i in range(2)]}
    urgent = {**gang, "gang_id": "backup-2-1", "priority": 5, "preemptible": True,
              "tasks": [{**gang["tasks"][0], "task_id": "backup-2-1", "instance": 2, "controller": True}]}
    store.queue_gangs([QueuedGang("backup-0-1", "/a/x", 0, 1, gang),
                       QueuedGang("backup-2-1", "/a/x", 5, 2, urgent, not_before_ms=9)])
    store.add_allocations([Allocation("etl-1-1", "/a", "etl-0-1", 0.5, 64, 64, 0, DAY + 10),
                           Allocation("etl-0-7", "/a", "etl-0-7", 0.5, 64, 64, 0, DAY + 20)])
