"""The host manager's book of the hosts it serves: what each is (its spec), what it holds (its
ledger), whether it is UP, DOWN (its agent silent) or in maintenance, and which changed since
host-state last heard of them. Plain bookkeeping with no Kafka and no store, in the manner of
Kueue's cache: the stage reads and writes through it, and publishes what it says changed."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from peloton.model.host_pools import DEFAULT_POOL, POOL_LABEL
from peloton.model.resources import Resources
from stages.launch.inventory import AGENT, HostSpec
from stages.launch.ledger import HostLedger


class Run(NamedTuple):
    """A run this host manager launched and holds: its TaskLaunchSpec record and its host."""

    spec: dict
    host_id: str


NO_RUN = Run({}, "")

HOST_STATES = ("UP", "DOWN", "DRAINING", "DRAINED")


@dataclass(slots=True)
class HostBook:
    inventory: dict[str, HostSpec] = field(default_factory=dict)  # every host of the shards served
    ledgers: dict[str, HostLedger] = field(default_factory=dict)  # hosts of the shards this instance owns
    changed: dict[str, list[str]] = field(default_factory=dict)  # host id -> placement ids applied since last said
    seen: dict[str, float] = field(default_factory=dict)  # agent host id -> time.monotonic() of its last report
    down: set[str] = field(default_factory=set)  # agent hosts whose reports stopped
    maintenance: dict[str, str] = field(default_factory=dict)  # host id -> DRAINING, DRAINED or DOWN
    # host id -> (its host pool, the one it moves to); none: the default pool. A host moving
    # drains first (its runs go as their jobs' budgets allow), then changes pool and is UP.
    pools: dict[str, tuple[str, str]] = field(default_factory=dict)

    def state_of(self, host_id: str) -> str:
        return self.maintenance.get(host_id) or ("DOWN" if host_id in self.down else "UP")

    def pool_of(self, host_id: str) -> str:
        return self.pools.get(host_id, (DEFAULT_POOL, DEFAULT_POOL))[0]

    def moving(self, host_id: str) -> bool:
        pool, desired = self.pools.get(host_id, (DEFAULT_POOL, DEFAULT_POOL))
        return pool != desired

    def set_pool(self, host_id: str, pool: str, desired: str) -> None:
        self.pools[host_id] = (pool, desired)
        self.touch(host_id)

    def touch(self, host_id: str) -> None:
        """The host's state or accounting changed: host-state hears of it at the next report."""
        self.changed.setdefault(host_id, [])

    def open_ledgers(self) -> dict[str, HostLedger]:
        """The hosts that take placements now: not DOWN and not in maintenance."""
        if not self.down and not self.maintenance:
            return self.ledgers
        return {h: ledger for h, ledger in self.ledgers.items() if h not in self.down and h not in self.maintenance}

    def closed(self, host_id: str) -> bool:
        return host_id in self.down or host_id in self.maintenance or host_id not in self.ledgers

    def serve(self, spec: HostSpec) -> None:
        """A host of a shard this instance took, run by a driver of its own."""
        self.ledgers[spec.host_id] = HostLedger(spec.host_id, spec.capacity)
        self.touch(spec.host_id)

    def join(self, host_id: str, shard: int, report: dict, held: dict[str, tuple[Resources, bool]]) -> HostSpec | None:
        """An agent's report of its host: its spec, new or changed, with a ledger holding `held`
        (the runs on it this instance knows of: resources, revocable); None when nothing changed."""
        capacity = Resources.from_record(report["capacity"])
        labels = {**report["labels"], "hostname": host_id}
        ports = tuple((r["low"], r["high"]) for r in report["port_ranges"])
        log_url = report.get("log_url") or ""
        known = self.inventory.get(host_id)
        if known is not None and (known.capacity, known.labels, known.port_ranges, known.log_url) == (
                capacity, labels, ports, log_url):
            return None
        spec = self.inventory[host_id] = HostSpec(host_id, AGENT, capacity, shard, labels, ports, log_url)
        ledger = self.ledgers[host_id] = HostLedger(host_id, capacity)
        for task_id, (need, revocable) in held.items():
            ledger.hold(task_id, need, revocable)
        self.touch(host_id)
        return spec

    def heard(self, host_id: str, now: float) -> bool:
        """An agent's report arrived; True when its host was DOWN and is UP again."""
        self.seen[host_id] = now
        if host_id not in self.down:
            return False
        self.down.discard(host_id)
        self.touch(host_id)
        return True

    def give_back(self, deaf_s: float) -> None:
        """Time the host manager was not listening is not its agents' silence."""
        for host_id in self.seen:
            self.seen[host_id] += deaf_s

    def silent(self, now: float, timeout_s: float) -> list[str]:
        return [h for h, seen in self.seen.items() if now - seen > timeout_s and h not in self.down]

    def lose(self, host_id: str) -> None:
        self.down.add(host_id)
        self.touch(host_id)

    def set_maintenance(self, host_id: str, state: str) -> None:
        if state == "UP":
            self.maintenance.pop(host_id, None)
        else:
            self.maintenance[host_id] = state
        self.touch(host_id)

    def maintenance_due(self, busy: set[str]) -> list[tuple[str, str]]:
        """The next maintenance state of each host on its way down: DRAINED once no run is left
        on a DRAINING host (`busy`: hosts with runs), DOWN one step after DRAINED."""
        due = []
        for host_id, state in self.maintenance.items():
            if state == "DRAINED":
                due.append((host_id, "DOWN"))
            elif state == "DRAINING" and host_id not in busy:
                due.append((host_id, "DRAINED"))
        return due

    def forget_shards(self, shards: set[int]) -> list[str]:
        """Hosts of shards given up: their ledgers go; agent hosts go whole (the next owner hears
        their reports). The agent hosts forgotten."""
        agents = []
        for host_id in [h for h, spec in self.inventory.items() if spec.shard in shards]:
            self.ledgers.pop(host_id, None)
            self.changed.pop(host_id, None)
            self.pools.pop(host_id, None)
            if self.inventory[host_id].driver == AGENT:
                del self.inventory[host_id]
                self.seen.pop(host_id, None)
                self.down.discard(host_id)
                agents.append(host_id)
        return agents

    def counts(self) -> dict[str, int]:
        """Hosts served per state, every state named (a gauge that drops to 0 must say so)."""
        states = dict.fromkeys(HOST_STATES, 0)
        for host_id in self.ledgers:
            state = self.state_of(host_id)
            states[state] = states.get(state, 0) + 1
        return states

    def take_changed(self) -> dict[str, list[str]]:
        changed, self.changed = self.changed, {}
        return changed


def host_state(spec: HostSpec, ledger: HostLedger, state: str, reachable: bool, applied: list[str],
               running: dict[str, Run], now_ms: int, pool: str = DEFAULT_POOL) -> dict:
    """The HostState record of a host: its capacity and what is charged to it (revocable runs' cpu
    apart, with what its runs lend them), with what placement's TASK constraints, SPREAD and ports
    count of the runs it holds. Its labels carry its host pool,
    whatever its agent says: a host does not choose its own pool."""
    labels: dict[tuple[str, str], int] = {}
    jobs: dict[str, int] = {}
    ports: list[int] = []
    for task_id in ledger.held.by_key:
        task = running.get(task_id, NO_RUN).spec
        for kv in (task.get("labels") or {}).items():
            labels[kv] = labels.get(kv, 0) + 1
        if task:
            jobs[task["job_id"]] = jobs.get(task["job_id"], 0) + 1
            ports.extend((task.get("assigned_ports") or {}).values())
    return {
        "host_id": spec.host_id, "shard": spec.shard, "driver": spec.driver, "state": state,
        "reachable": reachable,
        "capacity": spec.capacity.to_record(), "unused_cpu": ledger.lent,
        "allocated": ledger.held.total.to_record(), "revocable_cpu": ledger.revocable_cpu(),
        "task_count": len(ledger.held), "labels": {**spec.labels, POOL_LABEL: pool},
        "applied_placements": applied,
        "task_labels": [{"key": k, "value": v, "count": n} for (k, v), n in labels.items()],
        "job_tasks": jobs, "used_ports": ports,
        "port_ranges": [{"low": low, "high": high} for low, high in spec.port_ranges],
        "updated_ms": now_ms, "log_url": spec.log_url,
    }
