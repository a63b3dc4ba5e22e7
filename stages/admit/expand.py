"""Job -> tasks -> gangs. Pure functions: no Kafka, no store."""

from __future__ import annotations

import json

from peloton.model.constraint import constraint_to_record
from peloton.model.events import task_id_of
from peloton.model.jobspec import JobSpec, TaskSpec, alike, gang_instances
from peloton.model.resources import Resources
from peloton.model.volumes import home_of, mount_record, pin_to_home
from peloton.store import JobRow, TaskRow


def launch_spec(job_id: str, spec: JobSpec, task: TaskSpec, run_id: int) -> dict:
    """The TaskLaunchSpec record: everything place and launch need, so they never read the job."""
    labels = dict(spec.labels)
    labels.update(task.labels)
    resources = task.resources
    if task.volume is not None:  # the volume's disk is every run's, counted where the run is
        resources = resources + Resources(disk_mb=task.volume.size_mb)
    return {
        "task_id": task_id_of(job_id, task.instance, run_id),
        "job_id": job_id,
        "instance": task.instance,
        "run_id": run_id,
        "resources": resources.to_record(),
        "dynamic_ports": sum(1 for p in task.ports if p.value == 0),
        "ports": [{"name": p.name, "value": p.value, "env_name": p.env_name} for p in task.ports],
        "command": task.command.value,
        "shell": task.command.shell,
        "arguments": list(task.command.arguments),
        "environment": dict(task.command.environment),
        "labels": labels,
        "constraint_json": (
            json.dumps(constraint_to_record(task.constraint), sort_keys=True) if task.constraint is not None else None
        ),
        "kill_grace_seconds": float(task.kill_grace_seconds),
        "controller": task.controller,
        "image": task.image,
        "user": task.command.user,
        "health_check_json": task.health_check.to_json() if task.health_check is not None else None,
        "prefer_host": "",
        "volume": mount_record(job_id, task.instance, task.volume) if task.volume is not None else None,
    }


def expand_job(job_id: str, pool: str, spec: JobSpec, config_text: str, now_ms: int) -> tuple[JobRow, list[TaskRow]]:
    """A new job's row and its tasks' first runs, each PENDING in the gang Peloton's rule gives it."""
    job = JobRow(
        job_id=job_id, name=spec.name, pool=pool, type=spec.type, state="PENDING",
        instance_count=spec.instance_count, priority=spec.priority, preemptible=spec.preemptible,
        revocable=spec.revocable,
        placement_strategy=spec.placement_strategy, owner=spec.owning_team or spec.owner,
        config_text=config_text, created_ms=now_ms, updated_ms=now_ms,
    )
    tasks: list[TaskRow] = []
    # sla.maximumRunningInstances: the instances beyond it wait INITIALIZED until others end.
    throttle = spec.max_running_instances or spec.instance_count
    # Instances alike in every field but their instance (most: instances_of) have one launch
    # spec, built once and copied; its inner values are shared and never changed.
    shared: tuple[TaskSpec, dict] | None = None
    for instances in gang_instances(spec):
        gang_id = task_id_of(job_id, instances[0], 1)
        for i in instances:
            t = spec.tasks[i]
            task_id = task_id_of(job_id, i, 1)
            if shared is not None and alike(shared[0], t):
                launch = {**shared[1], "task_id": task_id, "instance": i}
                if t.volume is not None:  # alike but for the instance: each has its own volume
                    launch["volume"] = mount_record(job_id, i, t.volume)
            else:
                launch = launch_spec(job_id, spec, t, 1)
                shared = (t, launch)
            tasks.append(
                TaskRow(
                    job_id=job_id, instance=i, run_id=1, task_id=task_id, pool=pool,
                    gang_id=gang_id, state="PENDING" if i < throttle else "INITIALIZED",
                    spec=launch, max_failures=t.max_failures, updated_ms=now_ms,
                )
            )
    return job, tasks


def next_run(task: TaskRow, now_ms: int) -> None:
    """Turn a task row into its next run, PENDING, in a one-task gang of its own."""
    task.run_id += 1
    task.task_id = task_id_of(task.job_id, task.instance, task.run_id)
    task.gang_id = task.task_id
    task.state = "PENDING"
    task.health = ""
    # Where the last run was is no preference of the next one (an in-place update sets its own).
    # Callers pass rows read with their spec (a status's rerun reads it first when it was not).
    task.spec = {**task.spec, "task_id": task.task_id, "run_id": task.run_id,  # type: ignore[dict-item]
                 "prefer_host": ""}
    if task.spec.get("volume") and not home_of(task.spec) and task.host_id:
        # its volume was made where the last run was launched: the instance stays there
        task.spec = pin_to_home(task.spec, task.host_id)
    task.updated_ms = now_ms


def requeued_gang_id(gang_id: str, batch: str) -> str:
    """The gang id of tasks sent back to their pool's queue (a refused placement, a placement
    cycle given up). Tasks of one gang sent back together stay one gang; a new id keeps them
    apart from the gang's earlier record and from other parts of it sent back later, which
    entitle and place would otherwise take for repeats of what they already have."""
    return f"{gang_id.split('~', 1)[0]}~{batch}"


def gang_records(job: JobRow, tasks: list[TaskRow], now_ms: int) -> list[dict]:
    """GangDemand records for tasks (grouped by gang id, in task order)."""
    gangs: dict[str, list[TaskRow]] = {}
    for t in tasks:
        gangs.setdefault(t.gang_id, []).append(t)
    return [
        {
            "gang_id": gang_id,
            "job_id": job.job_id,
            "pool": job.pool,
            "priority": job.priority,
            "preemptible": job.preemptible,
            "revocable": job.revocable,
            "placement_strategy": job.placement_strategy,
            # a task that failed before is placed away from the host of its last run if it can be
            "avoid_hosts": sorted({t.host_id for t in members if t.failures and t.host_id}),
            "tasks": [t.spec for t in members],
            "created_ms": now_ms,
        }
        for gang_id, members in gangs.items()
    ]
