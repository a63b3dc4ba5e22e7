"""The store's jobs, tasks, task events and update workflows as Peloton's v1alpha messages
(stateless JobSpec, JobStatus, JobSummary, WorkflowInfo; pod PodSpec, PodStatus, PodEvent), pod
names and ids, and the entity version every v1alpha write is checked against."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import grpc
import yaml
from google.protobuf import json_format, message_factory
from google.protobuf.message import Message

from peloton.api.v0.job import job_pb2 as v0_job_pb2
from peloton.api.v0.task import task_pb2 as v0_task_pb2
from peloton.api.v1alpha import peloton_pb2
from peloton.api.v1alpha.job.stateless import stateless_pb2
from peloton.api.v1alpha.pod import pod_pb2
from peloton.model.stateless import is_stateless
from peloton.model.states import TASK_TERMINAL
from peloton.model.termination import termination_status
from peloton.model.usage import usage_in
from peloton.store.base import JobRow, TaskRow
from pelotonctl.api.rpc import convert
from pelotonctl.api.rpc.calls import Failed
from stages.admit.workflow import ACTIVE, PAUSED, RESTART, UPDATE

_VERSION = re.compile(r"(\d+)-(\d+)-(\d+)")
_POD_NAME = re.compile(r"(.+)-(\d+)")
# What each job type aims for, as Peloton's desired state.
_GOALS = {"SERVICE": "RUNNING", "BATCH": "SUCCEEDED"}
# Our task states that pod.proto has no word for: a placement a host manager refused is lost.
_POD_WORDS = {"DROPPED": "LOST"}
_CONTAINER_WORDS = {"INITIALIZED": "PENDING", "READY": "PENDING", "PLACING": "PENDING", "PLACED": "PENDING",
                    "LAUNCHING": "LAUNCHED", "PREEMPTING": "KILLING", "LOST": "FAILED", "DROPPED": "FAILED",
                    "DELETED": "KILLED"}
_HEALTH_WORDS = {"HEALTH_UNKNOWN": "UNKNOWN"}
# v0's words for constraints and health checks, which stateless specs here may hold too: v1alpha
# kept their numbers.
_V0_WORDS = {"LABEL_CONSTRAINT": 1, "AND_CONSTRAINT": 2, "OR_CONSTRAINT": 3, "TASK": 1, "HOST": 2,
             "CONDITION_LESS_THAN": 1, "CONDITION_EQUAL": 2, "CONDITION_GREATER_THAN": 3, "COMMAND": 1, "HTTP": 2}


# -- versions and names -------------------------------------------------------------------------

def entity_version(store: Any, job: JobRow, workflows: int | None = None) -> str:
    """The job's version as v1alpha's writes check it: <config version>-<desired state version>-
    <workflows the job has had>. A goal state is not versioned here (always 0); an update or a
    restart moves the version, pausing one does not."""
    count = len(store.updates_of_job(job.job_id)) if workflows is None else workflows
    return f"{job.config_version}-0-{count}"


def check_version(store: Any, job: JobRow, given: str) -> None:
    """A write's version, when given, must be the job's now (ABORTED if not): what it was read at
    has changed since."""
    given = given.strip()
    if not given:
        return
    if not _VERSION.fullmatch(given):
        raise Failed(grpc.StatusCode.INVALID_ARGUMENT, f"entity version {given!r} is not of the form <config "
                                                       "version>-<desired state version>-<workflow version>, e.g. "
                                                       "1-0-0 (as GetJob answers it)")
    current = entity_version(store, job)
    if given != current:
        raise Failed(grpc.StatusCode.ABORTED, f"entity version {given} is stale: the job is at {current}; read it "
                                              "again")


def config_version(given: str) -> int | None:
    """The config version an entity version (or a bare config version) names; None for none."""
    given = given.strip()
    if not given:
        return None
    first = given.split("-", 1)[0]
    if not first.isdigit() or int(first) < 1:
        raise Failed(grpc.StatusCode.INVALID_ARGUMENT, f"version {given!r}: an entity version (1-0-0) or a config "
                                                       "version (1)")
    return int(first)


def job_id_of(message: Any) -> str:
    """A request's job id, which v1alpha requires."""
    value = message.value.strip()
    if not value:
        raise Failed(grpc.StatusCode.INVALID_ARGUMENT, "job_id: the job's id is required")
    return value


def pod_name(job_id: str, instance: int) -> str:
    return f"{job_id}-{instance}"


def parse_pod_name(name: str) -> tuple[str, int]:
    """(job id, instance) of Peloton's pod name <job id>-<instance> (a job id may hold dashes)."""
    found = _POD_NAME.fullmatch(name.strip())
    if found is None:
        raise Failed(grpc.StatusCode.INVALID_ARGUMENT, f"pod name {name!r} is not of the form <job id>-<instance>, "
                                                       "e.g. my-job-0")
    return found.group(1), int(found.group(2))


def parse_pod_id(pod_id: str, job_id: str, instance: int) -> int:
    """The run of a pod id <job id>-<instance>-<run> of this pod."""
    prefix = pod_name(job_id, instance) + "-"
    run = pod_id.strip().removeprefix(prefix)
    if not pod_id.strip().startswith(prefix) or not run.isdigit():
        raise Failed(grpc.StatusCode.INVALID_ARGUMENT, f"pod id {pod_id!r} is not a run of pod "
                                                       f"{pod_name(job_id, instance)} ({prefix}<run>)")
    return int(run)


def ranges(instances: Iterable[int]) -> list[tuple[int, int]]:
    """Instances as Peloton's half-open [from, to) ranges, consecutive ones together."""
    out: list[list[int]] = []
    for i in sorted(set(instances)):
        if out and out[-1][1] == i:
            out[-1][1] = i + 1
        else:
            out.append([i, i + 1])
    return [(a, b) for a, b in out]


def add_ranges(field: Any, instances: Iterable[int]) -> None:
    for first, stop in ranges(instances):
        r = field.add()
        setattr(r, "from", first)
        r.to = stop


def pod_state(word: str | None) -> int:
    return convert.enum_value(pod_pb2.PodState, f"POD_STATE_{_POD_WORDS.get(word or '', word)}", "POD_STATE_INVALID")


def pod_state_word(word: str | None) -> str:
    return pod_pb2.PodState.Name(pod_state(word))


# -- job specs ----------------------------------------------------------------------------------

def job_spec(job: JobRow, text: str | None = None, out: stateless_pb2.JobSpec | None = None) -> stateless_pb2.JobSpec:
    """The job's config (the current one, or an earlier version's `text`) as a stateless JobSpec:
    a stateless spec as stored; a v0 config (defaultConfig) with what maps onto one."""
    out = out if out is not None else stateless_pb2.JobSpec()
    current = text is None
    try:
        doc = yaml.safe_load(job.config_text if current else text or "")
    except yaml.YAMLError:
        doc = None
    if isinstance(doc, dict) and is_stateless({str(k).lower(): v for k, v in doc.items()}):
        _lenient(_v1_words(doc, out.DESCRIPTOR), out)
    elif isinstance(doc, dict):
        _from_v0(_lenient(doc, v0_job_pb2.JobConfig()), out)
    out.respool_id.value = convert.pool_id(job.pool)
    out.name = out.name or job.name
    if current:
        out.instance_count = job.instance_count
        out.revision.version = job.config_version
        out.revision.created_at, out.revision.updated_at = job.created_ms, job.updated_ms
    return out


def _lenient(doc: dict, message: Message) -> Message:
    """The document read key by key, into nested messages too: a stored value the message cannot
    hold (of another type than its field's) leaves that one value out, not the whole spec."""
    fields = {convert.fold(f.name): f for f in message.DESCRIPTOR.fields}
    for key, value in doc.items():
        part = type(message)()
        try:
            convert.loose_parse({key: value}, part)
        except (json_format.ParseError, TypeError, ValueError):
            field = fields.get(convert.fold(key))
            if field is None or field.message_type is None:
                continue
            part = type(message)()
            _lenient_field(field, value, part)
        message.MergeFrom(part)
    return message



def _v1_words(doc: Any, descriptor: Any) -> Any:
    """The document with v0's enum words (_V0_WORDS) where v1alpha has other names for them, as
    their numbers (json_format leaves a word it does not know out)."""
    if not isinstance(doc, dict):
        return doc
    fields = {convert.fold(f.name): f for f in descriptor.fields}
    out = {}
    for key, value in doc.items():
        field = fields.get(convert.fold(key))
        if field is not None and field.enum_type is not None and isinstance(value, str):
            number = _V0_WORDS.get(value.upper())
            if value.lower() not in {v.name.lower() for v in field.enum_type.values} and \
                    number in field.enum_type.values_by_number:
                value = number
        elif field is not None and field.message_type is not None:
            inner = field.message_type
            if inner.GetOptions().map_entry:
                inner = inner.fields_by_name["value"].message_type
                if inner is not None and isinstance(value, dict):
                    value = {k: _v1_words(v, inner) for k, v in value.items()}
            elif isinstance(value, list):
                value = [_v1_words(v, inner) for v in value]
            else:
                value = _v1_words(value, inner)
        out[key] = value
    return out


def _lenient_field(field: Any, value: Any, part: Message) -> None:
    target = getattr(part, field.name)
    entry = field.message_type
    if entry.GetOptions().map_entry:
        value_type, key_type = entry.fields_by_name["value"], entry.fields_by_name["key"]
        for k, v in (value.items() if isinstance(value, dict) and value_type.message_type is not None else ()):
            if isinstance(v, dict) and (key_type.type == key_type.TYPE_STRING or str(k).isdigit()):
                inner = message_factory.GetMessageClass(value_type.message_type)()
                target[str(k) if key_type.type == key_type.TYPE_STRING else int(k)].CopyFrom(_lenient(v, inner))
    elif field.is_repeated:
        for item in value if isinstance(value, list) else ():
            if isinstance(item, dict):
                _lenient(item, target.add())
    elif isinstance(value, dict):
        _lenient(value, target)


def _from_v0(config: v0_job_pb2.JobConfig, out: stateless_pb2.JobSpec) -> None:
    out.name, out.owner, out.owning_team, out.description = (config.name, config.owner, config.owningTeam,
                                                             config.description)
    out.ldap_groups.extend(config.ldapGroups)
    out.labels.extend(peloton_pb2.Label(key=lb.key, value=lb.value) for lb in config.labels)
    out.instance_count = config.instanceCount
    sla = config.sla
    out.sla.priority, out.sla.preemptible, out.sla.revocable = sla.priority, sla.preemptible, sla.revocable
    out.sla.maximum_unavailable_instances = sla.maximumUnavailableInstances
    _pod_from_v0(config.defaultConfig, out.default_spec)
    for instance, task in config.instanceConfig.items():
        _pod_from_v0(task, out.instance_spec[instance])


def _pod_from_v0(task: v0_task_pb2.TaskConfig, pod: pod_pb2.PodSpec) -> None:
    """A v0 task config as a pod of one container. v1alpha kept v0's field numbers for constraints
    and health checks, so those are copied as bytes; the rest field by field."""
    if not task.ListFields():
        return
    pod.labels.extend(peloton_pb2.Label(key=lb.key, value=lb.value) for lb in task.labels)
    if task.HasField("constraint"):
        pod.constraint.ParseFromString(task.constraint.SerializeToString())
    if task.HasField("restartPolicy"):
        pod.restart_policy.max_failures = task.restartPolicy.maxFailures
    if task.HasField("preemptionPolicy"):
        pod.preemption_policy.kill_on_preempt = task.preemptionPolicy.killOnPreempt
    pod.controller, pod.revocable = task.controller, task.revocable
    pod.kill_grace_period_seconds = task.killGracePeriodSeconds
    container = pod.containers.add(name=task.name)
    r = task.resource
    container.resource.cpu_limit, container.resource.mem_limit_mb = r.cpuLimit, r.memLimitMb
    container.resource.disk_limit_mb, container.resource.gpu_limit = r.diskLimitMb, r.gpuLimit
    container.resource.fd_limit = r.fdLimit
    if task.HasField("command"):
        container.command.CopyFrom(task.command)
        if task.command.HasField("shell") and not task.command.shell and not task.command.environment.variables:
            # A command run without a shell is an entrypoint (run as given); not one with an
            # environment, which a stateless spec read back would lose beside its entrypoint. Mesos'
            # arguments are the whole argv, program first; an entrypoint's follow its program.
            container.entrypoint.value = task.command.value
            container.entrypoint.arguments.extend(task.command.arguments[1:])
        container.environment.extend(pod_pb2.Environment(name=v.name, value=v.value)
                                     for v in task.command.environment.variables)
    if task.HasField("container"):
        container.container.CopyFrom(task.container)
        container.image = task.container.docker.image or task.container.mesos.image.docker.name
    if task.HasField("healthCheck"):
        container.liveness_check.ParseFromString(task.healthCheck.SerializeToString())
    for port in task.ports:
        kind = "PORT_TYPE_STATIC" if port.value else "PORT_TYPE_DYNAMIC_ENV_VAR"
        container.ports.add(name=port.name, value=port.value, env_name=port.envName,
                            type=pod_pb2.PortSpec.PortType.Value(kind))


def pod_spec(spec: stateless_pb2.JobSpec, job_id: str, instance: int,
             out: pod_pb2.PodSpec | None = None) -> pod_pb2.PodSpec:
    """One instance's pod: the default spec with the instance's own over it, each field it sets
    winning (its container's field by field: a pod runs one container here)."""
    out = out if out is not None else pod_pb2.PodSpec()
    out.CopyFrom(spec.default_spec)
    if instance in spec.instance_spec:
        for field, value in spec.instance_spec[instance].ListFields():
            if field.name == "containers" and out.containers and value:
                for inner, inner_value in value[0].ListFields():
                    _set(out.containers[0], inner, inner_value)
            else:
                _set(out, field, value)
    out.pod_name.value = pod_name(job_id, instance)
    return out


def _set(message: Message, field: Any, value: Any) -> None:
    if field.is_repeated:
        target = getattr(message, field.name)
        del target[:]
        target.extend(value)
    elif field.message_type is not None:
        getattr(message, field.name).CopyFrom(value)
    else:
        setattr(message, field.name, value)


# -- job status ---------------------------------------------------------------------------------

def desired_job_state(job: JobRow) -> str:
    # A job stopped aims at KILLED; otherwise at what its type runs to.
    return "KILLED" if job.state in ("KILLING", "KILLED") else _GOALS.get(job.type, "SUCCEEDED")


def job_status(store: Any, job: JobRow, out: stateless_pb2.JobStatus, counts: dict[str, int] | None = None,
               workflows: list[dict] | None = None) -> stateless_pb2.JobStatus:
    """State, pod counts by pod state, version and the workflow in progress (or the last one)."""
    workflows = store.updates_of_job(job.job_id) if workflows is None else workflows
    counts = store.task_state_counts([job.job_id]).get(job.job_id, {}) if counts is None else counts
    out.state = convert.enum_value(stateless_pb2.JobState, f"JOB_STATE_{job.state}", "JOB_STATE_INVALID")
    out.desired_state = convert.enum_value(stateless_pb2.JobState, f"JOB_STATE_{desired_job_state(job)}",
                                           "JOB_STATE_INVALID")
    out.creation_time = convert.rfc3339(job.created_ms)
    for state, count in counts.items():
        word = pod_state_word(state)
        out.pod_stats[word] = out.pod_stats[word] + count
    out.version.value = entity_version(store, job, len(workflows))
    out.revision.version = job.config_version
    out.revision.created_at, out.revision.updated_at = job.created_ms, job.updated_ms
    wf = current_workflow(job, workflows)
    if wf is not None:
        workflow_status(wf, ordinal(wf, workflows), out.workflow_status)
    return out


def current_workflow(job: JobRow, workflows: list[dict]) -> dict | None:
    """The job's workflow in progress, or its last one (newest first, as the store gives them)."""
    active = (job.rollout or {}).get("update_id")
    return next((w for w in workflows if w["update_id"] == active), workflows[0] if workflows else None)


def ordinal(wf: dict, workflows: list[dict]) -> int:
    """Which of the job's workflows (1: its first) this is: the version count it moved the job to."""
    ids = [w["update_id"] for w in workflows]
    return len(ids) - ids.index(wf["update_id"]) if wf["update_id"] in ids else len(ids)


def job_info(store: Any, job: JobRow, out: stateless_pb2.JobInfo, counts: dict[str, int] | None = None,
             workflows: list[dict] | None = None) -> stateless_pb2.JobInfo:
    out.job_id.value = job.job_id
    job_spec(job, out=out.spec)
    job_status(store, job, out.status, counts, workflows)
    return out


def job_summary(store: Any, job: JobRow, out: stateless_pb2.JobSummary, counts: dict[str, int] | None = None,
                workflows: list[dict] | None = None) -> stateless_pb2.JobSummary:
    spec = job_spec(job)
    out.job_id.value = job.job_id
    out.name, out.owner, out.owning_team = spec.name, spec.owner or job.owner, spec.owning_team
    out.labels.extend(spec.labels)
    out.instance_count = job.instance_count
    out.respool_id.CopyFrom(spec.respool_id)
    out.sla.CopyFrom(spec.sla)
    job_status(store, job, out.status, counts, workflows)
    return out


# -- workflows ----------------------------------------------------------------------------------

def _workflow_state(word: str | None) -> int:
    return convert.enum_value(stateless_pb2.WorkflowState, f"WORKFLOW_STATE_{word}", "WORKFLOW_STATE_INVALID")


def _workflow_type(kind: str) -> int:
    # A rolling start or stop (a batch size given) is a workflow here; v1alpha has no type for it.
    return convert.enum_value(stateless_pb2.WorkflowType, f"WORKFLOW_TYPE_{kind}", "WORKFLOW_TYPE_INVALID")


def workflow_status(wf: dict, number: int, out: stateless_pb2.WorkflowStatus) -> stateless_pb2.WorkflowStatus:
    """An update workflow's state and counts; `number`: which of its job's workflows it is."""
    out.type, out.state = _workflow_type(wf["kind"]), _workflow_state(wf["state"])
    if wf["state"] == PAUSED and wf.get("paused_from"):
        out.prev_state = _workflow_state(wf["paused_from"])
    out.num_instances_completed, out.num_instances_failed = len(wf["done"]), len(wf["failed"])
    out.num_instances_remaining = len(wf["remaining"]) + len(wf["in_flight"])
    out.instances_current.extend(wf["in_flight"])
    out.version.value = f"{wf['to_version']}-0-{number}"
    out.prev_version.value = f"{wf['from_version']}-0-{max(number - 1, 0)}"
    out.creation_time, out.update_time = convert.rfc3339(wf["created_ms"]), convert.rfc3339(wf["updated_ms"])
    out.completion_time = convert.rfc3339(wf.get("completed_ms"))
    return out


def workflow_events(wf: dict) -> list[stateless_pb2.WorkflowEvent]:
    """A workflow's state changes, newest first. Only its first state and its state now are kept
    (the store holds the workflow, not its history)."""
    first = PAUSED if wf["options"].get("start_paused") and wf["instances"] else "ROLLING_FORWARD"
    events = [stateless_pb2.WorkflowEvent(type=_workflow_type(wf["kind"]), state=_workflow_state(first),
                                          timestamp=convert.rfc3339(wf["created_ms"]))]
    if wf["state"] != first:
        events.insert(0, stateless_pb2.WorkflowEvent(type=_workflow_type(wf["kind"]),
                                                     state=_workflow_state(wf["state"]),
                                                     timestamp=convert.rfc3339(wf["updated_ms"])))
    return events


def instance_workflow_events(wf: dict, instance: int) -> list[stateless_pb2.WorkflowEvent]:
    """Where the workflow is with one instance, newest first: begun when the workflow began, then
    done, failed or in flight as of its last change (no time is kept per instance)."""
    if instance not in wf["instances"] and instance not in wf["added"]:
        return []
    kind = _workflow_type(wf["kind"])
    begun = stateless_pb2.WorkflowEvent(type=kind, state=_workflow_state("ROLLING_FORWARD"),
                                        timestamp=convert.rfc3339(wf["created_ms"]))
    if instance in wf["failed"]:
        now = "FAILED"
    elif instance in wf["done"]:
        now = "SUCCEEDED"
    elif instance in wf["in_flight"] or instance in wf["added"]:
        now = wf["state"]
    else:  # not reached yet; never, if the workflow ended first
        return [begun] if wf["state"] in ACTIVE else []
    if now == "ROLLING_FORWARD":
        return [begun]
    return [stateless_pb2.WorkflowEvent(type=kind, state=_workflow_state(now),
                                        timestamp=convert.rfc3339(wf["updated_ms"])), begun]


def workflow_info(wf: dict, number: int, out: stateless_pb2.WorkflowInfo, instance_events: bool = False,
                  events_limit: int = 0) -> stateless_pb2.WorkflowInfo:
    """A workflow: its status, the spec it was started with, its events and the instances it
    added, removed and replaced."""
    workflow_status(wf, number, out.status)
    options = wf["options"]
    if wf["kind"] == RESTART:
        out.restart_spec.batch_size, out.restart_spec.in_place = options["batch_size"], options["in_place"]
        add_ranges(out.restart_spec.ranges, wf["instances"])
    elif wf["kind"] == UPDATE:
        spec = out.update_spec
        spec.batch_size, spec.rollback_on_failure = options["batch_size"], options["rollback_on_failure"]
        spec.max_instance_retries = options["max_instance_retries"]
        spec.max_tolerable_instance_failures = options["max_failure_instances"]
        spec.start_paused, spec.in_place = options["start_paused"], options["in_place"]
        add_ranges(out.instances_updated, wf["instances"])
    out.events.extend(workflow_events(wf))
    add_ranges(out.instances_added, wf["added"])
    add_ranges(out.instances_removed, wf.get("removed", []))
    if instance_events:
        for instance in sorted(set(wf["instances"]) | set(wf["added"])):
            events = instance_workflow_events(wf, instance)
            if events:
                out.instance_events.add(instance_id=instance, events=events[:events_limit or None])
    return out


# -- pods ---------------------------------------------------------------------------------------

def run_starts(events: Iterable[dict]) -> dict[tuple[int, int], int]:
    """When each run (instance, run) first went RUNNING: Peloton's start time of a pod."""
    starts: dict[tuple[int, int], int] = {}
    for e in events:
        if e["state"] == "RUNNING":
            starts.setdefault((e["instance"], e["run_id"]), e["timestamp_ms"])
    return starts


def desired_pod_state(job: JobRow, task: TaskRow) -> str:
    if task.state == "DELETED":
        return "DELETED"
    if task.reason == "STOPPED" and task.state in ("KILLING", "KILLED"):
        return "KILLED"
    return _GOALS.get(job.type, "SUCCEEDED")


def pod_versions(job: JobRow, instance: int, current: str) -> tuple[str, str]:
    """(the version a pod runs, the one it should): an instance the workflow in progress has yet
    to replace runs the version before it."""
    wf = job.rollout or {}
    if wf.get("state") in ACTIVE and instance in (wf.get("remaining", []) + wf.get("in_flight", [])):
        config, _, count = current.split("-")
        return f"{wf.get('from_version', config)}-0-{max(int(count) - 1, 0)}", current
    return current, current


def pod_status(job: JobRow, task: TaskRow, out: pod_pb2.PodStatus, version: str = "",
               started_ms: int | None = None) -> pod_pb2.PodStatus:
    """A task's current run: state, ids, host, why, how it ended, its one container."""
    out.state = pod_state(task.state)
    out.desired_state = pod_state(desired_pod_state(job, task))
    out.pod_id.value = out.desired_pod_id.value = task.task_id
    if task.run_id > 1:
        out.prev_pod_id.value = f"{pod_name(job.job_id, task.instance)}-{task.run_id - 1}"
    out.host = out.host_id = task.host_id
    out.message, out.reason, out.failure_count = task.message, task.reason, task.failures
    out.start_time = convert.rfc3339(started_ms)
    if task.state in TASK_TERMINAL:
        out.completion_time = convert.rfc3339(task.updated_ms)
    if version:
        out.version.value, out.desired_version.value = pod_versions(job, task.instance, version)
    cpu = usage_in(task.message)["cpu_seconds"]
    if cpu is not None:
        out.resource_usage["cpu"] = cpu
    container = out.containers_status.add(name=pod_name(job.job_id, task.instance))
    container.state = convert.enum_value(pod_pb2.ContainerState,
                                         f"CONTAINER_STATE_{_CONTAINER_WORDS.get(task.state, task.state)}",
                                         "CONTAINER_STATE_INVALID")
    container.message, container.reason, container.failure_count = task.message, task.reason, task.failures
    container.image = str((task.spec or {}).get("image") or "")
    container.start_time, container.completion_time = out.start_time, out.completion_time
    if task.health:
        container.healthy.state = convert.enum_value(
            pod_pb2.HealthState, f"HEALTH_STATE_{_HEALTH_WORDS.get(task.health, task.health)}", "HEALTH_STATE_INVALID")
    _termination(task.state, task.reason, task.exit_code, task.signal, container.terminationStatus)
    return out


def _termination(state: str, reason: str, exit_code: int | None, signal: int | None,
                 out: pod_pb2.TerminationStatus) -> None:
    ended = termination_status(state, reason)
    if ended:
        out.reason = convert.enum_value(pod_pb2.TerminationStatus.Reason, ended, "TERMINATION_STATUS_REASON_INVALID")
        out.exit_code = max(exit_code or 0, 0)
        if signal:
            out.signal = str(signal)


def pod_summary(job: JobRow, task: TaskRow, out: pod_pb2.PodSummary, version: str = "",
                started_ms: int | None = None) -> pod_pb2.PodSummary:
    out.pod_name.value = pod_name(job.job_id, task.instance)
    pod_status(job, task, out.status, version, started_ms)
    return out


def earlier_runs(job: JobRow, task: TaskRow, events: Iterable[dict]) -> list[pod_pb2.PodStatus]:
    """The instance's runs before its current one, newest first, each as its last event left it."""
    runs: dict[int, list[dict]] = {}
    for e in events:
        if e["instance"] == task.instance and e["run_id"] < task.run_id:
            runs.setdefault(e["run_id"], []).append(e)
    out = []
    for run in sorted(runs, reverse=True):
        last, started = runs[run][-1], next((e["timestamp_ms"] for e in runs[run] if e["state"] == "RUNNING"), None)
        status = pod_pb2.PodStatus(state=pod_state(last["state"]), host=last["host_id"] or "",
                                   host_id=last["host_id"] or "", message=last["message"] or "",
                                   reason=last["reason"] or "", start_time=convert.rfc3339(started))
        status.pod_id.value = last["task_id"]
        if run > 1:
            status.prev_pod_id.value = f"{pod_name(job.job_id, task.instance)}-{run - 1}"
        if last["state"] in TASK_TERMINAL:
            status.completion_time = convert.rfc3339(last["timestamp_ms"])
        container = status.containers_status.add(name=pod_name(job.job_id, task.instance))
        _termination(last["state"], last["reason"] or "", last["exit_code"], None, container.terminationStatus)
        out.append(status)
    return out


def pod_event(job: JobRow, event: dict, out: pod_pb2.PodEvent, version: str = "") -> pod_pb2.PodEvent:
    """A run's state change as v1alpha's PodEvent (states as pod.proto's names)."""
    out.pod_id.value = out.desired_pod_id.value = str(event["task_id"])
    if event["run_id"] > 1:
        out.prev_pod_id.value = f"{pod_name(job.job_id, event['instance'])}-{event['run_id'] - 1}"
    out.actual_state = pod_state_word(event["state"])
    out.desired_state = pod_state_word(_GOALS.get(job.type, "SUCCEEDED"))
    out.timestamp = convert.rfc3339(event["timestamp_ms"])
    out.version.value = out.desired_version.value = version
    out.hostname = out.agent_id = str(event.get("host_id") or "")
    out.message, out.reason = str(event.get("message") or ""), str(event.get("reason") or "")
    return out
