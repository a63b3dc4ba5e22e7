"""The host manager's side of its hosts' agents: their signed reports read (a host joins, comes back
UP, its runs' updates go out, runs it has that nobody knows are killed), their silence judged (a
host DOWN, its runs lost), and commands sent to each sealed with its host's key where the stage
holds the cluster's (peloton/auth/host_keys.py), so that no other agent reads them."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from peloton import metrics
from peloton.auth.host_keys import HEADER as HOST_SIGNATURE
from peloton.auth.host_keys import HostKeys, seal
from peloton.auth.signing import header_of
from peloton.config import Settings
from peloton.model.events import split_task_id, task_status
from peloton.model.gang import task_problem
from peloton.model.mesos import LATE_END_REASONS, Reason
from peloton.model.resources import Resources
from peloton.runtime import Emitter, Record
from peloton.topics import Catalogue, partition_for
from stages.launch.agents.remote import RemoteDriver
from stages.launch.hosts import NO_RUN, HostBook, Run
from stages.launch.inventory import AGENT
from stages.launch.probes import LeaseProbes
from stages.launch.silence import Silence, judge, quiet_after

log = logging.getLogger("peloton.launch")

JUDGED_EVERY_S = 0.2  # silence is judged this often (each judgement reads every host's last report)
TOPIC = "placements"  # the host shards: partition N of it, and of agent-reports, is shard N (stage.py)


class AgentLink:
    def __init__(self, book: HostBook, running: dict[str, Run], emit: Emitter, settings: Settings,
                 catalogue: Catalogue, ends: Callable[[str, list[int]], dict[int, int] | None],
                 caught_up: Callable[[str, list[int]], bool]) -> None:
        self.book, self.running, self.emit = book, running, emit
        self.settings, self.catalogue = settings, catalogue
        self._ends, self._caught_up = ends, caught_up
        self.host_keys = HostKeys(settings.agent_report_key) if settings.agent_report_key else None
        self.remote = RemoteDriver(self.send_command, commands_end=self.commands_end)
        self.reconciling: dict[str, str] = {}  # task id -> host, of unknown runs killed on their agents
        self._commands_ends: dict[int, tuple[float, int | None]] = {}  # partition -> (asked at, end)
        self._next_catch_up = 0.0  # when the host manager may next ask whether it has read all
        self._behind = False  # it was not caught up at the last ask (said once)
        self._last_check: float | None = None  # when silence was last judged
        self.probes = LeaseProbes(settings.agent_heartbeat_s)  # quiet hosts' agents, asked of their lease
        self.outage_since: float | None = None  # most hosts quiet at once since then
        self._next_judgement = 0.0
        self._heard_at = 0.0  # when a report was last read (time given back is not hearing)
        self._kept_said: set[str] = set()  # silent hosts not called DOWN yet, said once each

    def send_command(self, host_id: str, command: dict) -> None:
        """An AgentCommand to one host's agent; sealed with its host's key where this stage holds
        the cluster's, so that no other agent reads it."""
        if self.host_keys is None:
            self.emit.emit("agent-commands", host_id, "peloton.AgentCommand", command)
            return
        plain = self.emit.serde.encode("peloton.AgentCommand", command)
        self.emit.emit("agent-commands", host_id, "peloton.SealedAgentCommand",
                       {"host_id": host_id, "sealed": seal(self.host_keys.key(host_id), host_id, plain)})

    def receive(self, records: list[Record], shards: set[int]) -> None:
        """A host agent's heartbeat: the host joins (or comes back UP), its status updates go
        out, and runs it has that we do not know are killed (reconciliation)."""
        now = time.monotonic()
        for r in records:
            report = r.value
            host_id = report["host_id"]
            known = self.book.inventory.get(host_id)
            if r.partition not in shards or known is not None and known.driver != AGENT:
                self.emit.dead_letter(r, f"report of agent {host_id!r} on a shard not served here, or a host "
                                         "this host manager runs itself")
                continue
            problem = task_problem({"task_id": host_id, "resources": report["capacity"]})
            if not problem and self.host_keys is not None:
                problem = self.host_keys.problem(host_id, r.raw_value or b"", header_of(r.headers, HOST_SIGNATURE))
            if problem:
                self.emit.dead_letter(r, f"agent report: {problem}")
                continue
            self.join(host_id, r.partition, report)
            ledger = self.book.ledgers.get(host_id)
            if report.get("usage") and ledger is not None and ledger.measure(report["usage"]):
                self.book.touch(host_id)
            self._heard_at = now
            if self.book.heard(host_id, now):
                log.info("agent %s reports again: UP", host_id)
            unknown = self.remote.receive(report, self.settings.agent_timeout_s)
            if unknown:
                log.warning("agent %s runs %d runs this host manager does not know: killing them", host_id,
                            len(unknown))
                self.remote.kill_on(host_id, unknown)
                self.reconciling.update(dict.fromkeys(unknown, host_id))
        metrics.UNREAD_LAUNCHES.set(len(self.remote.unread))
        self.late_ends()

    def commands_end(self, host_id: str) -> int | None:
        """The end of the agent-commands partition that carries the host's commands, asked of the
        broker at most once a second per partition (a batch can hold many hosts' reports, and a
        slow broker would hold the loop for each)."""
        partition = partition_for(host_id, self.catalogue["agent-commands"].partitions)
        now = time.monotonic()
        asked = self._commands_ends.get(partition)
        if asked is None or now - asked[0] >= 1.0:
            ends = self._ends("agent-commands", [partition])
            asked = self._commands_ends[partition] = (now, None if ends is None else ends.get(partition))
        return asked[1]

    def late_ends(self) -> None:
        """How runs this host manager had given up ended on their hosts (killed by their agent's
        fencing, or by reconciliation when the agent came back): an event of that run for the job
        manager, so that the task's history shows when its stale copy stopped, and why."""
        for u in self.remote.late:
            try:
                job_id, instance, run_id = split_task_id(u.task_id)
            except ValueError:
                continue  # not a run id this scheduler made
            reason, message = u.reason, u.message
            if self.reconciling.pop(u.task_id, None) is not None and reason not in LATE_END_REASONS:
                reason = Reason.RECONCILIATION
                message = (f"a copy of a run given up earlier (its host was DOWN) was still running on {u.host_id}: "
                           f"killed when its agent reported again ({u.message})")
            self.emit.emit("task-status", job_id, "peloton.TaskStatus", task_status(
                job_id, instance, run_id, u.task_id, u.host_id, u.state, reason, message, u.exit_code, u.signal,
                u.timestamp_ms))
        self.remote.late = []

    def _outage(self, verdict: Silence, now: float) -> None:
        """Said when a control-plane outage begins and ends (once reports are read again: time
        given back to the agents is not the end); as it ends, every host still silent has a whole
        timeout again to report (their agents kept their runs through it)."""
        if verdict.outage and self.outage_since is None:
            self.outage_since = now
            log.warning("%s: no host is called DOWN while it lasts (at most PELOTON_AGENT_OUTAGE_LIMIT_S=%gs "
                        "past the timeout); the agents keep their runs",
                        next(iter(verdict.kept.values()), "most hosts are silent at once"),
                        self.settings.agent_outage_limit_s)
        elif not verdict.outage and self.outage_since is not None and self._heard_at > self.outage_since:
            late = self.book.silent(now, quiet_after(self.settings.agent_lease()))
            for host_id in late:
                self.book.seen[host_id] = now
            log.warning("the control-plane outage is over after %.0fs: the %d hosts still silent have %gs to report "
                        "before any is called DOWN", now - self.outage_since, len(late),
                        self.settings.agent_timeout_s)
            self.outage_since = None

    def join(self, host_id: str, shard: int, report: dict) -> None:
        held = {}
        for task_id in self.remote.on_host(host_id):  # adopted runs, or ours before a change
            spec = self.running.get(task_id, NO_RUN).spec
            if spec:
                held[task_id] = (Resources.from_record(spec["resources"]), bool(spec.get("revocable")))
        joined = self.book.join(host_id, shard, report, held)
        if joined is not None:
            log.info("agent %s joined: %s, labels %s", host_id, joined.capacity, joined.labels)

    def check(self, now: float) -> None:
        """An agent silent for agent_timeout_s is down: its runs are lost (and run elsewhere),
        and its host takes no placements until it reports again. Time this host manager was not
        listening (its loop waited for the broker or the store) is not the agents' silence: it
        is added to when each was last heard, so a broker outage marks no host DOWN."""
        timeout = self.settings.agent_timeout_s
        last = self._last_check if self._last_check is not None else now
        self._last_check = now
        deaf = now - last
        if deaf > max(1.0, 2 * self.settings.agent_heartbeat_s):
            log.warning("not listening for %.1fs (waiting for the broker or the store): agents are given that "
                        "time back before any is judged silent", deaf)
            self.book.give_back(deaf)
        if now < self._next_judgement:
            return
        self._next_judgement = now + JUDGED_EVERY_S
        lease, limit = self.settings.agent_lease(), self.settings.agent_outage_limit_s
        verdict = judge(self.book.seen, self.book.down, now, timeout, lease, limit, self.probes.holds_until)
        self.probes.want({h: self.book.inventory[h].log_url for h in verdict.quiet if h in self.book.inventory})
        self._outage(verdict, now)
        for host_id in verdict.kept.keys() - self._kept_said:
            if not verdict.outage:
                log.warning("agent %s sent no report for %gs, but %s: judged once that has run out", host_id,
                            timeout, verdict.kept[host_id])
        self._kept_said = set(verdict.kept)
        silent = verdict.lost
        if not silent:
            return
        # A report written but not read here yet (this instance is behind, a transaction holds
        # the partition, the broker does not answer) is not silence: judged only when caught up,
        # which is asked of the broker at most once a second.
        if now < self._next_catch_up:
            return
        shards = sorted({partition_for(h, self.catalogue[TOPIC].partitions) for h in silent})
        if not self._caught_up(TOPIC, shards):
            if not self._behind:
                log.info("%d agents look silent, but this host manager has not read all of shards %s yet: "
                         "judged when it has", len(silent), shards)
            self._behind, self._next_catch_up = True, now + 1.0
            return
        self._behind = False
        for host_id in silent:
            self.book.lose(host_id)
            self.remote.host_lost(host_id, f"its agent sent no report for {timeout:g}s")
            log.warning("agent %s sent no report for %gs: DOWN, its runs are lost", host_id, timeout)
