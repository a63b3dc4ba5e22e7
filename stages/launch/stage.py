"""launch stage: placements and kills in (partition = host shard), and the agents' reports
(agent-reports, partitioned alike: an instance owns a shard's partition of both); task status
events out (key = job id), host state out (compacted, key = host id). A report counts only when
signed with its host's key (peloton/auth/host_keys.py), where this stage holds the cluster's.

Every launch is first claimed in the store by task run id: a placement delivered twice (a place
instance died after sending it, or this partition moved) launches nothing the second time. A kill
comes on every shard's partition: the shard running the run kills it; for a run nobody launched
yet, one shard claims it as ended (the same claim), so a placement that comes later launches
nothing, and reports it killed.
"""

from __future__ import annotations

import itertools
import logging
import time
from pathlib import Path

from peloton import metrics
from peloton.auth.host_keys import HEADER as HOST_SIGNATURE
from peloton.auth.host_keys import HostKeys, seal
from peloton.auth.signing import header_of
from peloton.model.events import StatusRuns, send_progress, split_task_id, task_status
from peloton.model.gang import task_problem
from peloton.model.health import DISABLED, HEALTH_UNKNOWN
from peloton.model.resources import Resources
from peloton.model.states import LATE_END_REASONS, REASON_RECONCILIATION
from peloton.runtime import HeldOffsets, Record, Stage, Sweep, now_ms
from peloton.store import CLAIMS_KEPT_MS, Launch, LaunchStore
from peloton.topics import partition_for
from stages.launch.agents import AgentDriver, LaunchRequest, TaskUpdate, make_driver
from stages.launch.agents.remote import RemoteDriver
from stages.launch.inventory import AGENT, REMOTE, HostSpec, parse_inventory
from stages.launch.ledger import HostLedger, judge_placement

log = logging.getLogger("peloton.launch")


TOPIC = "placements"
REPORTS = "agent-reports"  # partitioned as TOPIC: partition N of each is host shard N
# Runs that ended more than store.CLAIMS_KEPT_MS ago are forgotten hourly, up to 10,000 a tick.
CLAIM_SWEEP = (3600.0, 10_000)


class LaunchStage(Stage):
    name = "launch"
    inputs = (TOPIC, REPORTS)
    assignment = "range"  # a shard's placements and its agents' reports in one instance

    def __init__(self, store: LaunchStore, drivers: dict[str, AgentDriver] | None = None):
        self.store = store
        self.drivers = drivers or {}
        self.ledgers: dict[str, HostLedger] = {}  # hosts of the shards this instance owns
        self.running: dict[str, tuple[dict, str]] = {}  # task id -> (launch spec, host id)
        self.last_state: dict[str, str] = {}  # task id -> the last Mesos state reported for it
        self.updates: list[TaskUpdate] = []  # from the drivers, not yet published
        self.changed_hosts: dict[str, list[str]] = {}  # host id -> placement ids applied since last report
        self.launched = 0
        self._next_host_count = 0.0  # when the peloton_hosts gauge is refreshed next
        self.claim_sweep = Sweep(*CLAIM_SWEEP)
        self.kill_reasons: dict[str, tuple[str, str]] = {}  # task id -> (reason, message) of a kill asked for
        self.shards: set[int] = set()  # the host shards this instance owns
        self.host_keys: HostKeys | None = None  # checks each report's signature, where set (bind)
        self.agent_seen: dict[str, float] = {}  # agent host id -> time.monotonic() of its last report
        self.down: set[str] = set()  # agent hosts whose reports stopped
        self.maintenance: dict[str, str] = {}  # host id -> DRAINING, DRAINED or DOWN (an operator's)
        # After taking a shard, its agents have not reported to us yet: placements naming a host
        # we do not know wait until it reports or the shard has settled, instead of being refused.
        self.settling: dict[int, float] = {}  # shard -> time.monotonic() when it has settled
        self.waiting: list[Record] = []  # placements waiting for their hosts' first reports
        self.held = HeldOffsets()
        self.reconciling: dict[str, str] = {}  # task id -> host, of unknown runs killed on their agents
        self._commands_ends: dict[int, tuple[float, int | None]] = {}  # partition -> (asked at, end)
        self._next_catch_up = 0.0  # when the host manager may next ask whether it has read all
        self._behind = False  # it was not caught up at the last ask (said once)

    def bind(self, emitter, settings, catalogue) -> None:
        super().bind(emitter, settings, catalogue)
        if catalogue[REPORTS].partitions != catalogue[TOPIC].partitions:
            raise ValueError(f"topics.yaml: {REPORTS} has {catalogue[REPORTS].partitions} partitions and {TOPIC} "
                             f"{catalogue[TOPIC].partitions}: a host shard is one partition of each")
        self.host_keys = HostKeys(settings.agent_report_key) if settings.agent_report_key else None
        # Hosts run by this process's drivers; agents (separate processes) join as they report.
        self.inventory = {h.host_id: h for h in parse_inventory(settings.hosts, catalogue[TOPIC].partitions)
                          if h.driver not in REMOTE}
        self.remote = RemoteDriver(self._send_command, commands_end=self._commands_end)
        self.drivers[AGENT] = self.remote
        for kind in {h.driver for h in self.inventory.values()}:
            if kind not in self.drivers:
                if kind == "local":
                    options = {"sandbox_root": Path(settings.home) / "sandboxes", "user": settings.task_user,
                               "allowed_users": settings.task_users, "sandbox_keep_seconds": settings.sandbox_keep_s,
                               "task_uids": settings.task_uids, "identities_dir": settings.identities_dir}
                else:
                    options = {"task_seconds": settings.sim_task_seconds}
                self.drivers[kind] = make_driver(kind, **options)

    def _send_command(self, host_id: str, command: dict) -> None:
        """An AgentCommand to one host's agent; sealed with its host's key where this stage holds
        the cluster's, so that no other agent reads it."""
        if self.host_keys is None:
            self.emit.emit("agent-commands", host_id, "peloton.AgentCommand", command)
            return
        plain = self.emit.serde.encode("peloton.AgentCommand", command)
        self.emit.emit("agent-commands", host_id, "peloton.SealedAgentCommand",
                       {"host_id": host_id, "sealed": seal(self.host_keys.key(host_id), host_id, plain)})

    # -- ownership ----------------------------------------------------------------------------
    def on_assign(self, partitions: list[tuple[str, int]]) -> None:
        shards = {p for t, p in partitions if t == TOPIC}
        self.shards |= shards
        settled_at = time.monotonic() + max(2.0, 3 * self.settings.agent_heartbeat_s)
        self.settling.update(dict.fromkeys(shards, settled_at))
        count = self.catalogue[TOPIC].partitions
        self.maintenance.update({h: s for h, s in self.store.host_states().items() if partition_for(h, count) in shards})
        self._adopt(shards)
        hosts = [h for h in self.inventory.values() if h.shard in shards and h.driver != AGENT]
        for h in hosts:
            self.ledgers[h.host_id] = HostLedger(h.host_id, h.capacity)
            self.changed_hosts.setdefault(h.host_id, [])
        # Runs the store says are active on these hosts but no driver of ours is running were
        # started by an instance that is gone: they are reported lost (admit retries them).
        lost = []
        for launch in self.store.active_launches([h.host_id for h in hosts]):
            if launch.task_id in self.running:
                self.ledgers[launch.host_id].try_reserve(launch.task_id, Resources(launch.cpu, launch.mem_mb, launch.disk_mb, launch.gpu))
            else:
                lost.append(launch)
        # Their processes may still run (a local task is its own process group and outlives a
        # SIGKILLed launch process): stop them first, so that nothing reported lost still runs.
        orphans: dict[str, list[str]] = {}
        for launch in lost:
            orphans.setdefault(self.inventory[launch.host_id].driver, []).append(launch.task_id)
        reaped: dict[str, str] = {}
        for kind, task_ids in orphans.items():
            driver = self.drivers.get(kind)
            if driver is not None:
                reaped.update(driver.reap_orphans(task_ids))
        ends = {}
        for launch in lost:
            message = "its host manager instance went away"
            if launch.task_id in reaped:
                message += "; " + reaped[launch.task_id]
                log.warning("task %s: %s", launch.task_id, reaped[launch.task_id])
            ends[launch.task_id] = task_status(launch.job_id, launch.instance, launch.run_id, launch.task_id,
                                               launch.host_id, "TASK_LOST", reason="REASON_AGENT_DISCONNECTED",
                                               message=message)
        if ends:
            self.store.end_launches(list(ends), now_ms(), ends)
        for status in ends.values():
            self.emit.emit("task-status", status["job_id"], "peloton.TaskStatus", status)
        self._report_hosts()

    def _adopt(self, shards: set[int]) -> None:
        """Runs on agents of these shards that an earlier owner launched go on running: they are
        ours now. Each agent's next report says which still run (the others are lost); an agent
        that does not report within agent_timeout_s is down."""
        partitions = self.catalogue[TOPIC].partitions
        hosts = [h for h in self.store.active_launch_hosts()
                 if partition_for(h, partitions) in shards and (h not in self.inventory or h in self.agent_seen)]
        if not hosts:
            return
        now = time.monotonic()
        adopted = 0
        for launch in self.store.active_launches(hosts):
            if launch.task_id in self.running:
                continue
            spec = {"task_id": launch.task_id, "job_id": launch.job_id, "instance": launch.instance,
                    "run_id": launch.run_id, "resources": Resources(launch.cpu, launch.mem_mb, launch.disk_mb,
                                                                    launch.gpu).to_record()}
            self.running[launch.task_id] = (spec, launch.host_id)
            self.remote.adopt(launch.task_id, launch.host_id)
            self.agent_seen.setdefault(launch.host_id, now)
            adopted += 1
        log.info("adopted %d runs on %d agent hosts", adopted, len(hosts))

    def on_revoke(self, partitions: list[tuple[str, int]]) -> None:
        shards = {p for t, p in partitions if t == TOPIC}
        self.shards -= shards
        self.waiting = [r for r in self.waiting if r.partition not in shards]
        for shard in shards:
            self.settling.pop(shard, None)
            self.held.drop((TOPIC, shard))
        for host_id in [h for h, spec in self.inventory.items() if spec.shard in shards]:
            self.ledgers.pop(host_id, None)
            self.changed_hosts.pop(host_id, None)
            if self.inventory[host_id].driver == AGENT:  # the next owner adopts its runs
                del self.inventory[host_id]
                self.agent_seen.pop(host_id, None)
                self.down.discard(host_id)
                for task_id in self.remote.forget(host_id):
                    self.running.pop(task_id, None)

    def held_offsets(self) -> dict[tuple[str, int], int]:
        return self.held.lowest()

    # -- placements and kills -------------------------------------------------------------------
    def handle(self, records: list[Record]) -> None:
        """Placements and kills in the order they came: a kill after a placement of the same run
        finds it launched, one before it leaves a claim that keeps it from launching."""
        handlers = {"peloton.TaskKill": self._kills, "peloton.AgentReport": self._agent_reports,
                    "peloton.HostMaintenance": self._maintenance_requests}
        for schema, run in itertools.groupby(records, key=lambda r: r.schema):
            handlers.get(schema, self._placements)(list(run))
        self._report_hosts()

    def _agent_reports(self, records: list[Record]) -> None:
        """A host agent's heartbeat: the host joins (or comes back UP), its status updates go
        out, and runs it has that we do not know are killed (reconciliation)."""
        now = time.monotonic()
        for r in records:
            report = r.value
            host_id = report["host_id"]
            if r.partition not in self.shards or host_id in self.inventory and self.inventory[host_id].driver != AGENT:
                self.emit.dead_letter(r, f"report of agent {host_id!r} on a shard not served here, or a host "
                                         "this host manager runs itself")
                continue
            problem = task_problem({"task_id": host_id, "resources": report["capacity"]})
            if not problem and self.host_keys is not None:
                problem = self.host_keys.problem(host_id, r.raw_value or b"", header_of(r.headers, HOST_SIGNATURE))
            if problem:
                self.emit.dead_letter(r, f"agent report: {problem}")
                continue
            self._join(host_id, r.partition, report)
            self.agent_seen[host_id] = now
            if host_id in self.down:
                self.down.discard(host_id)
                self.changed_hosts.setdefault(host_id, [])
                log.info("agent %s reports again: UP", host_id)
            unknown = self.remote.receive(report, self.settings.agent_timeout_s)
            if unknown:
                log.warning("agent %s runs %d runs this host manager does not know: killing them", host_id,
                            len(unknown))
                self.remote.kill_on(host_id, unknown)
                self.reconciling.update(dict.fromkeys(unknown, host_id))
        metrics.UNREAD_LAUNCHES.set(len(self.remote.unread))
        self._late_ends()

    def _commands_end(self, host_id: str) -> int | None:
        """The end of the agent-commands partition that carries the host's commands, asked of the
        broker at most once a second per partition (a batch can hold many hosts' reports, and a
        slow broker would hold the loop for each)."""
        partition = partition_for(host_id, self.catalogue["agent-commands"].partitions)
        now = time.monotonic()
        asked = self._commands_ends.get(partition)
        if asked is None or now - asked[0] >= 1.0:
            ends = self.ends("agent-commands", [partition])
            asked = self._commands_ends[partition] = (now, None if ends is None else ends.get(partition))
        return asked[1]

    def _late_ends(self) -> None:
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
                reason = REASON_RECONCILIATION
                message = (f"a copy of a run given up earlier (its host was DOWN) was still running on {u.host_id}: "
                           f"killed when its agent reported again ({u.message})")
            self.emit.emit("task-status", job_id, "peloton.TaskStatus", task_status(
                job_id, instance, run_id, u.task_id, u.host_id, u.state, reason, message, u.exit_code, u.signal,
                u.timestamp_ms))
        self.remote.late = []

    def _maintenance_requests(self, records: list[Record]) -> None:
        """START: the host takes no new placements, and the job manager, seeing it DRAINING in
        host-state, moves its runs as each job's disruption budget allows (stages/admit/drain.py);
        once it has none it is DRAINED, then DOWN. COMPLETE: UP again."""
        for r in records:
            m = r.value
            host_id = m["host_id"]
            if host_id not in self.inventory or self.inventory[host_id].shard not in self.shards:
                self.emit.dead_letter(r, f"maintenance of host {host_id!r}, which no host manager of this shard serves")
                continue
            state = "DRAINING" if m["action"] == "START" else "UP"
            if self.maintenance.get(host_id, "UP") in (state, "DRAINED", "DOWN") and state == "DRAINING":
                continue  # already draining or drained: a repeat
            self._set_maintenance(host_id, state)
            log.info("host %s: maintenance %s (%s)", host_id, m["action"].lower(), m["requested_by"] or "?")

    def _set_maintenance(self, host_id: str, state: str) -> None:
        self.store.set_host_state(host_id, state, now_ms())
        if state == "UP":
            self.maintenance.pop(host_id, None)
        else:
            self.maintenance[host_id] = state
        self.changed_hosts.setdefault(host_id, [])

    def _advance_maintenance(self) -> None:
        """A drained host goes DRAINED once no run is left on it, and DOWN at the next step."""
        for host_id, state in list(self.maintenance.items()):
            if state == "DRAINED":
                self._set_maintenance(host_id, "DOWN")
            elif state == "DRAINING" and not any(h == host_id for _, h in self.running.values()):
                self._set_maintenance(host_id, "DRAINED")

    def _join(self, host_id: str, shard: int, report: dict) -> None:
        capacity = Resources.from_record(report["capacity"])
        labels = {**report["labels"], "hostname": host_id}
        ports = tuple((r["low"], r["high"]) for r in report["port_ranges"])
        known = self.inventory.get(host_id)
        log_url = report.get("log_url") or ""
        if known is not None and (known.capacity, known.labels, known.port_ranges, known.log_url) == (
                capacity, labels, ports, log_url):
            return
        self.inventory[host_id] = HostSpec(host_id, AGENT, capacity, shard, labels, ports, log_url)
        ledger = self.ledgers[host_id] = HostLedger(host_id, capacity)
        for task_id in self.remote.on_host(host_id):  # adopted runs, or ours before a change
            spec = self.running.get(task_id, ({}, ""))[0]
            if spec:
                ledger.held.charge(task_id, Resources.from_record(spec["resources"]))
        self.changed_hosts.setdefault(host_id, [])
        log.info("agent %s joined: %s, labels %s", host_id, capacity, labels)

    def _kills(self, records: list[Record]) -> None:
        unlaunched: dict[str, dict] = {}
        for r in records:
            k = r.value
            self.kill_reasons.setdefault(k["task_id"], (k["reason"], k["message"]))
            entry = self.running.get(k["task_id"])
            if entry is not None:
                self.drivers[self.inventory[entry[1]].driver].kill([k["task_id"]])
            else:
                unlaunched.setdefault(k["task_id"], k)
        if not unlaunched:
            return
        now = now_ms()
        claimed = self.store.claim_launches([
            Launch(k["task_id"], k["job_id"], k["instance"], k["run_id"], "", 0.0, 0.0, 0.0, 0.0, now, now)
            for k in unlaunched.values()])
        ends = {}
        for task_id in claimed:  # nobody launched it: it never will be
            k = unlaunched[task_id]
            ends[task_id] = task_status(k["job_id"], k["instance"], k["run_id"], task_id, "", "TASK_KILLED",
                                        reason=k["reason"], message=k["message"] + " (before it was launched)")
            self.kill_reasons.pop(task_id, None)
        if ends:
            self.store.end_launches(list(ends), now, ends)
        for status in ends.values():
            self.emit.emit("task-status", status["job_id"], "peloton.TaskStatus", status)
        # A run launched elsewhere is that shard's to kill; forget the reason here.
        for task_id in unlaunched:
            self.kill_reasons.pop(task_id, None)

    def _placements(self, records: list[Record]) -> None:
        accepted: list[tuple[dict, str]] = []  # (launch spec, host id)
        refused: list[tuple[dict, str, str]] = []  # (launch spec, host id, why)
        again: list[tuple[dict, str]] = []  # adopted runs whose launch may never have gone out
        for r in records:
            p = r.value
            problem = next(filter(None, (task_problem(a["task"]) for a in p["assignments"])), None)
            if problem:
                self.refuse(r, [a["task"] for a in p["assignments"]], problem)
                continue
            if self._settling(r):
                self.waiting.append(r)
                self.held.hold((r.topic, r.partition), r.offset)
                continue
            closed = self.down or self.maintenance  # hosts that take no placements now
            ledgers = self.ledgers if not closed else {h: l for h, l in self.ledgers.items()
                                                       if h not in self.down and h not in self.maintenance}
            for a in p["assignments"]:  # the ports placement picked travel with the task to its host
                if a.get("ports"):
                    a["task"]["assigned_ports"] = a["ports"]
            verdict = judge_placement(p["assignments"], ledgers, self.running, self.inventory)
            if isinstance(verdict, str):
                # Its tasks go back to their pools (an agent host may have gone since place saw it).
                self.emit.dead_letter(r, verdict)
                metrics.LAUNCH_REFUSALS.labels("unknown_host").inc(len(p["assignments"]))
                refused.extend((a["task"], a["host_id"], verdict) for a in p["assignments"])
                continue
            for host_id in verdict.applied_on:
                self.changed_hosts.setdefault(host_id, []).append(p["placement_id"])
            # A placement read again after a takeover: its launch went out only if the last owner's
            # transaction committed, and then its offset would have too. So an adopted run whose
            # agent has not confirmed it is launched again (an agent ignores a launch it has had).
            again.extend((a["task"], a["host_id"]) for a in p["assignments"]
                         if a["task"]["task_id"] in self.remote.unconfirmed)
            accepted.extend(verdict.accepted)
            refused.extend(verdict.refused)
            for _t, host_id, _why in verdict.refused:
                metrics.LAUNCH_REFUSALS.labels("host_closed" if host_id in closed or host_id not in self.ledgers
                                               else "no_room").inc()
        if accepted:
            now = now_ms()
            new = self.store.claim_launches([
                Launch(t["task_id"], t["job_id"], t["instance"], t["run_id"], host_id, t["resources"]["cpu"],
                       t["resources"]["mem_mb"], t["resources"]["disk_mb"], t["resources"]["gpu"], now)
                for t, host_id in accepted
            ])
            by_driver: dict[str, list[LaunchRequest]] = {}
            send_progress(self.emit, "LAUNCHING", [(t, host_id) for t, host_id in accepted if t["task_id"] in new])
            for t, host_id in accepted:
                if t["task_id"] not in new:  # launched before (by us or an earlier owner)
                    self.ledgers[host_id].release(t["task_id"])
                    continue
                self.running[t["task_id"]] = (t, host_id)
                # LAUNCHING tells the job manager the run is launched: no TASK_STAGING besides.
                self.last_state[t["task_id"]] = "TASK_STAGING"
                by_driver.setdefault(self.inventory[host_id].driver, []).append(_request(t, host_id))
            for kind, requests in by_driver.items():
                self.drivers[kind].launch(requests)
                self.launched += len(requests)
                metrics.LAUNCHES.labels(kind).inc(len(requests))
        for t, host_id, why in refused:
            self._status(t["job_id"], t["instance"], t["run_id"], t["task_id"], host_id, "TASK_DROPPED",
                         reason="REASON_PLACEMENT_REFUSED", message=why)
        if again:
            log.info("launching again %d adopted runs whose launch their placement says never went out", len(again))
            send_progress(self.emit, "LAUNCHING", again)
            for t, host_id in again:
                self.running[t["task_id"]] = (t, host_id)
                self.last_state[t["task_id"]] = "TASK_STAGING"
            self.remote.launch([_request(t, host_id) for t, host_id in again], again=True)

    def _settling(self, r: Record) -> bool:
        """True while the placement names a host this instance has not heard from yet on a shard it
        has just taken: the host's agent reports within a heartbeat or two."""
        until = self.settling.get(r.partition)
        if until is None:
            return False
        if time.monotonic() >= until:
            del self.settling[r.partition]
            return False
        return any(a["host_id"] not in self.inventory for a in r.value["assignments"])

    def _placements_waited(self) -> None:
        """Placements that waited for their hosts: judged once the hosts reported or the shard settled."""
        still, ready = [], []
        for r in self.waiting:
            (still if self._settling(r) else ready).append(r)
        if not ready:
            return
        self.waiting = still
        self._placements(ready)
        for r in ready:
            self.held.release((r.topic, r.partition), r.offset)

    # -- driver updates -----------------------------------------------------------------------
    def tick(self, now: float) -> None:
        self._check_agents(time.monotonic())
        if self.waiting:
            self._placements_waited()
        if self.maintenance:
            self._advance_maintenance()
        for driver in self.drivers.values():
            self.updates.extend(driver.poll())
        if self.updates:
            self._apply_updates()
        self._report_hosts()
        if now >= self._next_host_count:
            self._next_host_count = now + self.settings.metrics_period_s
            states = dict.fromkeys(("UP", "DOWN", "DRAINING", "DRAINED"), 0)
            for host_id in self.ledgers:
                state = self.maintenance.get(host_id) or ("DOWN" if host_id in self.down else "UP")
                states[state] = states.get(state, 0) + 1
            for state, n in states.items():
                metrics.HOSTS.labels(state).set(n)
        if self.claim_sweep.due(now):
            gone = self.claim_sweep.done(now, self.store.forget_launches(now_ms(), self.claim_sweep.batch))
            if gone:
                log.info("forgot %d runs that ended more than %d days ago", gone, CLAIMS_KEPT_MS // 86_400_000)

    def _check_agents(self, now: float) -> None:
        """An agent silent for agent_timeout_s is down: its runs are lost (and run elsewhere),
        and its host takes no placements until it reports again. Time this host manager was not
        listening (its loop waited for the broker or the store) is not the agents' silence: it
        is added to when each was last heard, so a broker outage marks no host DOWN."""
        timeout = self.settings.agent_timeout_s
        last = getattr(self, "_last_agent_check", now)
        self._last_agent_check = now
        deaf = now - last
        if deaf > max(1.0, 2 * self.settings.agent_heartbeat_s):
            log.warning("not listening for %.1fs (waiting for the broker or the store): agents are given that "
                        "time back before any is judged silent", deaf)
            for host_id in self.agent_seen:
                self.agent_seen[host_id] += deaf
        silent = [h for h, seen in self.agent_seen.items() if now - seen > timeout and h not in self.down]
        if not silent:
            return
        # A report written but not read here yet (this instance is behind, a transaction holds
        # the partition, the broker does not answer) is not silence: judged only when caught up,
        # which is asked of the broker at most once a second.
        if now < self._next_catch_up:
            return
        shards = sorted({partition_for(h, self.catalogue[TOPIC].partitions) for h in silent})
        if not self.caught_up(TOPIC, shards):
            if not self._behind:
                log.info("%d agents look silent, but this host manager has not read all of shards %s yet: "
                         "judged when it has", len(silent), shards)
            self._behind, self._next_catch_up = True, now + 1.0
            return
        self._behind = False
        for host_id in silent:
            self.down.add(host_id)
            self.changed_hosts.setdefault(host_id, [])
            self.remote.host_lost(host_id, f"its agent sent no report for {timeout:g}s")
            log.warning("agent %s sent no report for %gs: DOWN, its runs are lost", host_id, timeout)

    def _apply_updates(self) -> None:
        """Publish what the drivers reported. The ends are stored first: if the store is away the
        updates stay queued for the next tick, since the drivers will not report them again."""
        runs, ended, moved = StatusRuns(), {}, []
        for u in self.updates:
            entry = self.running.get(u.task_id)
            if entry is None:
                continue
            spec = entry[0]
            reason, message = u.reason, u.message
            if u.state == "TASK_KILLED" and u.task_id in self.kill_reasons:  # say who asked for it
                reason, message = self.kill_reasons[u.task_id]
            health = u.health or _running_health(u.state, spec)
            runs.add(spec["job_id"], spec["instance"], spec["run_id"], u.host_id, u.state, u.timestamp_ms, reason,
                     message, u.exit_code, u.signal, health)
            moved.append((u.task_id, u.state))
            if u.terminal:  # kept with its launch: sent again if the broker loses it (recover)
                ended[u.task_id] = task_status(spec["job_id"], spec["instance"], spec["run_id"], u.task_id, u.host_id,
                                               u.state, reason, message, u.exit_code, u.signal, u.timestamp_ms,
                                               health=health)
        if ended:
            self.store.end_launches(list(ended), now_ms(), ended)
        self.updates = []
        runs.send(self.emit)
        for task_id, state in moved:
            self.last_state[task_id] = state
        for task_id in ended:
            _spec, host_id = self.running.pop(task_id)
            self.last_state.pop(task_id, None)
            self.kill_reasons.pop(task_id, None)
            ledger = self.ledgers.get(host_id)
            if ledger is not None and ledger.release(task_id):
                self.changed_hosts.setdefault(host_id, [])

    def recover(self) -> None:
        """The broker lost what it held: send again the state of every task running here and the
        end of every run that ended lately on these hosts, whose status events may be gone."""
        for task_id, (spec, host_id) in self.running.items():
            self._status(spec["job_id"], spec["instance"], spec["run_id"], task_id, host_id,
                         self.last_state.get(task_id, "TASK_STAGING"))
        since = now_ms() - int(self.settings.status_replay_s * 1000)
        for status in self.store.ended_launches(list(self.ledgers), since):
            self.emit.emit("task-status", status["job_id"], "peloton.TaskStatus", status)
        for host_id in self.ledgers:
            self.changed_hosts.setdefault(host_id, [])
        self._report_hosts()

    def _status(self, job_id: str, instance: int, run_id: int, task_id: str, host_id: str, state: str,
                reason: str = "", message: str = "", exit_code: int | None = None, signal: int | None = None,
                timestamp_ms: int | None = None) -> None:
        self.emit.emit("task-status", job_id, "peloton.TaskStatus", task_status(
            job_id, instance, run_id, task_id, host_id, state, reason, message, exit_code, signal, timestamp_ms))

    def _report_hosts(self) -> None:
        """One host-state record per host whose accounting changed since the last report."""
        now = now_ms()
        for host_id, applied in self.changed_hosts.items():
            ledger = self.ledgers.get(host_id)
            if ledger is None:
                continue
            spec: HostSpec = self.inventory[host_id]
            labels: dict[tuple[str, str], int] = {}
            jobs: dict[str, int] = {}
            ports: list[int] = []
            for task_id in ledger.held.by_key:  # what placement's TASK constraints, SPREAD and ports count
                task = self.running.get(task_id, ({}, ""))[0]
                for kv in (task.get("labels") or {}).items():
                    labels[kv] = labels.get(kv, 0) + 1
                if task:
                    jobs[task["job_id"]] = jobs.get(task["job_id"], 0) + 1
                    ports.extend((task.get("assigned_ports") or {}).values())
            self.emit.emit("host-state", host_id, "peloton.HostState", {
                "host_id": host_id, "shard": spec.shard, "driver": spec.driver,
                "state": self.maintenance.get(host_id) or ("DOWN" if host_id in self.down else "UP"),
                "reachable": host_id not in self.down,
                "capacity": spec.capacity.to_record(), "allocated": ledger.held.total.to_record(),
                "task_count": len(ledger.held), "labels": spec.labels, "applied_placements": applied,
                "task_labels": [{"key": k, "value": v, "count": n} for (k, v), n in labels.items()],
                "job_tasks": jobs, "used_ports": ports,
                "port_ranges": [{"low": low, "high": high} for low, high in spec.port_ranges],
                "updated_ms": now, "log_url": spec.log_url,
            })
        self.changed_hosts = {}

    def close(self) -> None:
        for driver in self.drivers.values():
            driver.close()


def _running_health(state: str, spec: dict) -> str:
    """What a TASK_RUNNING that says nothing of health means: no check (DISABLED), or none answered yet."""
    if state != "TASK_RUNNING":
        return ""
    return HEALTH_UNKNOWN if spec.get("health_check_json") else DISABLED


# The environment and arguments of the last spec without port variables, as a LaunchRequest holds
# them: a job's alike tasks read from one bundle share those values (avrocodec's shared spans,
# read-only), so their tuples are made once.
_LAST_COMMAND: list = [(None, None, (), ())]


def _request(t: dict, host_id: str) -> LaunchRequest:
    env, args, ports = t["environment"], t["arguments"], t.get("ports")
    last = _LAST_COMMAND[0]
    if ports or env is not last[0] or args is not last[1]:
        environment = dict(env)
        assigned = t.get("assigned_ports") or {}
        for port in ports or []:  # each port in the variable its config names
            if port["env_name"] and port["name"] in assigned:
                environment[port["env_name"]] = str(assigned[port["name"]])
        last = (env, args, tuple(environment.items()), tuple(args))
        if not ports:
            _LAST_COMMAND[0] = last
    return LaunchRequest(
        task_id=t["task_id"], job_id=t["job_id"], instance=t["instance"], run_id=t["run_id"], host_id=host_id,
        command=t["command"], shell=t["shell"], arguments=last[3],
        environment=last[2], resources=Resources.of_read(t["resources"]),
        kill_grace_seconds=t["kill_grace_seconds"], user=t.get("user", ""), image=t.get("image", ""),
        health_check=t.get("health_check_json"),
    )
