"""place stage: admitted gangs in (key = pool); placements out (partition = host shard).

The host view comes from the compacted host-state topic. Placements this instance made count
against a host until the host manager's report lists them as applied (or a TTL passes), so two
gangs in a row do not both take the last room on a host. A gang that finds no host waits and is
tried again after a backoff; its offset stays uncommitted meanwhile.

A gang's runs are PLACING and then PLACED only when it waits for hosts: one placed in the turn
that took it says nothing, and its runs go on to LAUNCHING (the host manager's, with the host), as
in Peloton's job manager, where PLACING and PLACED are the resource manager's own states. Most
gangs place at once, and each step costs the job manager a row write and an event per run.
"""

from __future__ import annotations

import logging
import random
from collections import deque
from dataclasses import dataclass

from peloton import metrics
from peloton.config import Settings
from peloton.model.constraint import ConstraintError
from peloton.model.events import new_id, send_progress, task_status
from peloton.model.gang import gang_problem
from peloton.model.mesos import MesosState, Reason
from peloton.model.resources import Resources
from peloton.runtime import CompactedView, Emitter, HeldOffsets, Record, Stage, is_transient, now_ms
from peloton.topics import Catalogue
from stages.place.checks import GPU_KEPT, NO_RUNTIME, NOT_UP, PORTS, RESOURCE_KINDS
from stages.place.host_view import HostView
from stages.place.placement import HostRing, LastCandidates, explain, place_gang, refusal_counts
from stages.place.task_need import LaunchSpecError, TaskNeed, port_names

log = logging.getLogger("peloton.place")

TOPIC = "admitted-gangs"


@dataclass(slots=True)
class WaitingGang:
    gang: dict
    needs: list[TaskNeed]
    source: tuple[str, int]
    offset: int
    record: Record
    attempts: int = 0
    next_try: float = 0.0
    placing_sent: bool = False  # its runs were told PLACING (it waited for hosts)


class PlaceStage(Stage):
    name = "place"
    inputs = (TOPIC,)

    def __init__(self, host_state: CompactedView | None = None):
        self.host_state = host_state  # the host-state topic; read from the broker unless given
        self.hosts: dict[str, HostView] = {}
        self.ring = HostRing(rng=random.Random())  # the same hosts, walked from where the last gang went
        self._ring_unsorted = False  # hosts were added since the ring last dealt its shards in turn
        self.waiting: deque[WaitingGang] = deque()
        self.waiting_ids: set[str] = set()
        self.held = HeldOffsets()
        self.placed_gangs = 0
        self.failed_attempts = 0  # gangs that found no host, counted per try
        self.cycles_given_up = 0  # gangs sent back to their pool after placement_attempts tries

    def bind(self, emitter: Emitter, settings: Settings, catalogue: Catalogue) -> None:
        super().bind(emitter, settings, catalogue)
        metrics.at_zero(metrics.PLACEMENT_REFUSALS, *((r,) for r in (*RESOURCE_KINDS, PORTS, NOT_UP, NO_RUNTIME,
                                                                      GPU_KEPT, "together")))
        if self.host_state is None:
            self.host_state = CompactedView(settings, "host-state", catalogue)

    def on_revoke(self, partitions: list[tuple[str, int]]) -> None:
        gone = set(partitions)
        self.waiting = deque(w for w in self.waiting if w.source not in gone)
        self.waiting_ids = {w.gang["gang_id"] for w in self.waiting}
        for tp in gone:
            self.held.drop(tp)

    def held_offsets(self) -> dict[tuple[str, int], int]:
        return self.held.lowest()

    def handle(self, records: list[Record]) -> None:
        for r in records:
            gang = r.value["gang"]
            if gang["gang_id"] in self.waiting_ids:
                continue
            problem = gang_problem(gang)
            try:
                needs = [] if problem else [TaskNeed.from_spec(t) for t in gang["tasks"]]
                if gang.get("revocable"):
                    for need in needs:
                        need.revocable = True
            except (ConstraintError, LaunchSpecError) as exc:
                problem = str(exc)
            if problem:
                self.refuse(r, gang["tasks"], problem)
                continue
            tp = (r.topic, r.partition)
            self.waiting.append(WaitingGang(gang, needs, tp, r.offset, r))
            self.waiting_ids.add(gang["gang_id"])
            self.held.hold(tp, r.offset)

    def tick(self, now: float) -> None:
        self._refresh_hosts()
        if self.waiting:
            if self._ring_unsorted:
                self.ring.interleave_shards()
                self._ring_unsorted = False
            self._place(now)

    def _refresh_hosts(self) -> None:
        added = False
        assert self.host_state is not None  # bind made it
        for host_id, hs in self.host_state.poll():
            view = self.hosts.get(host_id)
            if view is None:
                view = self.hosts[host_id] = HostView(host_id, hs["shard"], Resources.from_record(hs["capacity"]))
                self.ring.add(view)
                added = True
            view.shard = hs["shard"]
            view.capacity = Resources.from_record(hs["capacity"])
            view.report(Resources.from_record(hs["allocated"]),
                        task_labels={(c["key"], c["value"]): c["count"] for c in hs["task_labels"]},
                        job_tasks=hs["job_tasks"], used_ports=set(hs["used_ports"]),
                        revocable_cpu=hs.get("revocable_cpu", 0.0), unused_cpu=hs.get("unused_cpu", 0.0))
            view.labels = hs["labels"]
            view.state = hs["state"]
            if hs["port_ranges"]:
                view.port_ranges = tuple((r["low"], r["high"]) for r in hs["port_ranges"])
            for pid in hs["applied_placements"]:
                view.applied(pid)
        # Consecutive hosts of different shards, so PACK spreads a burst over the host managers;
        # done before the next placement, not at each poll that brings hosts (a sort of them all).
        self._ring_unsorted = self._ring_unsorted or added

    def _place(self, now: float) -> None:
        still_waiting: deque[WaitingGang] = deque()
        placed_at = now_ms()
        placed: list[tuple[WaitingGang, list[dict]]] = []  # a gang and its Placement records
        placing: list[dict] = []  # the tasks of gangs that wait for hosts for the first time
        last = LastCandidates()  # a job's one-task gangs in a row start from the last one's candidates
        for w in self.waiting:
            if w.next_try > now:
                still_waiting.append(w)
                continue
            try:
                records = self._choose(w, now, placed_at, last)
            except Exception as exc:  # a bug this gang meets: it alone is given up, with the reason
                log.exception("placing gang %s failed", w.gang["gang_id"])
                self.refuse(w.record, w.gang["tasks"], f"placement failed: {type(exc).__name__}: {exc}")
                records = []
            if records is None:
                still_waiting.append(w)
                if not w.placing_sent:
                    w.placing_sent = True
                    placing.extend(w.gang["tasks"])
            elif records:
                placed.append((w, records))
            else:
                self._done(w)
        send_progress(self.emit, "PLACING", [(t, "") for t in placing])
        # PLACED only for a gang that said PLACING (it waited for hosts): it ends the wait and its
        # reason. One placed at its first try goes on to LAUNCHING from the host manager, which
        # names the host. PLACED goes out before the placements, so the job manager hears it
        # before any host manager can answer LAUNCHING (one producer, records in the order given).
        send_progress(self.emit, "PLACED", [(a["task"], a["host_id"]) for w, records in placed if w.placing_sent
                                            for p in records for a in p["assignments"]])
        by_strategy: dict[str, int] = {}  # placed tasks, counted once per tick (a labelled inc is dear)
        for w, records in placed:
            try:
                for p in records:
                    self.emit.emit("placements", f"shard-{p['shard']}", "peloton.Placement", p, partition=p["shard"])
                self.placed_gangs += 1
                strategy = w.gang.get("placement_strategy") or "PACK_HOST"
                by_strategy[strategy] = by_strategy.get(strategy, 0) + len(w.gang["tasks"])
            except Exception as exc:
                if is_transient(exc):  # the broker is away: try this gang again next tick
                    still_waiting.append(w)
                    continue
                log.exception("sending the placement of gang %s failed", w.gang["gang_id"])
                self.refuse(w.record, w.gang["tasks"], f"placement failed: {type(exc).__name__}: {exc}")
            self._done(w)
        self.waiting = still_waiting
        for strategy, n in by_strategy.items():
            metrics.PLACEMENTS.labels(strategy).inc(n)
        metrics.GANGS_WAITING_FOR_HOSTS.set(len(still_waiting))

    def _done(self, w: WaitingGang) -> None:
        self.waiting_ids.discard(w.gang["gang_id"])
        self.held.release(w.source, w.offset)

    def _choose(self, w: WaitingGang, now: float, placed_at: int, last: LastCandidates | None = None,
                ) -> list[dict] | None:
        """Hosts for one gang: its Placement records, one per host shard (counted against those
        hosts at once, so the next gang sees them taken); None if it waits for another try; []
        if its placement cycle is over and it went back to its pool."""
        chosen = place_gang(w.needs, self.ring, now, strategy=w.gang.get("placement_strategy") or "PACK_HOST",
                            avoid=frozenset(w.gang.get("avoid_hosts") or ()), last=last) if self.ring.hosts else None
        if chosen is None:
            self.failed_attempts += 1
            metrics.PLACEMENT_FAILED_TRIES.inc()
            w.attempts += 1
            w.next_try = now + self.settings.placement_backoff_s
            if w.attempts < self.settings.placement_attempts:
                return None
            # A placement cycle is over (Peloton's rule): the gang goes back to its pool's queue,
            # giving its allocation back, and its tasks carry the reason for whoever asks.
            why = explain(w.needs, self.ring, now)
            for t in w.gang["tasks"]:
                self.emit.emit("task-status", t["job_id"], "peloton.TaskStatus", task_status(
                    t["job_id"], t["instance"], t["run_id"], t["task_id"], "", MesosState.TASK_DROPPED,
                    reason=Reason.NO_HOST, message=why))
            self.cycles_given_up += 1
            counts = refusal_counts(w.needs[0], self.ring.hosts, now) if w.needs and self.ring.hosts else {}
            metrics.PLACEMENT_REFUSALS.labels(max(counts, key=counts.__getitem__) if counts else "together").inc()
            return []
        ttl = self.settings.placement_pending_ttl_s
        tasks = w.gang["tasks"]
        by_shard: dict[int, list[tuple[dict, TaskNeed]]]
        if len(tasks) == 1:  # most gangs: one task, one shard
            by_shard = {chosen[tasks[0]["task_id"]].shard: [(tasks[0], w.needs[0])]}
        else:
            by_shard = {}
            for t, need in zip(tasks, w.needs, strict=True):
                by_shard.setdefault(chosen[t["task_id"]].shard, []).append((t, need))
        records = []
        for shard, tasks in by_shard.items():
            pid = new_id()
            assignments = []
            for t, need in tasks:  # counted on the host at once, labels and job too, for the next gang
                a = chosen[t["task_id"]]
                a.host.add_pending(pid, now + ttl, need.resources, need.labels, need.job_id, a.ports, need.revocable)
                assignments.append({"host_id": a.host_id, "task": t, "ports": port_names(t, a.ports)})
            records.append({"placement_id": pid, "gang_id": w.gang["gang_id"], "pool": w.gang["pool"],
                            "shard": shard, "revocable": bool(w.gang.get("revocable")), "assignments": assignments,
                            "placed_ms": placed_at})
        return records

    def views(self) -> list:
        return [self.host_state]

    def close(self) -> None:
        log.info("placed %d gangs; %d tries found no host; %d gangs sent back to their pools",
                 self.placed_gangs, self.failed_attempts, self.cycles_given_up)
        if self.host_state is not None:
            self.host_state.close()
