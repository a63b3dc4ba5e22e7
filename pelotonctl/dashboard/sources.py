"""What the dashboard shows, read where pelotonctl reads it: the stage groups' lag from the broker
(pelotonctl.lag), pool usage and host state from the compacted topics, jobs and tasks from the store.

Every method returns plain JSON-able data, or raises SourceUnavailable naming the broker or the
store that did not answer (the dashboard shows that beside the last data it had)."""

from __future__ import annotations

import functools
import time
from collections import defaultdict

from confluent_kafka import KafkaException, TopicPartition

from peloton.config import Settings
from peloton.model.states import JOB_STATES, JOB_TERMINAL, UNPLACED
from peloton.runtime import CompactedView, error_text
from peloton.store import QueryStore, store_unavailable
from pelotonctl.admin import host_row
from pelotonctl.watch import late_start_s, not_started
from pelotonctl.watch import unplaced as unplaced_tasks
from stages.entitle.usage import pool_view, up_to_root

NOT_TERMINAL = [s for s in JOB_STATES if s not in JOB_TERMINAL]
# A topic read this recently is not read again: pools, hosts and pending of one sample share it.
SAME_SAMPLE_S = 1.0
NOT_STARTED_READ = 500  # launched runs not started, read per sample (the longest waiting)


class SourceUnavailable(RuntimeError):
    """The broker or the store did not answer; the message says which and why."""


def _unavailable(method):
    """Turn the broker's and the store's own errors into one the page can show as it is."""

    @functools.wraps(method)
    def wrapper(self: Sources, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except KafkaException as exc:
            raise SourceUnavailable(f"broker at {self.settings.bootstrap} is unavailable: {error_text(exc)}") from exc
        except store_unavailable() as exc:
            raise SourceUnavailable(f"store is unavailable: {exc}") from exc
        except ConnectionError as exc:  # the lag sampler's: it says what was unavailable
            raise SourceUnavailable(str(exc)) from exc

    return wrapper


class Sources:
    """One reader of everything the page shows, used by one sampling thread at a time.

    The compacted topics are read by views kept open for the life of this object: each sample
    reads only what arrived since the last one (reading host-state from its start every two
    seconds would cost more the longer the cluster runs)."""

    def __init__(self, settings: Settings, store: QueryStore, lag_monitor=None, wait_s: float = 3.0):
        self.settings = settings
        self.store = store
        self.wait_s = wait_s
        self._lag = lag_monitor  # what lag() reads (its sample()): made on first use unless given
        self._views: dict[str, CompactedView] = {}
        self._last_read: dict[str, tuple[float, str | None]] = {}  # topic -> (monotonic time, problem)

    def cluster(self) -> dict:
        """What the header names: which broker and which pipeline (topic prefix)."""
        return {"bootstrap": self.settings.bootstrap, "topic_prefix": self.settings.topic_prefix}

    # -- the broker ----------------------------------------------------------------------
    @_unavailable
    def lag(self) -> dict:
        """Per stage group: status word (since when, and why), lag, held messages, per partition
        offsets; and the demand queued in each pool (as `pelotonctl lag --json` gives it).

        Where an API runs (PELOTON_API_URL, a dev stack's by default) this is its lag sampler's
        view, so the page tells the status `pelotonctl lag`, `job status` and the API's
        peloton_group_status series tell; else a sampler of the same kind runs in this process."""
        if self._lag is None:
            from pelotonctl.lag_sampler import LagOverApi, LagSampler

            if self.settings.api_url:
                self._lag = LagOverApi(self.settings)
            else:
                self._lag = sampler = LagSampler(self.settings)
                sampler.start()
        return self._lag.sample()

    def _read(self, topic: str) -> CompactedView:
        """The view of a compacted topic, read up to its end now. Methods called one after the
        other in a sample share one reading (and one wait, when the broker does not answer)."""
        view = self._views.get(topic)
        if view is None:
            view = self._views[topic] = CompactedView(self.settings, topic)
        read_at, problem = self._last_read.get(topic, (-SAME_SAMPLE_S, None))
        if time.monotonic() - read_at < SAME_SAMPLE_S:
            if problem:
                raise SourceUnavailable(problem)
            return view
        caught_up = view.catch_up(timeout=self.wait_s)
        problem = None if caught_up else (f"broker at {self.settings.bootstrap} is unavailable: "
                                          f"{view.spec.name} not read to its end within {self.wait_s:g}s")
        self._last_read[topic] = (time.monotonic(), problem)
        if problem:
            raise SourceUnavailable(problem)
        if _past_the_end(view):
            # The broker restarted empty and serves a new log from 0: read it again from there
            # (the writers publish every key again, so the values kept are replaced in time).
            view.rewind()
            view.catch_up(timeout=self.wait_s)
        return view

    @_unavailable
    def pools(self) -> list[dict]:
        """Per pool, the root "/" first: reservation, limit, entitlement, allocation and demand per
        kind (as `respool get` computes them), queued gangs and the first of them waiting."""
        usage, hosts = self._read("entitlements"), self._read("host-state")
        pools = {p: c for p, c in self.store.list_pools().items() if not c.get("deleted")}
        published = dict(usage.values)
        view = pool_view(pools, published, list(hosts.values.values()))
        # A parent's queue is its children's, as pool_view rolls up allocation and demand.
        queued: dict[str, int] = defaultdict(int)
        preempting: dict[str, int] = defaultdict(int)
        for path, rec in published.items():
            if path not in view:
                continue  # a deleted pool's last record
            for node in up_to_root(pools, path):
                queued[node] += rec.get("queued_gangs", 0)
                preempting[node] += rec.get("preempting", 0)
        return [{**v, "parent": pools[path]["parent"] if path in pools else None,
                 "leaf": path in pools and not any(c["parent"] == path for c in pools.values()),
                 "queued_gangs": queued[path], "preempting": preempting[path],
                 "computed_ms": published.get(path, {}).get("computed_ms")}
                for path, v in view.items()]

    @_unavailable
    def hosts(self) -> list[dict]:
        """Every host as its host manager last reported it (the rows of `host list`)."""
        records = self._read("host-state").values.values()
        return [host_row(h) for h in sorted(records, key=lambda r: r["host_id"])]

    # -- the store -----------------------------------------------------------------------
    @_unavailable
    def jobs(self, limit: int = 50) -> list[dict]:
        """The most recent jobs, with their tasks counted by state and their latest update or
        restart: its state, progress and why it is where it is (paused, waiting, failed, rolled
        back)."""
        rows = self.store.list_jobs(limit)
        counts = self.store.task_state_counts([j.job_id for j in rows]) if rows else {}
        return [{"job_id": j.job_id, "name": j.name, "pool": j.pool, "owner": j.owner, "type": j.type,
                 "state": j.state, "instances": j.instance_count, "tasks": counts.get(j.job_id, {}),
                 "created_ms": j.created_ms, "completed_ms": j.completed_ms, "update": self._latest_update(j)}
                for j in rows]

    def _latest_update(self, job) -> dict | None:
        wf = job.rollout or next(iter(self.store.updates_of_job(job.job_id)), None)  # newest first
        if not wf or "update_id" not in wf:
            return None
        return {"update_id": wf["update_id"], "kind": wf["kind"], "state": wf["state"], "message": wf["message"],
                "done": len(wf["done"]), "total": len(wf["instances"])}

    @_unavailable
    def pending(self, limit: int = 50) -> list[dict]:
        """Why tasks wait, per job still running with PENDING tasks (of the `limit` most recent):
        its gangs among the first of its pool's queue with the resource manager's reason, and
        the tasks placement sent back because no host took them; and per job with runs launched
        a while ago that their agent has not started, which hosts they wait on (`job status`
        tells the same)."""
        jobs = self.store.list_jobs(limit, states=NOT_TERMINAL)
        now = int(time.time() * 1000)
        late: dict[str, list] = defaultdict(list)  # job id -> its runs launched and not started
        for task in self.store.tasks_in_states(["LAUNCHED"], now - int(late_start_s(self.settings) * 1000),
                                               limit=NOT_STARTED_READ):
            late[task.job_id].append(task)
        listed = {job.job_id for job in jobs}
        jobs += [job for job in self.store.get_jobs([j for j in late if j not in listed]).values()
                 if job.state not in JOB_TERMINAL]
        if not jobs:
            return []
        counts = self.store.task_state_counts([j.job_id for j in jobs])
        waiting: dict[str, list[dict]] = defaultdict(list)
        for pool, rec in self._read("entitlements").values.items():
            for gang in rec.get("waiting", []):
                waiting[gang["job_id"]].append({**gang, "pool": pool})
        out = []
        for job in jobs:
            pending = sum(counts.get(job.job_id, {}).get(s, 0) for s in UNPLACED)
            if not pending and job.job_id not in late:
                continue
            unplaced = [{"instance": t.instance, "run_id": t.run_id, "reason": t.reason, "message": t.message}
                        for t in unplaced_tasks(self.store.tasks_of_job(job.job_id))][:20] if pending else []
            out.append({"job_id": job.job_id, "name": job.name, "pool": job.pool, "state": job.state,
                        "pending": pending, "waiting": waiting.get(job.job_id, []), "unplaced": unplaced,
                        "not_started": not_started(late.get(job.job_id, []), now, 0)[:20]})
        return out

    def close(self) -> None:
        if self._lag is not None:
            self._lag.close()
        for view in self._views.values():
            view.close()
        self._views.clear()


def _past_the_end(view: CompactedView) -> bool:
    """Whether the view has read past a partition's end: the log it read is gone."""
    parts = [TopicPartition(view.spec.name, p) for p in range(view.spec.partitions)]
    try:
        for tp in view.consumer.position(parts):
            _low, high = view.consumer.get_watermark_offsets(tp, cached=True)
            if 0 <= high < tp.offset:
                return True
    except KafkaException:
        return False  # not answering is told by catch_up, not here
    return False
