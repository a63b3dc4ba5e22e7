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
from peloton.config import Settings
from peloton.host.driver import AgentDriver, LaunchRequest, TaskUpdate
from peloton.model.events import send_progress, task_status
from peloton.model.gang import task_problem
from peloton.model.mesos import PREEMPTED, MesosState
from peloton.model.resources import Resources
from peloton.model.volumes import volume_row
from peloton.runtime import Emitter, HeldOffsets, Record, Stage, Sweep, now_ms
from peloton.store import CLAIMS_KEPT_MS, Launch, LaunchStore
from peloton.topics import Catalogue, partition_for
from stages.launch.agent_link import AgentLink
from stages.launch.agents import make_driver
from stages.launch.hosts import HostBook, Run, host_state
from stages.launch.inventory import AGENT, REMOTE, parse_inventory
from stages.launch.ledger import judge_placement
from stages.launch.requests import away_from_volumes, launch_request
from stages.launch.updates import read_updates

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
        self.book = HostBook()  # the hosts it serves: specs, ledgers, UP/DOWN, maintenance
        self.running: dict[str, Run] = {}  # task id -> its launch spec and host
        self.last_state: dict[str, str] = {}  # task id -> the last Mesos state reported for it
        self.updates: list[TaskUpdate] = []  # from the drivers, not yet published
        self.launched = 0
        self.slack_preemptions = 0  # revocable runs killed for their hosts' slack
        self._next_host_count = 0.0  # when the peloton_hosts gauge is refreshed next
        self.claim_sweep = Sweep(*CLAIM_SWEEP)
        self.kill_reasons: dict[str, tuple[str, str]] = {}  # task id -> (reason, message) of a kill asked for
        self.shards: set[int] = set()  # the host shards this instance owns
        # After taking a shard, its agents have not reported to us yet: placements naming a host
        # we do not know wait until it reports or the shard has settled, instead of being refused.
        self.settling: dict[int, float] = {}  # shard -> time.monotonic() when it has settled
        self.waiting: list[Record] = []  # placements waiting for their hosts' first reports
        self.held = HeldOffsets()

    def bind(self, emitter: Emitter, settings: Settings, catalogue: Catalogue) -> None:
        super().bind(emitter, settings, catalogue)
        metrics.at_zero(metrics.LAUNCH_REFUSALS, ("unknown_host",), ("host_closed",), ("no_room",))
        if catalogue[REPORTS].partitions != catalogue[TOPIC].partitions:
            raise ValueError(f"topics.yaml: {REPORTS} has {catalogue[REPORTS].partitions} partitions and {TOPIC} "
                             f"{catalogue[TOPIC].partitions}: a host shard is one partition of each")
        # Hosts run by this process's drivers; agents (separate processes) join as they report.
        self.book.inventory = {h.host_id: h for h in parse_inventory(settings.hosts, catalogue[TOPIC].partitions)
                               if h.driver not in REMOTE}
        # Asked through the stage at each call: the stage's runtime answers them (tests stand in for it).
        self.agents = AgentLink(self.book, self.running, emitter, settings, catalogue,
                                lambda topic, partitions: self.ends(topic, partitions),
                                lambda topic, partitions: self.caught_up(topic, partitions))
        self.remote = self.drivers[AGENT] = self.agents.remote
        for kind in {h.driver for h in self.book.inventory.values()}:
            if kind not in self.drivers:
                if kind == "local":
                    options = {"sandbox_root": Path(settings.home) / "sandboxes", "user": settings.task_user,
                               "allowed_users": settings.task_users, "sandbox_keep_seconds": settings.sandbox_keep_s,
                               "task_uids": settings.task_uids, "identities_dir": settings.identities_dir}
                else:
                    options = {"task_seconds": settings.sim_task_seconds}
                self.drivers[kind] = make_driver(kind, **options)

    # -- ownership ----------------------------------------------------------------------------
    def on_assign(self, partitions: list[tuple[str, int]]) -> None:
        shards = {p for t, p in partitions if t == TOPIC}
        self.shards |= shards
        settled_at = time.monotonic() + max(2.0, 3 * self.settings.agent_heartbeat_s)
        self.settling.update(dict.fromkeys(shards, settled_at))
        count = self.catalogue[TOPIC].partitions
        self.book.maintenance.update({h: s for h, s in self.store.host_states().items()
                                      if partition_for(h, count) in shards})
        self.book.pools.update({h: p for h, p in self.store.host_pool_members().items()
                                if partition_for(h, count) in shards})
        self._adopt(shards)
        hosts = [h for h in self.book.inventory.values() if h.shard in shards and h.driver != AGENT]
        for h in hosts:
            self.book.serve(h)
        # Runs the store says are active on these hosts but no driver of ours is running were
        # started by an instance that is gone: they are reported lost (admit retries them).
        lost = []
        for launch in self.store.active_launches([h.host_id for h in hosts]):
            if launch.task_id in self.running:
                need = Resources(launch.cpu, launch.mem_mb, launch.disk_mb, launch.gpu)
                self.book.ledgers[launch.host_id].hold(launch.task_id, need,
                                                       bool(self.running[launch.task_id].spec.get("revocable")))
            else:
                lost.append(launch)
        # Their processes may still run (a local task is its own process group and outlives a
        # SIGKILLed launch process): stop them first, so that nothing reported lost still runs.
        orphans: dict[str, list[str]] = {}
        for launch in lost:
            orphans.setdefault(self.book.inventory[launch.host_id].driver, []).append(launch.task_id)
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
                                               launch.host_id, MesosState.TASK_LOST, reason="REASON_AGENT_DISCONNECTED",
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
                 if partition_for(h, partitions) in shards and (h not in self.book.inventory or h in self.book.seen)]
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
            self.running[launch.task_id] = Run(spec, launch.host_id)
            self.remote.adopt(launch.task_id, launch.host_id)
            self.book.seen.setdefault(launch.host_id, now)
            adopted += 1
        log.info("adopted %d runs on %d agent hosts", adopted, len(hosts))

    def on_revoke(self, partitions: list[tuple[str, int]]) -> None:
        shards = {p for t, p in partitions if t == TOPIC}
        self.shards -= shards
        self.waiting = [r for r in self.waiting if r.partition not in shards]
        for shard in shards:
            self.settling.pop(shard, None)
            self.held.drop((TOPIC, shard))
        for host_id in self.book.forget_shards(shards):  # the next owner adopts their runs
            for task_id in self.remote.forget(host_id):
                self.running.pop(task_id, None)

    def held_offsets(self) -> dict[tuple[str, int], int]:
        return self.held.lowest()

    # -- placements and kills -------------------------------------------------------------------
    def _agent_reports(self, records: list[Record]) -> None:
        self.agents.receive(records, self.shards)

    def handle(self, records: list[Record]) -> None:
        """Placements and kills in the order they came: a kill after a placement of the same run
        finds it launched, one before it leaves a claim that keeps it from launching."""
        handlers = {"peloton.TaskKill": self._kills, "peloton.AgentReport": self._agent_reports,
                    "peloton.HostMaintenance": self._maintenance_requests,
                    "peloton.HostPoolChange": self._pool_changes, "peloton.VolumeDelete": self._volume_deletes}
        for schema, run in itertools.groupby(records, key=lambda r: r.schema):
            handlers.get(schema, self._placements)(list(run))
        self._report_hosts()

    def _maintenance_requests(self, records: list[Record]) -> None:
        """START: the host takes no new placements, and the job manager, seeing it DRAINING in
        host-state, moves its runs as each job's disruption budget allows (stages/admit/drain.py);
        once it has none it is DRAINED, then DOWN. COMPLETE: UP again."""
        for r in records:
            m = r.value
            host_id = m["host_id"]
            known = self.book.inventory.get(host_id)
            if known is None or known.shard not in self.shards:
                self.emit.dead_letter(r, f"maintenance of host {host_id!r}, which no host manager of this shard serves")
                continue
            state = "DRAINING" if m["action"] == "START" else "UP"
            if self.book.moving(host_id):  # draining for a pool move: the move is done, the drain the operator's
                self._set_pool(host_id, self.book.pools[host_id][1])
            elif self.book.maintenance.get(host_id, "UP") in (state, "DRAINED", "DOWN") and state == "DRAINING":
                continue  # already draining or drained: a repeat
            self._set_maintenance(host_id, state)
            log.info("host %s: maintenance %s (%s)", host_id, m["action"].lower(), m["requested_by"] or "?")

    def _set_maintenance(self, host_id: str, state: str) -> None:
        self.store.set_host_state(host_id, state, now_ms())
        self.book.set_maintenance(host_id, state)

    def _advance_maintenance(self) -> None:
        """A drained host goes DRAINED once no run is left on it, and DOWN at the next step; one
        drained for a pool move changes pool and is UP instead."""
        busy = {run.host_id for run in self.running.values()}
        for host_id, state in self.book.maintenance_due(busy):
            if state == "DRAINED" and self.book.moving(host_id):
                self._set_pool(host_id, self.book.pools[host_id][1])
                self._set_maintenance(host_id, "UP")
                log.info("host %s: moved to host pool %s", host_id, self.book.pool_of(host_id))
            else:
                self._set_maintenance(host_id, state)

    def _pool_changes(self, records: list[Record]) -> None:
        """A host moves to another host pool: at once when nothing runs on it, it is in
        maintenance already or its pool is deleted (at_once, its runs staying); otherwise it drains
        first, as for maintenance (its runs move as their jobs' disruption budgets allow), then
        changes pool and is UP, as Peloton's host mover does."""
        for r in records:
            m = r.value
            host_id, pool = m["host_id"], m["pool"]
            known = self.book.inventory.get(host_id)
            if known is None or known.shard not in self.shards:
                self.emit.dead_letter(r, f"host pool change of host {host_id!r}, which no host manager of this shard "
                                         "serves")
                continue
            current = self.book.pool_of(host_id)
            if m["source_pool"] and m["source_pool"] != current:
                self.emit.dead_letter(r, f"host {host_id} is in host pool {current!r}, not {m['source_pool']!r}")
                continue
            busy = any(run.host_id == host_id for run in self.running.values())
            if pool == current or not busy or m["at_once"] or (
                    host_id in self.book.maintenance and not self.book.moving(host_id)):
                if self.book.moving(host_id) and self.book.maintenance.get(host_id) == "DRAINING":
                    self._set_maintenance(host_id, "UP")  # the move called off: its drain too
                self._set_pool(host_id, pool)
            else:
                self._set_pool(host_id, pool, moving=True)
                self._set_maintenance(host_id, "DRAINING")
            log.info("host %s: host pool %s -> %s (%s)", host_id, current, pool, m["requested_by"] or "?")

    def _volume_deletes(self, records: list[Record]) -> None:
        """A deleted volume's folder goes from its host (the API marked it DELETED, its job is
        over): through its agent, or this process's driver for a host it runs itself."""
        by_driver: dict[str, dict[str, list[str]]] = {}
        for r in records:
            v = r.value
            known = self.book.inventory.get(v["host_id"])
            if known is None or known.shard not in self.shards:
                self.emit.dead_letter(r, f"volume {v['volume_id']!r} on host {v['host_id']!r}, which no host manager "
                                         "of this shard serves")
                continue
            by_driver.setdefault(known.driver, {}).setdefault(v["host_id"], []).append(v["volume_id"])
            log.info("volume %s on %s: deleted (%s)", v["volume_id"], v["host_id"], v["requested_by"] or "?")
        for kind, hosts in by_driver.items():
            for host_id, volume_ids in hosts.items():
                self.drivers[kind].delete_volumes(host_id, volume_ids)

    def _set_pool(self, host_id: str, pool: str, moving: bool = False) -> None:
        """The host is in `pool` now, or (moving) on its way there once drained."""
        current = self.book.pool_of(host_id) if moving else pool
        self.store.set_host_pool(host_id, current, pool, now_ms())
        self.book.set_pool(host_id, current, pool)

    def _kills(self, records: list[Record]) -> None:
        unlaunched: dict[str, dict] = {}
        for r in records:
            k = r.value
            self.kill_reasons.setdefault(k["task_id"], (k["reason"], k["message"]))
            entry = self.running.get(k["task_id"])
            if entry is not None:
                self.drivers[self.book.inventory[entry.host_id].driver].kill([k["task_id"]])
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
            ends[task_id] = task_status(k["job_id"], k["instance"], k["run_id"], task_id, "", MesosState.TASK_KILLED,
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
            for a in p["assignments"]:  # the ports placement picked travel with the task to its host
                if a.get("ports"):
                    a["task"]["assigned_ports"] = a["ports"]
                if p.get("revocable"):  # and its run on slack, to its ledger and its agent
                    a["task"]["revocable"] = True
            verdict = judge_placement(p["assignments"], self.book.open_ledgers(), self.running, self.book.inventory)
            if isinstance(verdict, str):
                # Its tasks go back to their pools (an agent host may have gone since place saw it).
                self.emit.dead_letter(r, verdict)
                metrics.LAUNCH_REFUSALS.labels("unknown_host").inc(len(p["assignments"]))
                refused.extend((a["task"], a["host_id"], verdict) for a in p["assignments"])
                continue
            for host_id in verdict.applied_on:
                self.book.changed.setdefault(host_id, []).append(p["placement_id"])
            # A placement read again after a takeover: its launch went out only if the last owner's
            # transaction committed, and then its offset would have too. So an adopted run whose
            # agent has not confirmed it is launched again (an agent ignores a launch it has had).
            again.extend((a["task"], a["host_id"]) for a in p["assignments"]
                         if a["task"]["task_id"] in self.remote.unconfirmed)
            accepted.extend(verdict.accepted)
            refused.extend(verdict.refused)
            for _t, host_id, _why in verdict.refused:
                metrics.LAUNCH_REFUSALS.labels("host_closed" if self.book.closed(host_id) else "no_room").inc()
        accepted, elsewhere = away_from_volumes(accepted)
        for t, host_id, _why in elsewhere:  # judged to fit: its room goes back
            self.book.ledgers[host_id].release(t["task_id"])
        refused.extend(elsewhere)
        if accepted:
            now = now_ms()
            new = self.store.claim_launches([
                Launch(t["task_id"], t["job_id"], t["instance"], t["run_id"], host_id, t["resources"]["cpu"],
                       t["resources"]["mem_mb"], t["resources"]["disk_mb"], t["resources"]["gpu"], now)
                for t, host_id in accepted
            ])
            # A volume is made where its instance's run is first launched: the job manager pins
            # the instance's next runs there, and `volume list` finds it.
            self.store.add_volumes([volume_row({**t["volume"], "host_id": host_id}, t["job_id"], t["instance"], now)
                                    for t, host_id in accepted if t["task_id"] in new and t.get("volume")])
            by_driver: dict[str, list[LaunchRequest]] = {}
            send_progress(self.emit, "LAUNCHING", [(t, host_id) for t, host_id in accepted if t["task_id"] in new])
            for t, host_id in accepted:
                if t["task_id"] not in new:  # launched before (by us or an earlier owner)
                    self.book.ledgers[host_id].release(t["task_id"])
                    continue
                self.running[t["task_id"]] = Run(t, host_id)
                # LAUNCHING tells the job manager the run is launched: no TASK_STAGING besides.
                self.last_state[t["task_id"]] = MesosState.TASK_STAGING
                by_driver.setdefault(self.book.inventory[host_id].driver, []).append(launch_request(t, host_id))
            for kind, requests in by_driver.items():
                self.drivers[kind].launch(requests)
                self.launched += len(requests)
                metrics.LAUNCHES.labels(kind).inc(len(requests))
        for t, host_id, why in refused:
            self._status(t["job_id"], t["instance"], t["run_id"], t["task_id"], host_id, MesosState.TASK_DROPPED,
                         reason="REASON_PLACEMENT_REFUSED", message=why)
        if again:
            log.info("launching again %d adopted runs whose launch their placement says never went out", len(again))
            send_progress(self.emit, "LAUNCHING", again)
            for t, host_id in again:
                self.running[t["task_id"]] = Run(t, host_id)
                self.last_state[t["task_id"]] = MesosState.TASK_STAGING
            self.remote.launch([launch_request(t, host_id) for t, host_id in again], again=True)

    def _settling(self, r: Record) -> bool:
        """True while the placement names a host this instance has not heard from yet on a shard it
        has just taken: the host's agent reports within a heartbeat or two."""
        until = self.settling.get(r.partition)
        if until is None:
            return False
        if time.monotonic() >= until:
            del self.settling[r.partition]
            return False
        return any(a["host_id"] not in self.book.inventory for a in r.value["assignments"])

    def _placements_waited(self) -> None:
        """Placements that waited for their hosts: judged once the hosts reported or the shard settled."""
        still: list[Record] = []
        ready: list[Record] = []
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
        self.agents.check(time.monotonic())
        if self.waiting:
            self._placements_waited()
        if self.book.maintenance:
            self._advance_maintenance()
        for driver in self.drivers.values():
            self.updates.extend(driver.poll())
        if self.updates:
            self._apply_updates()
        self._report_hosts()
        if now >= self._next_host_count:
            self._next_host_count = now + self.settings.metrics_period_s
            for state, n in self.book.counts().items():
                metrics.HOSTS.labels(state).set(n)
        if self.claim_sweep.due(now):
            gone = self.claim_sweep.done(now, self.store.forget_launches(now_ms(), self.claim_sweep.batch))
            if gone:
                log.info("forgot %d runs that ended more than %d days ago", gone, CLAIMS_KEPT_MS // 86_400_000)

    def _apply_updates(self) -> None:
        """Publish what the drivers reported. The ends are stored first: if the store is away the
        updates stay queued for the next tick, since the drivers will not report them again."""
        news = read_updates(self.updates, self.running, self.kill_reasons)
        if news.ended:
            self.store.end_launches(list(news.ended), now_ms(), news.ended)
        self.updates = []
        news.runs.send(self.emit)
        for task_id, state in news.moved:
            self.last_state[task_id] = state
        for task_id in news.ended:
            _spec, host_id = self.running.pop(task_id)
            self.last_state.pop(task_id, None)
            self.kill_reasons.pop(task_id, None)
            ledger = self.book.ledgers.get(host_id)
            if ledger is not None and ledger.release(task_id):
                self.book.touch(host_id)

    def recover(self) -> None:
        """The broker lost what it held: send again the state of every task running here and the
        end of every run that ended lately on these hosts, whose status events may be gone."""
        for task_id, (spec, host_id) in self.running.items():
            self._status(spec["job_id"], spec["instance"], spec["run_id"], task_id, host_id,
                         self.last_state.get(task_id, MesosState.TASK_STAGING))
        since = now_ms() - int(self.settings.status_replay_s * 1000)
        for status in self.store.ended_launches(list(self.book.ledgers), since):
            self.emit.emit("task-status", status["job_id"], "peloton.TaskStatus", status)
        for host_id in self.book.ledgers:
            self.book.touch(host_id)
        self._report_hosts()

    def _status(self, job_id: str, instance: int, run_id: int, task_id: str, host_id: str, state: str,
                reason: str = "", message: str = "", exit_code: int | None = None, signal: int | None = None,
                timestamp_ms: int | None = None) -> None:
        self.emit.emit("task-status", job_id, "peloton.TaskStatus", task_status(
            job_id, instance, run_id, task_id, host_id, state, reason, message, exit_code, signal, timestamp_ms))

    def _take_back_slack(self) -> None:
        """On each host whose accounting changed, revocable runs beyond its slack are killed,
        youngest first: its non-revocable runs want their cpu back (a run placed there, or a
        run using more of what it holds). They are preempted: their job manager runs them again."""
        for host_id in self.book.changed:
            ledger = self.book.ledgers.get(host_id)
            if ledger is None or not ledger.revocable:
                continue
            victims = ledger.over_slack(self.kill_reasons)
            if not victims:
                continue
            why = (f"preempted: host {host_id}'s non-revocable runs need its cpu back (slack "
                   f"{max(0.0, ledger.slack()):.2f} cpu, revocable runs held {ledger.revocable_cpu():g})")
            for task_id in victims:
                self.kill_reasons[task_id] = (PREEMPTED, why)
            self.drivers[self.book.inventory[host_id].driver].kill(victims)
            self.slack_preemptions += len(victims)
            log.info("host %s: preempting %d revocable runs: %s", host_id, len(victims), why)

    def _report_hosts(self) -> None:
        """One host-state record per host whose accounting changed since the last report."""
        self._take_back_slack()
        now = now_ms()
        for host_id, applied in self.book.take_changed().items():
            ledger = self.book.ledgers.get(host_id)
            if ledger is not None:
                self.emit.emit("host-state", host_id, "peloton.HostState", host_state(
                    self.book.inventory[host_id], ledger, self.book.state_of(host_id), host_id not in self.book.down,
                    applied, self.running, now, self.book.pool_of(host_id)))

    def close(self) -> None:
        if hasattr(self, "agents"):  # bound: its thread asks quiet agents of their leases
            self.agents.probes.close()
        for driver in self.drivers.values():
            driver.close()
