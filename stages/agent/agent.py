"""The host agent: one process per host, the only thing that runs tasks on it.

It reads its host's commands (launches and kills) from the agent-commands topic, runs each task
as a process group in its sandbox (the local driver), and reports to the host manager through an
AgentReport on its host shard's partition of the agent-reports topic, signed with its host's key
(peloton/auth/host_keys.py): its resources and labels, every run it has now, and the Mesos status
updates since its last report. Reports are sent at least every `agent_heartbeat_s`, and at once
when something changed. The host manager marks a host whose reports stop DOWN and its runs LOST.

Fencing: the agent's runs live by a lease that each report the broker acknowledges extends. An
agent cut off from the broker for its lease kills its runs (the host manager, which waits longer,
will run them elsewhere) and starts no launch until a report gets through (docs/design.md). A
launch read when the lease is about to run out, or just after, waits a moment for that report
instead of starting only to be killed, or being answered lost, and so running twice.

Tasks outlive the host manager (they are this process's children, not the launch stage's), and
they outlive this process too: its state directory keeps the offset of the last command handled
and the runs it started, with the ending of each it saw end until a report of that is delivered,
so that after a restart it reports those endings again, adopts the runs still alive (their
process groups, verified by pid file), and reports the others, and the adopted ones as they end,
as their executors saw them end (stages/launch/agents/executor.py). SIGTERM ends the runs with
the agent; SIGHUP (a restart) leaves them to the next agent, each executor told to end its run
when the lease runs out unless an agent has taken it over by then.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import re
import signal
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, replace
from pathlib import Path

from confluent_kafka import KafkaException

from peloton import metrics
from peloton.auth.host_keys import HEADER as HOST_SIGNATURE
from peloton.auth.host_keys import host_key, signature, unseal
from peloton.config import Settings
from peloton.model.resources import Resources
from peloton.model.states import REASON_AGENT_FENCED
from peloton.private import open_home, private_dir
from peloton.runtime.clients import kafka_access
from peloton.runtime.errors import error_text
from peloton.runtime.heap import settle_heap
from peloton.runtime.loop import STATUS_EVERY_S
from peloton.runtime.stall import EndsAside, ReaderWatch
from peloton.runtime.stuck import StuckWatch
from peloton.serde import registry
from peloton.topics import Catalogue, partition_for
from stages.agent.endings import EndingsJournal
from stages.launch.agents.cgroups import Hierarchy, agent_cgroup_name, agent_parent_leaf, find_hierarchy
from stages.launch.agents.containers import RUNTIME_LABEL, find_runtime
from stages.launch.agents.driver import TASK_LOST, LaunchRequest, TaskUpdate
from stages.launch.agents.local import LocalDriver, kill_orphan, sandbox_path, surviving_groups
from stages.launch.agents.sim import SimDriver

log = logging.getLogger("peloton.agent")

HOST_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
REASON_AGENT_RESTARTED = "REASON_AGENT_RESTARTED"
REASON_AGENT_SHUTDOWN = "REASON_AGENT_SHUTDOWN"
ENDED_KEPT = 100_000  # ended runs remembered (ids only), for launches read again
# How much of the lease margin (the host manager's wait past the lease) a held launch may wait
# for a report to renew the lease; the rest is slack for the host manager's side.
HOLD_SHARE = 0.75
# How long past its message timeout a report may wait for the Kafka client's answer (delivered or
# failed) before the client is taken for stuck (HostAgent._check_unanswered).
REPORT_ANSWER_GRACE_S = 10.0


@dataclass(frozen=True)
class AgentSpec:
    name: str
    capacity: Resources
    labels: dict[str, str]
    port_ranges: tuple[tuple[int, int], ...] = ((31000, 32000),)


def parse_port_ranges(text: str) -> tuple[tuple[int, int], ...]:
    """31000-32000[,33000-33100] (inclusive)."""
    ranges = []
    for item in filter(None, (p.strip() for p in text.split(","))):
        low, sep, high = item.partition("-")
        try:
            low_n, high_n = int(low), int(high if sep else low)
        except ValueError:
            raise ValueError(f"{item!r} is not a port range like 31000-32000") from None
        if not 1 <= low_n <= high_n <= 65535:
            raise ValueError(f"{item!r}: expected 1 <= low <= high <= 65535")
        ranges.append((low_n, high_n))
    if not ranges:
        raise ValueError("no port range given")
    return tuple(ranges)


def gpu_devices(given: str | None, capacity: Resources, dev: Path = Path("/dev")) -> tuple[tuple[str, ...], Resources]:
    """The host's GPU devices, and its capacity with their count: named (`--gpus 0,1`), else the
    NVIDIA devices under /dev, else as many as the capacity's gpu numbered from 0 (devices no
    driver checks: for tests, or a host whose devices are named otherwise). ValueError when the
    devices named or found and the capacity's gpu disagree."""
    if given is not None:
        devices = tuple(d.strip() for d in given.split(",") if d.strip())
        if len(set(devices)) != len(devices):
            raise ValueError(f"--gpus {given!r} names a device twice")
        source = "--gpus names"
    else:
        devices = tuple(sorted((p.name[len("nvidia"):] for p in dev.glob("nvidia[0-9]*")
                                if p.name[len("nvidia"):].isdigit()), key=int))
        source = f"{dev} has"
        if not devices:
            return tuple(str(i) for i in range(int(capacity.gpu))), capacity
    if capacity.gpu and capacity.gpu != len(devices):
        raise ValueError(f"{source} {len(devices)} GPU devices but the resources say gpu={capacity.gpu:g}")
    return devices, replace(capacity, gpu=float(len(devices)))


def parse_resources(text: str) -> Resources:
    """cpu=8,mem_mb=16384,disk_mb=100000,gpu=0 (missing kinds are 0)."""
    values = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        name, _, value = item.partition("=")
        if name not in ("cpu", "mem_mb", "disk_mb", "gpu"):
            raise ValueError(f"unknown resource {name!r} (known: cpu, mem_mb, disk_mb, gpu)")
        try:
            values[name] = float(value)
        except ValueError:
            raise ValueError(f"{name}={value!r} is not a number") from None
        if not values[name] >= 0 or values[name] == float("inf"):
            raise ValueError(f"{name} must be a finite number >= 0, got {value}")
    return Resources(**values)


class HostAgent:
    """The agent of one host, or (simulate=True) of many simulated hosts in one process, which
    speak the same protocol: benchmarks run thousands of hosts without thousands of processes."""

    def __init__(self, settings: Settings, specs: list[AgentSpec], simulate: bool = False, name: str | None = None,
                 gpus: tuple[str, ...] = ()):
        self.settings = settings
        self.hosts = {spec.name: spec for spec in specs}
        self.name = name or specs[0].name
        self.catalogue = Catalogue(settings.topic_prefix)
        self.serde = registry()
        self.agent_id = uuid.uuid4().hex[:12]
        self.state_dir = agent_state_dir(settings.home, self.name)
        # Its runs' launches (their environments) and runc's state: the agent's alone; the home
        # above them lets runs through to their sandboxes and lists nothing.
        open_home(settings.home)
        private_dir(self.state_dir.parent)
        private_dir(self.state_dir)
        self.sandbox_root = Path(settings.home) / "sandboxes"
        cgroup_name = agent_cgroup_name(self.name, self.state_dir)
        self.isolation, self.isolation_said = ((None, "simulated runs") if simulate
                                               else isolation_for(settings, cgroup_name))
        self.runtime, self.runtime_said = (None, "simulated runs (any image)") if simulate else find_runtime(
            settings.container_runtime, settings.images(), self.state_dir / "runc", cgroup_name)
        # The host label that lets placement send it tasks that name an image.
        runtime_label = "simulated" if simulate else (self.runtime.name if self.runtime else "")
        if runtime_label:
            specs = [replace(spec, labels={**spec.labels, RUNTIME_LABEL: runtime_label}) for spec in specs]
            self.hosts = {spec.name: spec for spec in specs}
        self.driver = SimDriver(settings.sim_task_seconds) if simulate else LocalDriver(
            self.sandbox_root, user=settings.task_user, allowed_users=settings.task_users, task_uids=settings.task_uids,
            identities_dir=settings.identities_dir,
            isolation=self.isolation, pids_max=settings.task_pids_max, gpus=gpus, gpu_dev=Path(settings.gpu_dev_dir),
            runtime=self.runtime,
            sandbox_keep_seconds=settings.sandbox_keep_s)
        self.gpus = gpus
        self.runs: dict[str, dict] = self._load("runs.json", {})  # task id -> its launch and host, while it runs
        self.runs = self.runs if isinstance(self.runs, dict) else {}
        self.journal = EndingsJournal(self.state_dir / "endings.jsonl")
        # task id -> how its run ended, until a report of that is acknowledged (kept in the journal)
        self.endings: dict[str, TaskUpdate] = self.journal.load(self.runs)
        self._forgotten = False  # acknowledged endings forgotten in memory, not yet on disk
        self.adopted: dict[str, int] = {}  # task id -> process group, of runs started before our restart
        # An agent of a release before cgroups were named by the state directory (36457f0) made its
        # runs' cgroups under its name alone: those of its runs go as the runs end, then the parent.
        self.former = self.isolation.beside(agent_parent_leaf(self.name)) if self.isolation else None
        self.former_runs = set(self.former.leftovers(set())) & set(self.runs) if self.former else set()
        self.pending: list[TaskUpdate] = []  # not yet delivered to the broker
        # Runs that ended lately: a launch of one read again (a host manager that took over sends
        # the launches its predecessor may not have sent) starts nothing.
        self.ended: OrderedDict[str, None] = OrderedDict()
        self.commands = self.catalogue["agent-commands"]
        self.reports = self.catalogue["agent-reports"]
        self.report_partition = {h: partition_for(h, self.reports.partitions) for h in self.hosts}
        self.report_keys = report_keys(settings, list(self.hosts))
        self.command_partition = {h: partition_for(h, self.commands.partitions) for h in self.hosts}
        self.reader = ReaderWatch(self.commands.name, sorted(set(self.command_partition.values())),
                                  EndsAside(kafka_access(settings)))
        self.offsets: dict[int, int | None] = {}  # partition -> the next command to handle (start() reads it)
        self.lease_s = settings.agent_lease()
        # A report is worth nothing once the lease it would have renewed ran out, so none waits
        # longer (the stages' producers wait for ever): a report that timed out fails its round,
        # whose updates go again in the next. Never waiting for ever also lets an idempotent
        # producer that lost its broker-side state (a whole cluster restarted) start afresh
        # instead of holding its queue, and the agent's reports, back.
        self.report_timeout_s = max(1.0, self.lease_s)
        self.producer = self._new_producer()
        self.producer_renewals = 0
        # When a report last got through (or the producer was made), and the rounds that failed
        # since: a producer whose every report fails, round after round, is replaced too.
        self.delivered_at = time.monotonic()
        self.failed_rounds = 0
        self.started_at = self.delivered_at
        self.ever_delivered = False  # the first acknowledgement is logged: how long a start took to be heard
        self.consumer = self._new_consumer()
        # The sandboxes' files, served against the API's grant for each run: a user reads a run's
        # output through the API, which checks who may read the job, from wherever the run was.
        self.logs = None
        if settings.agent_logs_public_key and not simulate:
            from peloton.auth.grants import public_key
            from stages.agent.logs import LogServer

            self.logs = LogServer(self.sandbox_root, public_key(settings.agent_logs_public_key), set(self.hosts),
                                  settings.agent_logs_host, settings.agent_logs_port, settings.sandbox_keep_s).start()
        self._running = True
        self._handing_over = False  # stopping for a restart: the runs go on (restart())
        self.handed: set[str] = set()  # the runs handed over to the next agent, as this one stops
        self._next_report = 0.0
        self.fresh_since_ms = 0
        # The lease: the agent's runs may go on while its reports reach the broker. Each report
        # the broker acknowledged extends it to (when that report was sent) + lease; once it has
        # run out, the agent kills its runs, as the host manager will call them lost and run them
        # elsewhere, and takes no launches until a report gets through again.
        self.lease_until = self._saved_lease()
        self.fenced_at: float | None = None  # when the lease ran out, while it stays out
        # Launches read with less than the margin of lease left, or while fenced: started once a
        # report renews the lease in time, answered lost otherwise (_start_held).
        self.start_margin = settings.lease_margin()
        self.hold_s = HOLD_SHARE * self.start_margin
        self.held: dict[str, _Held] = {}
        self.fencing: set[str] = set()  # runs killed for it, whose ends are reported as lost
        self._rounds: dict[int, _Round] = {}  # reports not yet acknowledged, per heartbeat round
        self._round_ids = itertools.count()
        self._status_at, self._steps, self._commands_read = time.monotonic(), 0, 0
        self._refused_said_at = float("-inf")

    def _new_consumer(self):
        from confluent_kafka import Consumer

        from peloton.runtime import CONSUMER_RECOVERY

        return Consumer({
            **kafka_access(self.settings), "group.id": f"{self.catalogue.prefix}peloton.agent.{self.name}",
            "enable.auto.commit": False, "auto.offset.reset": "latest", "fetch.wait.max.ms": 100,
            "allow.auto.create.topics": False, **CONSUMER_RECOVERY,
        })

    def _new_producer(self):
        from confluent_kafka import Producer

        from peloton.runtime import producer_config

        return Producer({**producer_config(self.settings), "message.timeout.ms": int(self.report_timeout_s * 1000)})

    # -- state on disk --------------------------------------------------------------------------
    def _load(self, name: str, default):
        try:
            return json.loads((self.state_dir / name).read_text())
        except (OSError, ValueError):
            return default

    def _save(self, name: str, value) -> None:
        tmp = self.state_dir / (name + ".tmp")
        tmp.write_text(json.dumps(value))
        os.replace(tmp, self.state_dir / name)

    def _saved_lease(self) -> float:
        """The lease a restarted agent still holds (its adopted runs live by it), on this clock."""
        saved = self._load("lease.json", {})
        until = saved.get("until") if isinstance(saved, dict) else None
        if not isinstance(until, (int, float)):
            return time.monotonic() + self.lease_s
        return time.monotonic() + (until - time.time())

    # -- start ----------------------------------------------------------------------------------
    def start(self) -> None:
        from confluent_kafka import OFFSET_END, TopicPartition

        partitions = self.reader.partitions
        saved = self._load("offsets.json", {})
        saved = saved if isinstance(saved, dict) else {}
        assignment = []
        for partition in partitions:
            # After a restart, go on from the last command handled: launches and kills sent while
            # we were away are still ours. On a first start, only what comes from now on.
            offset = saved.get(str(partition))
            offset = offset if isinstance(offset, int) else OFFSET_END
            if offset != OFFSET_END:
                _, end = self.consumer.get_watermark_offsets(TopicPartition(self.commands.name, partition), timeout=10)
                if offset > end:  # the cluster was wiped or the topic deleted: nothing past its end comes
                    log.warning("saved offset %d is past the end (%d) of %s[%d]: the broker lost its log; "
                                "reading from its end", offset, end, self.commands.name, partition)
                    offset = OFFSET_END
            if offset == OFFSET_END:
                # A read_committed reader's end is the last stable offset: a transaction still open
                # may hold commands before it. Nothing sent before this first start can be for us
                # (the host manager learns of a host from its reports), so such commands are skipped.
                self.fresh_since_ms = _now_ms()
            assignment.append(TopicPartition(self.commands.name, partition, offset))
        self.offsets = {p: saved.get(str(p)) for p in partitions}
        self.consumer.assign(assignment)
        # Where a reader that starts at the end stands until it fetches: one that never fetches
        # is then judged by the first command after its start, not only by a later one.
        self.reader.begin([tp.partition for tp in assignment if tp.offset == OFFSET_END])
        self._adopt()
        first = next(iter(self.hosts.values()))
        log.info("agent %s (%s) up: %d host(s) like %s, %s, labels %s; commands from %s%s", self.name, self.agent_id,
                 len(self.hosts), first.name, first.capacity, first.labels, self.commands.name, partitions)
        log.info("isolation: %s", self.isolation_said)
        if isinstance(self.driver, LocalDriver):
            log.info("accounts: %s", self.driver.describe_accounts())
        log.info("images: %s", self.runtime_said)
        if self.logs is not None:
            log.info("run output served at %s, to a caller with the API's grant for the run", self.logs.url)
        if self.gpus:
            fenced = ("each run may open its own alone (devices cgroup)" if self.isolation and self.isolation.devices
                      else "a run is not kept from opening others' (no devices cgroup here; a run in an image is)")
            log.info("GPUs: %s, each given to one task at a time (CUDA_VISIBLE_DEVICES, NVIDIA_VISIBLE_DEVICES); %s",
                     ",".join(self.gpus), fenced)

    def _count_usage(self, u: TaskUpdate) -> None:
        metrics.AGENT_RUN_CPU.labels(self.name).inc(u.cpu_seconds)
        if u.peak_mem_mb is not None:
            metrics.AGENT_RUN_PEAK_MEMORY.labels(self.name).observe(u.peak_mem_mb)
        if u.reason.startswith("REASON_CONTAINER_LIMITATION"):
            metrics.AGENT_LIMIT_KILLS.labels(self.name, u.reason).inc()

    def _adopt(self) -> None:
        """Runs the previous agent process started: those it saw end are reported again as they
        ended (the report of it may not have been delivered), alive ones are ours again, and ones
        that ended since are reported as their executors saw them end (lost where none could
        say)."""
        alive = surviving_groups(self.sandbox_root, list(self.runs))
        for task_id in list(self.runs):
            ending = self.endings.get(task_id)
            if ending is not None:
                self.runs[task_id]["ended"] = True  # forgotten once this report is delivered
                self.pending.append(ending)
                log.info("run %s ended before the agent restarted (%s): reported again", task_id, ending.state)
                continue
            pgid = alive.get(task_id)
            if pgid is not None:
                self.adopted[task_id] = pgid
                log.info("adopted run %s (process group %d)", task_id, pgid)
            else:
                self._orphan_ended(task_id, "while its agent was away")
        # Runs handed over by a restart: this agent's lease fences them now, not their executors;
        # their GPUs stay theirs.
        self.driver.take_over(list(self.adopted))
        self.driver.hold_gpus({t: (self._host_of(t), tuple(map(str, self.runs[t].get("gpus") or ())))
                               for t in self.adopted})
        self.driver.watch_adopted([r for r in map(self._checked_run, self.adopted) if r is not None])
        self._clear_leftovers()

    def _checked_run(self, task_id: str) -> tuple[LaunchRequest, float] | None:
        """An adopted run with a health check, as the driver needs it to go on checking it, and
        when it started (seconds since the epoch: its first check waits for it as before)."""
        run = self.runs.get(task_id, {})
        health = run.get("health")
        if not isinstance(health, dict):
            return None
        try:
            return LaunchRequest(
                task_id=task_id, job_id=run["job_id"], instance=run["instance"], run_id=run["run_id"],
                host_id=self._host_of(task_id), command="", shell=True,
                environment=tuple(health["environment"].items()), user=health["user"], image=health["image"],
                kill_grace_seconds=health["kill_grace_seconds"], health_check=health["check"]), float(health["started"])
        except (KeyError, TypeError, ValueError, AttributeError):  # a runs.json of another release, or garbled
            return None

    def _orphan_ended(self, task_id: str, when: str) -> None:
        """A run no agent of this process waited for has ended: reported as its executor saw it end
        (kept in the journal like any ending, until acknowledged), else lost."""
        ending = self.driver.orphan_ending(task_id, self._host_of(task_id))
        if ending is None:
            self._lost(task_id, f"it ended {when}, and left no word of how (its executor killed too)")
            return
        if self.runs.get(task_id, {}).get("kill_sent"):  # as the driver maps an end after its own kill
            ending = replace(ending, state="TASK_KILLED", reason="",
                             message=f"killed by its agent before the agent restarted ({ending.message or 'exit 0'})")
        log.info("run %s ended %s: %s%s", task_id, when, ending.state,
                 f" ({ending.message})" if ending.message else "")
        self.pending.append(ending)

    def _clear_leftovers(self) -> None:
        """What runs that ended under no agent left here (cgroups, containers) goes, the runs
        adopted kept."""
        cleared = self.driver.clear_leftovers(set(self.adopted))
        if self.former is not None:
            for task_id in sorted(self.former_runs - set(self.adopted)):
                self.former.task(task_id).destroy(wait_s=0.2)
                self.former_runs.discard(task_id)
                cleared.append(task_id)
            if not self.former_runs:
                # Removed only if empty; another stack's agent of the old release and this name
                # would have to make it again (see docs/design.md, Isolation).
                self.former.close()
                self.former = None
        if cleared:
            log.info("removed the cgroups of %d runs no agent holds any more", len(cleared))

    def _host_of(self, task_id: str) -> str:
        run = self.runs.get(task_id)
        return run.get("host", self.name) if isinstance(run, dict) else self.name

    def _lost(self, task_id: str, message: str) -> None:
        log.warning("run %s lost: %s", task_id, message)
        self.pending.append(TaskUpdate(task_id, self._host_of(task_id), TASK_LOST, _now_ms(), REASON_AGENT_RESTARTED,
                                       message))
        self.runs.pop(task_id, None)
        self.endings.pop(task_id, None)
        self._save("runs.json", self.runs)

    # -- the loop -------------------------------------------------------------------------------
    def run(self, max_seconds: float | None = None) -> None:
        self.start()
        deadline = time.monotonic() + max_seconds if max_seconds else None
        watch = StuckWatch()  # as the stages' loop: a stuck step writes every thread's stack to the log
        try:
            while self._running and (deadline is None or time.monotonic() < deadline):
                watch.turn()
                self.step()
                self._status()
        finally:
            watch.stop()
            self.close()

    def _status(self) -> None:
        """Every STATUS_EVERY_S one line: what the agent runs and whether its reports get through,
        so a silent agent is told apart from one whose reports go nowhere."""
        self._steps += 1
        now = time.monotonic()
        if now - self._status_at < STATUS_EVERY_S:
            return
        lease = (f"fenced for {now - self.fenced_at:.0f}s" if self.fenced_at is not None
                 else f"lease {self.lease_until - now:.0f}s left")
        if self.held:
            lease += f", {len(self.held)} launches held for a report"
        log.info("alive: %d runs, %d updates to report, %d report rounds unacknowledged, %d messages queued, %s; "
                 "%d steps and %d commands in %.0fs", len(self.driver.active()) + len(self.adopted),
                 len(self.pending), len(self._rounds), len(self.producer), lease, self._steps,
                 self._commands_read, now - self._status_at)
        self._status_at, self._steps, self._commands_read = now, 0, 0

    def step(self) -> None:
        self.producer.poll(0)  # acknowledgements of reports: they extend the lease
        self._check_unanswered()
        if self.fenced_at is None and time.monotonic() >= self.lease_until:
            self._fence()
        if self.held and self._start_held(time.monotonic()):
            self._save_offsets()
        messages = self.consumer.consume(num_messages=500, timeout=0.1)
        self._commands_read += len(messages)
        if messages:
            self._commands(messages)
            self._save_offsets()  # once per batch: what was handled is not handled again after a restart
        self._check_reader()
        for u in self.driver.poll():
            if u.cpu_seconds is not None:
                self._count_usage(u)
            if u.terminal and self.adopted.pop(u.task_id, None) is not None:
                self._clear_leftovers()  # an adopted run its health check gave up on, killed
            if u.terminal and u.task_id in self.fencing:
                self.fencing.discard(u.task_id)
                u = TaskUpdate(u.task_id, u.host_id, TASK_LOST, u.timestamp_ms, REASON_AGENT_FENCED,
                               f"killed by its agent, which heard nothing from the broker for {self.lease_s:g}s "
                               f"(its lease): the host manager runs it elsewhere ({u.message})")
            self.pending.append(u)
        self._watch_adopted()
        self._keep_endings()
        now = time.monotonic()
        if self.pending or now >= self._next_report:
            self._report(everyone=now >= self._next_report)
            if now >= self._next_report:
                self._next_report = now + self.settings.agent_heartbeat_s
        self._save_forgotten()

    def _save_forgotten(self) -> None:
        """Runs whose endings were acknowledged leave runs.json, then the journal (a line of a run
        no longer there is ignored). An agent killed before this reports those endings again:
        the host manager ignores an ending of a run it no longer holds."""
        if self._forgotten:
            self._forgotten = False
            self._save("runs.json", self.runs)
            self.journal.rewrite(list(self.endings.values()))

    def _keep_endings(self) -> None:
        """Runs that ended keep their ending in the journal (stages/agent/endings.py) until a
        report of it is acknowledged: an agent restarted in between reports it again. Written
        once per step, before the report that carries them."""
        fresh = [u for u in self.pending if u.terminal and u.task_id in self.runs and u.task_id not in self.endings]
        for u in fresh:
            self.runs[u.task_id]["ended"] = True  # reported below, forgotten once delivered
            self.endings[u.task_id] = u
        self.journal.append(fresh)

    def _check_reader(self) -> None:
        """A consumer that stopped fetching while commands waited is replaced (peloton/runtime/
        stall.py): the new one goes on from where the old one was."""
        if self._rounds or self.fenced_at is not None:
            return  # the broker is slow or away (reports unanswered): its answer would hold the loop
        # Where the reader is, else the next command to handle (a reader assigned at a saved
        # offset has no position until it fetches), else the first end the watch saw.
        stalled = self.reader.stalled(self.consumer, self.offsets)
        if not stalled:
            return
        self.consumer, at = self.reader.renew(self.consumer, self._new_consumer, self.offsets)
        log.warning("the command reader fetched nothing for %gs while commands waited on %s%s: a new consumer "
                    "goes on from offsets %s", self.reader.rule.after_s, self.commands.name, stalled, at)
        metrics.AGENT_READER_RENEWALS.inc()

    def _commands(self, messages: list) -> None:
        """One batch of commands, in order. A launch whose kill is in the same batch (an agent
        behind on its commands reads both at once: the job manager gave the run up meanwhile, and
        may run it elsewhere already) is never started, not started and killed a moment later."""
        batch = []
        for msg in messages:
            if msg.error():
                continue  # a partition EOF or a broker hiccup: librdkafka retries by itself
            batch.append((msg, self._decode(msg)))
        killed = {task_id for _, cmd in batch if cmd is not None for task_id in cmd["kills"]}
        for msg, cmd in batch:
            if cmd is not None:
                try:
                    self._command(msg, cmd, killed)
                except Exception:  # no command may end the agent (and with it every task it watches)
                    log.exception("command at offset %d could not be carried out; skipped", msg.offset())
            self.offsets[msg.partition()] = msg.offset() + 1

    def _decode(self, msg) -> dict | None:
        """The AgentCommand in msg when it is for one of this agent's hosts; else None. A sealed
        one (peloton/auth/host_keys.py) is opened with the host's key: another host's is not."""
        try:
            name, cmd = self.serde.decode(msg.value())
            if name == "peloton.SealedAgentCommand" and cmd["host_id"] in self.hosts:
                key = self.report_keys.get(cmd["host_id"])
                if key is None:
                    raise ValueError("sealed, and this agent has no host key (PELOTON_HOST_KEY)")
                name, cmd = self.serde.decode(unseal(key, cmd["host_id"], cmd["sealed"]))
        except Exception as exc:  # undecodable, or not what the schema promised: skipped, and said
            log.warning("command at offset %d skipped: %s", msg.offset(), exc)
            return None
        host_id = cmd.get("host_id") if name == "peloton.AgentCommand" else None
        if host_id not in self.hosts:
            return None  # another host's, on the same partition
        if cmd["sent_ms"] < self.fresh_since_ms:
            return None
        return cmd

    def _command(self, msg, cmd: dict, killed: set[str]) -> None:
        host_id = cmd["host_id"]
        fresh = []
        now = time.monotonic()
        for launch in cmd["launches"]:
            task_id = launch["task_id"]
            try:
                started = task_id in self.runs or sandbox_path(self.sandbox_root, task_id).exists()
            except ValueError as exc:  # not a name a sandbox can have
                log.warning("launch of %r skipped: %s", task_id[:200], exc)
                continue
            if started or task_id in self.ended or task_id in self.held:
                continue  # a command read again (after a restart or a takeover): it was taken already
            if task_id in killed:
                self._never_start(task_id, host_id, "TASK_KILLED", "killed before it started (its kill came with its "
                                                                   "launch)")
                metrics.AGENT_COMMANDS.labels("launch_killed").inc()
                continue
            if self.fenced_at is None and self.lease_until - now >= self.start_margin:
                fresh.append((host_id, launch))
            elif now <= self.lease_until + self.hold_s:
                # Started now, it would likely be killed by the fence a moment later and run again
                # elsewhere: it waits for a report to renew the lease (_start_held).
                self.held[task_id] = _Held(host_id, launch, msg.partition(), msg.offset(),
                                           self.lease_until + self.hold_s)
            else:  # the host manager may already run it elsewhere
                self._never_start(task_id, host_id, TASK_LOST, "not started: its agent's lease had run out",
                                  REASON_AGENT_FENCED)
        if fresh:
            self._launch(fresh)
        kills = [t for t in cmd["kills"] if not self._drop_held(t)]
        if kills:
            self.driver.kill(kills)
            metrics.AGENT_COMMANDS.labels("kill").inc(len(kills))
            # Kept, so that a next agent reports a run ending after this kill as killed.
            marked = [t for t in kills if t in self.runs and not self.runs[t].get("kill_sent")]
            for task_id in marked:
                self.runs[task_id]["kill_sent"] = True
            if marked:
                self._save("runs.json", self.runs)
            for task_id in kills:
                pgid = self.adopted.pop(task_id, None)
                if pgid is not None:
                    self.driver.let_go([task_id])
                    kill_orphan(self.sandbox_root, task_id)
                    self.pending.append(TaskUpdate(task_id, host_id, "TASK_KILLED", _now_ms(),
                                                   message="killed (a run adopted after the agent restarted)"))
                    self._clear_leftovers()

    def _launch(self, launches: list[tuple[str, dict]]) -> None:
        """Starts these launches (host id, AgentLaunch record), their runs saved first."""
        fresh = []
        for host_id, launch in launches:
            task_id = launch["task_id"]
            self.runs[task_id] = {"job_id": launch["job_id"], "instance": launch["instance"],
                                  "run_id": launch["run_id"], "host": host_id}
            if launch.get("health_check_json"):  # what a next agent needs to go on checking it
                self.runs[task_id]["health"] = {
                    "check": launch["health_check_json"], "environment": launch["environment"],
                    "user": launch["user"], "image": launch.get("image", ""),
                    "kill_grace_seconds": launch["kill_grace_seconds"], "started": time.time()}
            fresh.append(LaunchRequest(
                task_id=task_id, job_id=launch["job_id"], instance=launch["instance"], run_id=launch["run_id"],
                host_id=host_id, command=launch["command"], shell=launch["shell"],
                arguments=tuple(launch["arguments"]), environment=tuple(launch["environment"].items()),
                resources=Resources.from_record(launch["resources"]), kill_grace_seconds=launch["kill_grace_seconds"],
                user=launch["user"], image=launch.get("image", ""), health_check=launch.get("health_check_json")))
        self._save("runs.json", self.runs)  # before they start: a crash now still finds them
        self.driver.launch(fresh)
        held = {r.task_id: list(self.driver.gpus_of(r.task_id)) for r in fresh if r.resources.gpu > 0}
        for task_id, gpus in held.items():  # a next agent holds them again while the run goes on
            self.runs[task_id]["gpus"] = gpus
        if any(held.values()):
            self._save("runs.json", self.runs)
        metrics.AGENT_COMMANDS.labels("launch").inc(len(fresh))

    def _start_held(self, now: float) -> bool:
        """Held launches start once a report has renewed the lease in time (_delivered moves
        their deadline), and are answered lost once their deadline passes without one: the host
        manager may then have given the host up and their runs with it. True when any went."""
        late = [t for t, h in self.held.items() if now > h.until]
        for task_id in late:
            held = self.held.pop(task_id)
            self._never_start(task_id, held.host_id, TASK_LOST, f"not started: its agent read the launch as its "
                              f"lease ran out and no report got through within {self.hold_s:g}s after",
                              REASON_AGENT_FENCED)
        if late:
            log.warning("%d launches held for a report were not started: none got through in time; they are "
                        "answered lost, and run again", len(late))
            metrics.AGENT_HELD_LAUNCHES.labels("lost").inc(len(late))
        if self.held and self.fenced_at is None and self.lease_until - now >= self.start_margin:
            log.info("a report renewed the lease: the %d launches held for it start", len(self.held))
            metrics.AGENT_HELD_LAUNCHES.labels("started").inc(len(self.held))
            self._launch([(h.host_id, h.launch) for h in self.held.values()])
            self.held.clear()
            return True
        return bool(late)

    def _never_start(self, task_id: str, host_id: str, state: str, message: str, reason: str = "") -> None:
        """A launch this agent will never start is answered so, and one read again stays unstarted."""
        self.pending.append(TaskUpdate(task_id, host_id, state, _now_ms(), reason, message))
        self.ended[task_id] = None

    def _drop_held(self, task_id: str) -> bool:
        """A kill of a launch still held: it never starts. False when none is held."""
        held = self.held.pop(task_id, None)
        if held is None:
            return False
        self._never_start(task_id, held.host_id, "TASK_KILLED",
                          "killed before it started (its launch waited for the agent's lease)")
        metrics.AGENT_HELD_LAUNCHES.labels("killed").inc()
        return True

    def _before_held(self, offsets: dict[int, int | None]) -> dict[int, int]:
        """These offsets (partition -> every command before it handled), none past a launch still
        held: held, it counts as not read yet, for a restart (it is not in runs.json, and would be
        lost) as for the host manager (which would give it up as read and not run)."""
        out = {p: o for p, o in offsets.items() if o is not None}
        for held in self.held.values():
            if held.partition in out:
                out[held.partition] = min(out[held.partition], held.offset)
        return out

    def _save_offsets(self) -> None:
        """Where a restarted agent goes on reading (_before_held)."""
        self._save("offsets.json", {str(p): o for p, o in self._before_held(self.offsets).items()})

    def _fence(self) -> None:
        """The lease ran out: every run here is killed at once (no grace: the host manager's
        timeout is only a little longer than the lease), and reported lost when a report can go."""
        self.fenced_at = time.monotonic()
        active = sorted(self.driver.active())
        # An agent that starts with a broker slow to answer (a loaded machine, a broker just up:
        # 7-11.5 s seen in tests) has nothing to kill yet; it still takes no launch until it is heard.
        since = "" if self.ever_delivered else " since the agent started"
        killed = len(active) + len(self.adopted)
        what = (f"killing the {killed} runs here, as the host manager will run them elsewhere" if killed
                else "no run here to kill")
        log.warning("no report reached the broker for %gs (the lease)%s: %s; no launch starts until a report "
                    "gets through (those read in the next %.1fs wait for it)", self.lease_s, since, what, self.hold_s)
        self.fencing.update(active)
        self.driver.kill_now(active)
        self.driver.let_go(list(self.adopted))
        for task_id, _pgid in list(self.adopted.items()):
            kill_orphan(self.sandbox_root, task_id, grace_seconds=0)
            del self.adopted[task_id]
            self.pending.append(TaskUpdate(task_id, self._host_of(task_id), TASK_LOST, _now_ms(), REASON_AGENT_FENCED,
                                           "killed by its agent, whose lease had run out"))
        self._clear_leftovers()

    def _watch_adopted(self) -> None:
        if not self.adopted:
            return
        alive = surviving_groups(self.sandbox_root, list(self.adopted))
        ended = [t for t in self.adopted if t not in alive]
        self.driver.let_go(ended)
        for task_id in ended:
            del self.adopted[task_id]
            self._orphan_ended(task_id, "after its agent restarted")
        if ended:
            self._clear_leftovers()

    def _report(self, everyone: bool = True) -> None:
        """One AgentReport per host with news (every host at a heartbeat), each on its shard."""
        updates: dict[str, list[dict]] = {}
        for u in self.pending:
            updates.setdefault(u.host_id, []).append({
                "task_id": u.task_id, "state": u.state, "reason": u.reason, "message": u.message,
                "exit_code": u.exit_code, "signal": u.signal, "timestamp_ms": u.timestamp_ms,
                "health": u.health})
        running: dict[str, list[str]] = {}
        for task_id in self.driver.active() | set(self.adopted) | self.handed:
            running.setdefault(self._host_of(task_id), []).append(task_id)
        topic = self.reports.name
        # Where the reader stands in each commands partition (every command before it handled,
        # in this step or earlier): the host manager gives up a launch this agent does not run only
        # once the agent has read past it, so a reader that stalls delays a launch but never runs
        # it beside the copy that replaced it.
        read_to = self._before_held(self.reader.standing(self.consumer, self.offsets))
        round_id = next(self._round_ids)
        # The updates travel with this round; they are sent again if any of its reports fails.
        sending = _Round(time.monotonic(), 0, self.pending)
        self.pending = []
        self._rounds[round_id] = sending
        for host_id in (self.hosts if everyone else updates):
            spec = self.hosts.get(host_id)
            if spec is None:
                continue
            record = {"host_id": host_id, "agent_id": self.agent_id, "capacity": spec.capacity.to_record(),
                      "labels": spec.labels, "running": sorted(running.get(host_id, ())),
                      "port_ranges": [{"low": low, "high": high} for low, high in spec.port_ranges],
                      "updates": updates.get(host_id, []), "sent_ms": _now_ms(),
                      "commands_read": read_to.get(self.command_partition[host_id]),
                      "log_url": self.logs.url if self.logs else ""}
            value = self.serde.encode("peloton.AgentReport", record)
            key = self.report_keys.get(host_id)
            signed = {"headers": [(HOST_SIGNATURE, signature(key, value))]} if key else {}
            try:
                self.producer.produce(topic, key=host_id.encode(), value=value,
                                      partition=self.report_partition[host_id], **signed,
                                      on_delivery=lambda err, _msg, r=round_id: self._delivered(r, err))
            except (BufferError, KafkaException) as exc:
                # The queue is full (the broker is away), or the client refuses the report at once
                # (the broker denies this agent's user the topic: an ACL taken away): this round's
                # other reports would fare no better. The step goes on (its lease still runs out,
                # its runs are still watched); the round's updates go again with a later one.
                if isinstance(exc, KafkaException):
                    self._refused(topic, exc)
                sending.failed = True
                break
            sending.waiting += 1
            metrics.AGENT_REPORTS.inc()
        metrics.AGENT_RUNS.labels(self.name).set(sum(len(r) for r in running.values()))
        if not sending.waiting:
            del self._rounds[round_id]
            self.pending = sending.updates + self.pending
            self.failed_rounds += sending.failed  # its queue full: nothing got to the client at all
        self.producer.poll(0)

    def _refused(self, topic: str, exc: KafkaException) -> None:
        """Says why reports cannot go, at most every STATUS_EVERY_S."""
        now = time.monotonic()
        if now - self._refused_said_at >= STATUS_EVERY_S:
            self._refused_said_at = now
            log.warning("the Kafka client refuses this agent's reports to %s: %s; they go again, and the lease runs "
                        "out if none gets through", topic, error_text(exc))

    def _check_unanswered(self) -> None:
        """A Kafka client that will not deliver is replaced: a new producer takes over, and the
        updates of every round still waiting go again with the next report. It will not deliver
        when it has neither delivered nor failed a report well past its message timeout (seen
        after a whole-cluster restart: an idempotent producer held 19 rounds, 475 reports, for
        157 s with no callback and no client error), or when every report has failed since one
        last got through, for as long (seen after another: each round timed out and went again,
        so none stayed unanswered long, for minutes). Either way no report got through, the agent
        stayed fenced, and the host manager refused every placement on its hosts as unknown."""
        now = time.monotonic()
        limit = self.report_timeout_s + REPORT_ANSWER_GRACE_S
        if self._rounds:
            oldest = next(iter(self._rounds.values()))  # rounds are kept in the order they were sent
            waited = now - oldest.sent
            if waited >= limit:
                log.warning("the Kafka client neither delivered nor failed reports sent %.0fs ago (their timeout "
                            "is %gs; %d report rounds and %d messages held): a new producer takes over, and their "
                            "updates go again", waited, self.report_timeout_s, len(self._rounds), len(self.producer))
                self._renew_producer()
                return
        if self.failed_rounds and now - self.delivered_at >= limit:
            log.warning("no report got through for %.0fs, and %d report rounds failed (their timeout is %gs): a new "
                        "producer takes over", now - self.delivered_at, self.failed_rounds, self.report_timeout_s)
            self._renew_producer()

    def _renew_producer(self) -> None:
        old, self.producer = self.producer, self._new_producer()
        self.producer_renewals += 1
        metrics.AGENT_PRODUCER_RENEWALS.inc()
        held = [u for sending in self._rounds.values() for u in sending.updates]
        self._rounds.clear()  # an answer the old producer gives after all finds no round: ignored
        self.pending = held + self.pending
        self.delivered_at, self.failed_rounds = time.monotonic(), 0  # the new one's own time begins
        # Away from the loop: purging and freeing a client may wait on its broker threads.
        threading.Thread(target=_abandon, args=(old,), name="report-producer-abandoned", daemon=True).start()

    def _delivered(self, round_id: int, err) -> None:
        """A report's acknowledgement (or failure). A round whose reports all got through extends
        the lease and forgets the runs it reported ended; a failed one sends its updates again."""
        sending = self._rounds.get(round_id)
        if sending is None:
            return
        sending.waiting -= 1
        sending.failed = sending.failed or err is not None
        if sending.waiting > 0:
            return
        del self._rounds[round_id]
        if sending.failed:
            self.pending = sending.updates + self.pending
            self.failed_rounds += 1
            return
        self.delivered_at, self.failed_rounds = time.monotonic(), 0
        if not self.ever_delivered:
            self.ever_delivered = True
            log.info("reports reach the broker: the first was acknowledged %.1fs after the agent started",
                     self.delivered_at - self.started_at)
        self.lease_until = max(self.lease_until, sending.sent + self.lease_s)
        self._save("lease.json", {"until": time.time() + (self.lease_until - time.monotonic())})
        now = time.monotonic()
        for held in self.held.values():
            # This report was written before the held launch's deadline, so before the host
            # manager could judge the host silent (its wait is lease + margin from the report
            # the deadline came from): it reads this one first, and the new lease holds.
            if now <= held.until:
                held.until = max(held.until, self.lease_until + self.hold_s)
        if self.fenced_at is not None and sending.sent > self.fenced_at:
            log.info("a report got through again: the lease is renewed, launches are taken again")
            self.fenced_at = None
        done = [u.task_id for u in sending.updates if u.terminal and self.runs.get(u.task_id, {}).get("ended")]
        if done:
            for task_id in done:
                del self.runs[task_id]
                self.endings.pop(task_id, None)
                self.ended[task_id] = None
            while len(self.ended) > ENDED_KEPT:
                self.ended.popitem(last=False)
            self._forgotten = True  # saved at the end of the step, once for all the step's rounds

    def stop(self, *_args) -> None:
        self._running = False

    def restart(self, *_args) -> None:
        """SIGHUP: stop, handing the runs over to the next agent started on this state directory
        (an upgrade, `pelotonctl dev restart agent-N`), as Mesos' agent leaves its executors."""
        self._handing_over = True
        self._running = False

    def _hand_over(self) -> set[str]:
        """The runs left going for the next agent: each executor is told the lease's end, when it
        kills its run unless an agent has taken it over (stages/launch/agents/executor.py). None
        while fenced: its runs were killed already."""
        if self.fenced_at is not None:
            return set()
        until = time.time() + (self.lease_until - time.monotonic())
        handed = set(self.driver.hand_over(until, list(self.adopted)))
        log.info("handing %d runs over to the next agent of this host: they go on until the lease runs out in "
                 "%.0fs unless it takes them over first", len(handed), until - time.time())
        return handed

    def close(self) -> None:
        """A clean stop (SIGTERM) ends the runs here: they are reported lost, and run elsewhere;
        a restart (SIGHUP) hands them over instead (_hand_over), and ends only those it cannot.
        Adopted runs go first, with their grace: the driver's close removes every cgroup left."""
        self.handed = self._hand_over() if self._handing_over else set()
        handed = self.handed
        for task_id in [t for t in self.adopted if t not in handed]:
            kill_orphan(self.sandbox_root, task_id)
            self.pending.append(TaskUpdate(task_id, self._host_of(task_id), TASK_LOST, _now_ms(), REASON_AGENT_SHUTDOWN,
                                           "its agent was stopped"))
        self.adopted = {}
        if self.held and self._handing_over:
            self._save_offsets()  # before the held launches: the next agent reads them again
            self.held = {}
        for task_id, held in self.held.items():
            self._never_start(task_id, held.host_id, TASK_LOST, "not started: its agent was stopped",
                              REASON_AGENT_SHUTDOWN)
        if self.held:
            metrics.AGENT_HELD_LAUNCHES.labels("stopped").inc(len(self.held))
            self.held = {}
            self._save_offsets()
        self.driver.close()
        for u in self.driver.poll():
            self.pending.append(TaskUpdate(u.task_id, u.host_id, TASK_LOST, u.timestamp_ms, REASON_AGENT_SHUTDOWN,
                                           "its agent was stopped"))
        try:
            self._report()
            self.producer.flush(5.0)
        finally:
            # Endings not acknowledged by now are kept for the next agent to report, and the runs
            # handed over for it to adopt; every other run was reported lost above.
            self.runs = {task_id: run for task_id, run in self.runs.items()
                         if task_id in self.endings or task_id in handed}
            self._save("runs.json", self.runs)
            self.journal.rewrite(list(self.endings.values()))
            self.journal.close()
            self.consumer.close()
            if self.logs is not None:
                self.logs.close()


@dataclass(slots=True)
class _Round:
    """One heartbeat's reports, until the broker has acknowledged every one."""

    sent: float  # time.monotonic() when they were produced
    waiting: int  # reports not acknowledged yet
    updates: list[TaskUpdate]
    failed: bool = False


@dataclass(slots=True)
class _Held:
    """A launch read when the lease was about to run out, or had: it waits for a report."""

    host_id: str
    launch: dict  # the AgentLaunch record
    partition: int  # where its command lies, which a restart reads again while it is held
    offset: int
    until: float  # time.monotonic() past which it is answered lost, unless a report renews the lease


def _abandon(producer) -> None:
    """Lets go of a producer that stopped answering: its queue is purged (the updates it held go
    again through its successor) and the client is freed when this thread ends."""
    try:
        producer.purge()
        producer.flush(0)
    except Exception:  # it is being thrown away: nothing it says matters
        pass


def report_keys(settings: Settings, hosts: list[str]) -> dict[str, str]:
    """Each host's key its reports are signed with: this host's own (PELOTON_HOST_KEY), or, for a
    process that simulates many hosts, each derived from the cluster's (PELOTON_AGENT_REPORT_KEY).
    None given: reports go unsigned (a host manager that checks them refuses them)."""
    if settings.host_key:
        return dict.fromkeys(hosts, settings.host_key)
    if settings.agent_report_key:
        return {h: host_key(settings.agent_report_key, h) for h in hosts}
    return {}


def agent_state_dir(home: str | Path, name: str) -> Path:
    """Where an agent keeps what it must find again after a restart (its runs, runc's state), and
    what names its cgroups (agent_cgroup_name)."""
    return Path(home) / "agents" / name


def isolation_for(settings: Settings, agent: str) -> tuple[Hierarchy | None, str]:
    """The cgroup hierarchy the agent's tasks run in (`agent`: its agent_cgroup_name), or None,
    and a sentence saying which isolators are on, or why none is."""
    if settings.isolation == "off":
        return None, "off (PELOTON_ISOLATION=off): tasks are bare process groups, their resources only counted"
    hierarchy, note = find_hierarchy(agent)
    if hierarchy is None:
        return None, f"{note}: tasks are bare process groups, their resources only counted"
    return hierarchy, (f"{hierarchy.describe()}: cpu quota, memory (swap off), pids {settings.task_pids_max}"
                       + (f"; {note}" if note else ""))


def _now_ms() -> int:
    return int(time.time() * 1000)


def run_agent(settings: Settings, specs: list[AgentSpec], simulate: bool = False, name: str | None = None,
              max_seconds: float | None = None, gpus: tuple[str, ...] = ()) -> None:
    name = name or specs[0].name
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s agent {name} %(levelname)s %(name)s: %(message)s")
    agent = HostAgent(settings, specs, simulate, name, gpus)
    signal.signal(signal.SIGTERM, agent.stop)
    signal.signal(signal.SIGINT, agent.stop)
    signal.signal(signal.SIGHUP, agent.restart)
    from peloton.registry import join  # kazoo is loaded only where a registry is used

    address = metrics.serve(settings)
    registry = join(settings.zookeeper, "agent", name, {"hosts": sorted(agent.hosts)[:100],
                                                         "host_count": len(agent.hosts), "metrics": address},
                    auth=settings.zookeeper_auth)
    settle_heap()
    try:
        agent.run(max_seconds)
    finally:
        if registry is not None:
            registry.close()
