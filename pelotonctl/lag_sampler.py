"""The lag of every stage group, sampled by a process that is none of the groups.

A stage instance exports only its own group's lag (kafka_consumergroup_lag), so when a stage's
last instance dies its series go with it and a dashboard shows a gap. The sampler asks the
brokers instead, once a second: each group's committed offsets, the log ends and the members
its coordinator lists (pelotonctl.lag, in a process of its own: pelotonctl.lag_child). It keeps
the windows of samples the status words are read from, since when each group has had its
status, and the last report; with `export` it sets these Prometheus series:

  peloton_group_lag{group, stage, topic, partition}          messages: log end - committed offset
  peloton_group_lag_seconds{group, stage, topic, partition}  how long the oldest has waited
  peloton_group_status{group, stage, status}                 1 for the group's status, 0 for the others
  peloton_group_members{group, stage}                        members its coordinator lists
  peloton_group_sampled_timestamp_seconds{group, stage}      when the values above were sampled

They go on, and the lag grows, while a group has no live member: the offsets are the brokers'.

The API holds one (pelotonctl.api.operations: its /metrics, and so the dev stack's). `pelotonctl
lag` through the API, the dashboard and `job status` read that one view, so they tell one status:

    sampler = LagSampler(settings, export=True)
    sampler.start()                         # a thread, sampling every SAMPLE_EVERY_S
    sampler.view(("launch",))               # the last report (pelotonctl.lag's shape, and since when)
    sampler.stage_health()["launch"]        # ("STALL", 1767000000.0, "12 messages wait unread ...")
    sampler.close()
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Protocol

from confluent_kafka import KafkaException

from peloton import metrics
from peloton.config import Settings
from peloton.runtime import error_text
from pelotonctl.lag import STAGES, STALL_AFTER_S, STATUSES
from pelotonctl.lag_child import LagInChild, LagUnavailable

log = logging.getLogger("pelotonctl.lag")

# A dead group's status is told within STALL_AFTER_S and one period of its last member's death.
SAMPLE_EVERY_S = 1.0
STATUS_WINDOW = 10  # samples a status word looks back over (WARN: lag grew at each of them)
KEPT = 60  # samples kept per partition: how long a stall can be measured back
FIRST_SAMPLE_S = 30.0  # a reader asking before the first sample waits this long for it at most
UNKNOWN = "UNKNOWN"  # stage_health's word where the sampler has no status to give


class Monitor(Protocol):
    def sample(self, stages: tuple[str, ...] | None = None, window: int | None = None) -> dict: ...

    def close(self) -> None: ...


class LagSampler:
    """Samples every stage group every `every_s` in a thread of its own; serves the last report.
    The monitor is a LagInChild unless one is given (tests give a fake)."""

    def __init__(self, settings: Settings, every_s: float = SAMPLE_EVERY_S, window: int = STATUS_WINDOW,
                 export: bool = False, monitor: Monitor | None = None) -> None:
        self.settings = settings
        self.every_s, self.window, self.export = every_s, window, export
        self._monitor: Monitor = monitor or LagInChild(settings, KEPT)  # no process until the first sample
        self._lock = threading.Lock()
        self._report: dict | None = None
        self._error: tuple[str, float] | None = None  # why the last sample failed, and since when
        self._since: dict[str, tuple[str, float]] = {}  # stage -> (status, since when: epoch seconds)
        self._started_s = time.time()
        self._answered = threading.Event()  # the first sample ended, either way
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- sampling ------------------------------------------------------------------------------
    def start(self) -> None:
        """Sample from now on (again: nothing)."""
        with self._lock:
            if self._thread is not None or self._stop.is_set():
                return
            self._started_s = time.time()
            self._thread = threading.Thread(target=self._run, name="lag-sampler", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            self.sample_once()
            self._stop.wait(max(0.0, self.every_s - (time.monotonic() - started)))

    def sample_once(self) -> None:
        """One sample: the report kept, each group's since updated, the series set."""
        try:
            report = self._monitor.sample(None, self.window)
        except ConnectionError as exc:  # LagUnavailable: it says what was unavailable
            self._failed(str(exc))
            return
        except KafkaException as exc:
            self._failed(f"broker at {self.settings.bootstrap} is unavailable: {error_text(exc)}")
            return
        except Exception as exc:  # noqa: BLE001 - a bug in one sample must not end the sampling
            log.exception("lag sample failed")
            self._failed(f"{type(exc).__name__}: {exc}")
            return
        at = report["sampled_ms"] / 1000
        with self._lock:
            for group in report["groups"]:
                held = self._since.get(group["stage"])
                if held is None or held[0] != group["status"]:
                    self._since[group["stage"]] = held = (group["status"], at)
                group["status_since_ms"] = int(held[1] * 1000)
            if self._error is not None:
                log.info("lag sampled again after: %s", self._error[0])
            self._report, self._error = report, None
        if self.export:
            export(report)
        self._answered.set()

    def _failed(self, why: str) -> None:
        with self._lock:
            if self._error is None or self._error[0] != why:  # logged once per new error, not every second
                log.warning("lag not sampled: %s", why)
            self._error = (why, self._error[1] if self._error else time.time())
        self._answered.set()

    # -- what readers see ------------------------------------------------------------------------
    def view(self, stages: tuple[str, ...] | None = None, wait_s: float = FIRST_SAMPLE_S) -> dict:
        """The last report (pelotonctl.lag's sample, each group with `status_since_ms`) of `stages`
        (default all), with the sampler's own terms under "sampler". Waits for the first sample up
        to wait_s; raises LagUnavailable when the last sample failed (the broker is away) or none
        came."""
        self._answered.wait(wait_s)
        with self._lock:
            report, error = self._report, self._error
        if error is not None:
            raise LagUnavailable(error[0])
        if report is None:
            raise LagUnavailable(f"lag of the groups at {self.settings.bootstrap} is unavailable: no sample "
                                 f"within {wait_s:g}s")
        return {**report, "groups": [g for g in report["groups"] if stages is None or g["stage"] in stages],
                "sampler": {"every_s": self.every_s, "window": self.window, "stall_after_s": STALL_AFTER_S}}

    def sample(self, stages: tuple[str, ...] | None = None, window: int | None = None) -> dict:
        """view() in a monitor's words, for a reader that takes either (the dashboard's sources);
        the window is the sampler's."""
        return self.view(stages)

    def stage_health(self) -> dict[str, tuple[str, float, str]]:
        """Per stage (admit, entitle, place, launch): its group's status word (OK, WARN, STALL,
        STOP, ERR), since when it has had it (epoch seconds) and why, in a sentence. STOP: no
        member and messages wait; STALL: messages wait and the position has not moved for
        STALL_AFTER_S (a member that died is listed until its session times out, so STALL comes
        first). Never waits and never raises: where the sampler has no status (no sample yet, or
        the broker does not answer) the word is UNKNOWN and the sentence says why."""
        with self._lock:
            report, error, started = self._report, self._error, self._started_s
        if error is not None:
            return dict.fromkeys(STAGES, (UNKNOWN, error[1], error[0]))
        if report is None:
            return dict.fromkeys(STAGES, (UNKNOWN, started, "no sample of the groups' lag yet"))
        return {g["stage"]: (g["status"], g["status_since_ms"] / 1000, g["detail"]) for g in report["groups"]}

    def close(self) -> None:
        """Stop sampling and end the sampling process (a sample under way ends with it)."""
        self._stop.set()
        self._monitor.close()
        if self._thread is not None:
            self._thread.join(timeout=10)


def export(report: dict) -> None:
    """A report's groups as the peloton_group_* series. A value the broker did not answer for
    keeps its last one; peloton_group_sampled_timestamp_seconds says how old the values are."""
    at = report["sampled_ms"] / 1000
    for g in report["groups"]:
        group, stage = g["group"], g["stage"]
        for status in STATUSES:
            metrics.GROUP_STATUS.labels(group, stage, status).set(1 if status == g["status"] else 0)
        if g.get("member_count") is not None:
            metrics.GROUP_MEMBERS.labels(group, stage).set(g["member_count"])
        metrics.GROUP_SAMPLED.labels(group, stage).set(at)
        for p in g["partitions"]:
            labels = (group, stage, p["topic"], str(p["partition"]))
            if p["lag"] is not None:
                metrics.GROUP_LAG.labels(*labels).set(p["lag"])
            if p["lag_seconds"] is not None:
                metrics.GROUP_LAG_SECONDS.labels(*labels).set(p["lag_seconds"])


class LagOverApi:
    """The view of the API's sampler, read over HTTP (GET /v1/lag) with `settings`' token: what a
    dashboard shows where an API runs, so it tells the status `pelotonctl lag` tells."""

    def __init__(self, settings: Settings) -> None:
        from pelotonctl.client.http import ApiClient

        self.client = ApiClient(settings.api_url, settings.token, timeout=FIRST_SAMPLE_S + 10)

    def sample(self, stages: tuple[str, ...] | None = None, window: int | None = None) -> dict:
        from pelotonctl.client.http import ApiUnavailable, NotPermitted

        try:
            return self.client.lag(stages or STAGES, window or STATUS_WINDOW)
        except (ApiUnavailable, NotPermitted) as exc:
            raise LagUnavailable(str(exc)) from None

    def close(self) -> None:
        pass
