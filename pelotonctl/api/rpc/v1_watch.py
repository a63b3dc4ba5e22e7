"""Peloton's v1alpha WatchService: changes of jobs and pods streamed as they happen. The store is
polled (every POLL_S) and only what changed since the last poll is sent, from the moment the watch
starts (no earlier revision is kept). A watch sees only the jobs its caller may read, ends when
its client goes, and Cancel ends one this process serves."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grpc

from peloton.api.v1alpha import peloton_pb2
from peloton.api.v1alpha.watch.svc import watch_svc_pb2 as svc
from peloton.model.states import JOB_TERMINAL
from peloton.store.base import JobRow, TaskRow
from pelotonctl.api.refusals import Refused
from pelotonctl.api.rpc import server
from pelotonctl.api.rpc.calls import Call, Failed
from pelotonctl.api.rpc.catalog import served
from pelotonctl.api.rpc.v1_shapes import (
    entity_version,
    job_spec,
    job_summary,
    parse_pod_name,
    pod_name,
    pod_summary,
    run_starts,
)

SERVICE = "peloton.api.v1alpha.watch.svc.WatchService"
POLL_S = 0.5
# Watching every job's pods reads a job's tasks when its row or counts changed, and every job's
# tasks each SWEEP_EVERY polls (what the counts do not show: a health check's, a message's change).
SWEEP_EVERY = 10
# Each watch holds one of the server's workers while it lasts: half stay for every other call.
MAX_WATCHES = server.WORKERS // 2


@dataclass
class _Entry:
    user: str
    stop: threading.Event
    cancelled: bool = False


_WATCHES: dict[str, _Entry] = {}
_LOCK = threading.Lock()


@served(f"{SERVICE}/Watch", streams=True)
def watch(call: Call, request: svc.WatchRequest) -> Iterator[svc.WatchResponse]:
    """The watch's id first (with the jobs and pods named that are not there), then a response
    each time something watched changed, until the client cancels or Cancel ends it (CANCELLED)."""
    if request.start_revision:
        raise Failed(grpc.StatusCode.OUT_OF_RANGE, "start_revision: no earlier revision is kept here; watch from "
                                                   "now (0)")
    if not (request.HasField("stateless_job_filter") or request.HasField("pod_filter")):
        raise Failed(grpc.StatusCode.INVALID_ARGUMENT, "nothing to watch: set stateless_job_filter, pod_filter or "
                                                       "both")
    who = call.door.who(call.creds, "job.read", "watch")
    watcher = _Watcher(call, who, request)
    watch_id, entry = uuid.uuid4().hex, _Entry(who.user, threading.Event())
    with _LOCK:
        if len(_WATCHES) >= MAX_WATCHES:
            raise Failed(grpc.StatusCode.RESOURCE_EXHAUSTED, f"{len(_WATCHES)} watches are served already, the most "
                                                             "this API serves at once: cancel one, or try later")
        _WATCHES[watch_id] = entry
    call.context.add_callback(entry.stop.set)  # the client going wakes the loop at once
    try:
        first = watcher.poll(send=False)  # what is there now: only changes from here on are sent
        first.watch_id, first.revision = watch_id, _revision()
        yield first
        while not entry.stop.wait(POLL_S) and call.active():
            changes = watcher.poll()
            if changes.stateless_jobs or changes.stateless_jobs_not_found or changes.pods or changes.pods_not_found:
                changes.watch_id, changes.revision = watch_id, _revision()
                yield changes
        if entry.cancelled:
            raise Failed(grpc.StatusCode.CANCELLED, f"watch {watch_id} was cancelled (Cancel)")
    finally:
        with _LOCK:
            _WATCHES.pop(watch_id, None)


@served(f"{SERVICE}/Cancel")
def cancel(call: Call, request: svc.CancelRequest) -> svc.CancelResponse:
    """End a watch of the caller's that this API instance serves (NOT_FOUND for any other)."""
    who = call.door.who(call.creds, "job.read", "watch")
    with _LOCK:
        entry = _WATCHES.get(request.watch_id.strip())
        if entry is None or entry.user != who.user:
            raise Failed(grpc.StatusCode.NOT_FOUND, f"no watch {request.watch_id!r} of yours is served here (a watch "
                                                    "is cancelled where it is served, while it lasts)")
        entry.cancelled = True
        entry.stop.set()
    return svc.CancelResponse()


def _revision() -> int:
    # The server's time in ms: later responses have later revisions.
    return int(time.time() * 1000)


class _Watcher:
    """What one watch looks at, and what it last saw of each job and pod."""

    def __init__(self, call: Call, who: Any, request: svc.WatchRequest) -> None:
        self.call, self.store, self.who = call, call.store, who
        self.jobs_on, self.pods_on = request.HasField("stateless_job_filter"), request.HasField("pod_filter")
        jobs, pods = request.stateless_job_filter, request.pod_filter
        # None: every job the caller may read
        self.job_ids = ({j.value.strip() for j in jobs.job_ids if j.value.strip()} or None) if self.jobs_on else set()
        self.job_labels = {(lb.key, lb.value) for lb in jobs.labels}
        self.pod_job = (pods.job_id.value.strip() or None) if self.pods_on else None
        self.pod_labels = {(lb.key, lb.value) for lb in pods.labels}
        self.instances: set[int] | None = None  # None: every pod of the job
        if self.pod_job and pods.pod_names:
            self.instances = set()
            for name in pods.pod_names:
                job_id, instance = parse_pod_name(name.value)
                if job_id != self.pod_job:
                    raise Failed(grpc.StatusCode.INVALID_ARGUMENT, f"pod_filter.pod_names: {name.value} is not a pod "
                                                                   f"of pod_filter.job_id {self.pod_job}")
                self.instances.add(instance)
        self.missing: set[str] = set()  # jobs named that are not there (said once)
        for job_id in sorted(self._named()):
            try:
                call.door.readable_job(job_id, call.creds)  # a job named is read as GetJob reads it
            except Refused as exc:
                if exc.status != 404 or job_id == self.pod_job:
                    raise
                self.missing.add(job_id)
        self.seen_jobs: dict[str, tuple] = {}
        self.seen_pods: dict[tuple[str, int], tuple] = {}
        self.labels: dict[tuple[str, int], set] = {}
        self.readable: dict[str, bool] = {}
        self.polls = 0

    def poll(self, send: bool = True) -> svc.WatchResponse:
        """What changed since the last poll (with send=False: nothing, only noted)."""
        out = svc.WatchResponse()
        self.polls += 1
        self.readable.clear()  # permissions are asked again each poll: a grant may have changed
        rows, gone = self._jobs()
        counts = self.store.task_state_counts(list(rows)) if rows else {}
        changed = []
        for job_id, job in rows.items():
            mark = (job.state, job.updated_ms, job.config_version, job.instance_count,
                    (job.rollout or {}).get("state"), (job.rollout or {}).get("updated_ms"),
                    tuple(sorted(counts.get(job_id, {}).items())))
            if self.seen_jobs.get(job_id) != mark:
                changed.append(job_id)
            self.seen_jobs[job_id] = mark
        if self.jobs_on and send:
            for job_id in changed:
                if self._job_wanted(rows[job_id]):
                    job_summary(self.store, rows[job_id], out.stateless_jobs.add(), counts.get(job_id, {}))
        if self.pods_on:
            sweep = self.pod_job is not None or self.polls % SWEEP_EVERY == 1
            for job_id in (list(rows) if sweep else changed):
                if self.pod_job in (None, job_id):
                    self._pods(rows[job_id], out, send)
        for job_id in gone:
            self._forget(job_id, out, send)
        if self.jobs_on and not send:  # the jobs named that are not there, in the first response
            out.stateless_jobs_not_found.extend(peloton_pb2.JobID(value=j) for j in sorted(self.missing))
        named = self._named()
        for job_id in [j for j, job in rows.items() if job.state in JOB_TERMINAL and j not in named]:
            # An ended job leaves the watch of every job (it would be read each poll for ever); if
            # it runs again, it is back among the active jobs, and is sent then.
            self.seen_jobs.pop(job_id, None)
            for key in [k for k in self.seen_pods if k[0] == job_id]:
                del self.seen_pods[key]
        return out

    def _named(self) -> set[str]:
        return (self.job_ids or set()) | ({self.pod_job} if self.pod_job else set())

    def _every_job(self) -> bool:
        return (self.jobs_on and self.job_ids is None) or (self.pods_on and self.pod_job is None)

    def _jobs(self) -> tuple[dict[str, JobRow], list[str]]:
        """The jobs watched now, readable ones only, and those seen before that are gone."""
        named = self._named()
        rows: dict[str, JobRow] = {}
        if self._every_job():
            rows = {j.job_id: j for j in self.store.active_jobs() if self._may_read(j)}
        wanted = (named | set(self.seen_jobs)) - set(rows)
        found = self.store.get_jobs(sorted(wanted)) if wanted else {}
        rows.update((i, j) for i, j in found.items() if i in named or self._may_read(j))
        gone = [i for i in wanted if i not in found and (i in self.seen_jobs or i in named - self.missing)]
        return rows, gone

    def _may_read(self, job: JobRow) -> bool:
        if job.pool not in self.readable:
            self.readable[job.pool] = self.call.door.may(self.who, "job.read", job.pool)
        return self.readable[job.pool]

    def _job_wanted(self, job: JobRow) -> bool:
        if self.job_ids is not None and job.job_id not in self.job_ids:
            return False
        return not self.job_labels or self.job_labels <= self._job_labels(job)

    def _job_labels(self, job: JobRow) -> set:
        key = (job.job_id, job.config_version)
        if key not in self.labels:
            self.labels[key] = {(lb.key, lb.value) for lb in job_spec(job).labels}
        return self.labels[key]

    def _pods(self, job: JobRow, out: svc.WatchResponse, send: bool) -> None:
        every = self.store.tasks_of_job(job.job_id)
        tasks = [t for t in every if self._pod_wanted(t)]
        changed = []
        for task in tasks:
            mark = (task.run_id, task.state, task.updated_ms, task.host_id, task.health, task.reason, task.message,
                    task.failures)
            if self.seen_pods.get((job.job_id, task.instance)) != mark:
                changed.append(task)
            self.seen_pods[(job.job_id, task.instance)] = mark
        wanted, present = {t.instance for t in tasks}, {t.instance for t in every}
        for key in [k for k in self.seen_pods if k[0] == job.job_id and k[1] not in wanted]:
            del self.seen_pods[key]
            if send and key[1] not in present:  # removed by a shrink: said gone once
                out.pods_not_found.add().value = pod_name(*key)
        if not send:
            out.pods_not_found.extend(peloton_pb2.PodName(value=pod_name(job.job_id, i))
                                      for i in sorted((self.instances or set()) - present))
            return
        if changed:
            version = entity_version(self.store, job)
            starts = run_starts(self.store.task_events(job.job_id))
            for task in changed:
                pod_summary(job, task, out.pods.add(), version, starts.get((task.instance, task.run_id)))

    def _pod_wanted(self, task: TaskRow) -> bool:
        if self.instances is not None and task.instance not in self.instances:
            return False
        labels = (task.spec or {}).get("labels") or {}
        return all(labels.get(k) == v for k, v in self.pod_labels)

    def _forget(self, job_id: str, out: svc.WatchResponse, send: bool) -> None:
        """A job deleted: said not found once (its pods too), then no longer watched."""
        self.seen_jobs.pop(job_id, None)
        self.missing.add(job_id)  # a job named stays named: said once
        pods = sorted(k for k in self.seen_pods if k[0] == job_id)
        for key in pods:
            del self.seen_pods[key]
        if not send:
            return
        if self.jobs_on and (self.job_ids is None or job_id in self.job_ids):
            out.stateless_jobs_not_found.add().value = job_id
        if self.pods_on:
            out.pods_not_found.extend(peloton_pb2.PodName(value=pod_name(*k)) for k in pods)

