"""Hosts' capacities kept from host-state's changes, for the stages that need only capacity.

Admit refuses a task larger than every host (the distinct capacities), and entitle gives the
root pool the UP hosts' sum. Both read host-state, where nearly every change is a host's free
resources moving, which leaves capacity alone: reading every host again at each pass cost entitle
a sixth of its CPU with 50,000 hosts, and admit a tenth. What is derived is taken again only when
a host's capacity or state changed, or when the hosts known are not the ones kept (a view read
again from the start)."""

from __future__ import annotations

from collections.abc import Iterable

from peloton.model.resources import Resources

_Capacity = tuple[float, float, float, float]  # cpu, mem_mb, disk_mb, gpu

# What the stages that need only capacity read of a HostState record: its fields up to its
# capacity (its state among them) and the cpu its runs lend as slack, for a view's head decoder.
# The rest, which changes with every task started or ended (allocations, labels, ports, placements
# applied), is neither read nor kept.
HOST_CAPACITY = ("peloton.HostState", "unused_cpu")
# The job manager's head: to the labels, which say which hosts a DAEMON job's constraint admits.
HOST_LABELS = ("peloton.HostState", "labels")


def lent_by(host: dict) -> float:
    """The cpu a host's non-revocable runs hold but do not use (HostState's unused_cpu), counted
    as slack while the host is UP."""
    return host.get("unused_cpu", 0.0) if host.get("state", "UP") == "UP" else 0.0


class HostCapacities:
    def __init__(self) -> None:
        self.per_host: dict[str, tuple[_Capacity, bool]] = {}  # host -> (capacity, UP)
        self.lent: dict[str, float] = {}  # host -> cpu its non-revocable runs hold unused (UP hosts only)
        self._distinct: list[Resources] | None = None
        self._up_total: Resources | None = None

    def update(self, changes: Iterable[tuple[str, dict]]) -> None:
        """HostState records as a view's poll gives them: (host, record)."""
        for key, h in changes:
            c = h["capacity"]
            entry = ((c["cpu"], c["mem_mb"], c["disk_mb"], c["gpu"]), h.get("state", "UP") == "UP")
            lent = lent_by(h)
            if lent:
                self.lent[key] = lent
            else:
                self.lent.pop(key, None)
            if self.per_host.get(key) != entry:
                self.per_host[key] = entry
                self._distinct = self._up_total = None

    def _sync(self, hosts: dict[str, dict]) -> None:
        """`hosts` is the view's values the changes came from: counted all over again when they
        are not the hosts kept."""
        if len(hosts) != len(self.per_host):
            self.per_host.clear()
            self.lent.clear()
            self._distinct = self._up_total = None
            self.update(hosts.items())

    def distinct(self, hosts: dict[str, dict]) -> list[Resources]:
        """The distinct capacities among the hosts, whatever their state."""
        self._sync(hosts)
        if self._distinct is None:
            self._distinct = [Resources(*cap) for cap in {cap for cap, _up in self.per_host.values()}]
        return list(self._distinct)

    def up_total(self, hosts: dict[str, dict]) -> Resources:
        """The sum of the UP hosts' capacities: the root pool's."""
        self._sync(hosts)
        if self._up_total is None:
            cpu = mem = disk = gpu = 0.0
            for (c, m, d, g), up in self.per_host.values():
                if up:
                    cpu, mem, disk, gpu = cpu + c, mem + m, disk + d, gpu + g
            self._up_total = Resources(cpu, mem, disk, gpu)
        return self._up_total

    def lent_total(self, hosts: dict[str, dict]) -> float:
        """The cpu the UP hosts' non-revocable runs hold but do not use: slack beyond what no pool holds."""
        self._sync(hosts)
        return sum(self.lent.values())
