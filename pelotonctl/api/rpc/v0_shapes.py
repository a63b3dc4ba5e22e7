"""The store's jobs, tasks and events as Peloton's v0 messages (job.JobInfo, task.TaskInfo,
task.PodEvent), and v0's half-open instance ranges as the API's instance text."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from peloton.api.v0 import peloton_pb2
from peloton.api.v0.job import job_pb2
from peloton.api.v0.task import task_pb2
from peloton.model.states import JOB_TERMINAL
from peloton.model.termination import termination_status
from peloton.store.base import JobRow, TaskRow
from pelotonctl.api.rpc import convert

# What a job of each type aims for (Peloton's goalState).
GOALS = {"BATCH": "SUCCEEDED", "SERVICE": "RUNNING", "DAEMON": "RUNNING"}


def ranges_text(ranges: Iterable[Any]) -> str | None:
    """InstanceRange messages ({from, to}, half-open) as the API's instance text ("0:4,7:8");
    None (every instance) for none."""
    parts = [f"{getattr(r, 'from')}:{r.to}" for r in ranges]
    return ",".join(parts) or None


def job_runtime(store: Any, job: JobRow, runtime: job_pb2.RuntimeInfo) -> job_pb2.RuntimeInfo:
    runtime.state = convert.enum_value(job_pb2.JobState, job.state, "UNKNOWN")
    runtime.goalState = convert.enum_value(job_pb2.JobState, GOALS.get(job.type, "SUCCEEDED"), "UNKNOWN")
    runtime.creationTime = convert.rfc3339(job.created_ms)
    if job.state in JOB_TERMINAL:
        runtime.completionTime = convert.rfc3339(job.completed_ms)
    runtime.configurationVersion = runtime.configVersion = job.config_version
    for state, count in store.task_state_counts([job.job_id]).get(job.job_id, {}).items():
        runtime.taskStats[state] = count
    if job.rollout and job.rollout.get("update_id"):
        runtime.updateID.value = job.rollout["update_id"]
    return runtime


def job_info(store: Any, job: JobRow, info: job_pb2.JobInfo | None = None) -> job_pb2.JobInfo:
    """The job's id, its config as submitted (read back into Peloton's JobConfig) and runtime."""
    info = info if info is not None else job_pb2.JobInfo()
    info.id.value = job.job_id
    convert.from_yaml(job.config_text, info.config)
    info.config.respoolID.value = convert.pool_id(job.pool)
    if not info.config.name:
        info.config.name = job.name
    info.config.instanceCount = job.instance_count
    job_runtime(store, job, info.runtime)
    return info


def job_summary(store: Any, job: JobRow, summary: job_pb2.JobSummary) -> job_pb2.JobSummary:
    info = job_info(store, job)
    summary.id.CopyFrom(info.id)
    summary.name, summary.owner, summary.owningTeam = info.config.name, job.owner, info.config.owningTeam
    summary.type = info.config.type
    summary.labels.extend(info.config.labels)
    summary.instanceCount = job.instance_count
    summary.respoolID.CopyFrom(info.config.respoolID)
    summary.runtime.CopyFrom(info.runtime)
    summary.sla.CopyFrom(info.config.sla)
    return summary


def task_info(job: JobRow, task: TaskRow, info: task_pb2.TaskInfo | None = None) -> task_pb2.TaskInfo:
    """One instance's current run: state, host, why it ended, its exit."""
    info = info if info is not None else task_pb2.TaskInfo()
    info.instanceId = task.instance
    info.jobId.value = job.job_id
    runtime = info.runtime
    runtime.state = convert.enum_value(task_pb2.TaskState, _v0_task_state(task.state), "UNKNOWN")
    runtime.goalState = convert.enum_value(task_pb2.TaskState, GOALS.get(job.type, "SUCCEEDED"), "UNKNOWN")
    runtime.mesosTaskId.value = task.task_id
    runtime.host = task.host_id
    runtime.message, runtime.reason = task.message, task.reason
    runtime.failureCount = task.failures
    runtime.configVersion = runtime.desiredConfigVersion = job.config_version
    if task.health:
        runtime.healthy = convert.enum_value(task_pb2.HealthState, task.health, "INVALID")
    ended = termination_status(task.state, task.reason)
    if ended:
        runtime.terminationStatus.reason = convert.enum_value(task_pb2.TerminationStatus.Reason, ended,
                                                              "TERMINATION_STATUS_REASON_INVALID")
        runtime.terminationStatus.exit_code = task.exit_code or 0
        if task.signal:
            runtime.terminationStatus.signal = str(task.signal)
    if task.state in ("SUCCEEDED", "FAILED", "KILLED", "LOST", "DELETED"):
        runtime.completionTime = convert.rfc3339(task.updated_ms)
    return info


def _v0_task_state(state: str) -> str:
    # A run a host manager refused (DROPPED) is, in v0's words, lost.
    return "LOST" if state == "DROPPED" else state


def pod_event(event: dict, job: JobRow, out: task_pb2.PodEvent) -> task_pb2.PodEvent:
    out.taskId.value = str(event.get("task_id") or "")
    out.actualState = _v0_task_state(str(event.get("state") or ""))
    out.goalState = GOALS.get(job.type, "SUCCEEDED")
    out.timestamp = convert.rfc3339(event.get("timestamp_ms"))
    out.configVersion = out.desiredConfigVersion = job.config_version
    out.hostname = str(event.get("host_id") or event.get("host") or "")
    out.message, out.reason = str(event.get("message") or ""), str(event.get("reason") or "")
    return out


def job_id(message: peloton_pb2.JobID) -> str:
    return message.value.strip()
