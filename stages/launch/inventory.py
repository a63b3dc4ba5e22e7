"""The host inventory a launch instance serves, from a spec such as

    local:2:cpu=8,mem_mb=16384,disk_mb=100000;sim:100:cpu=32,mem_mb=131072

(driver:count:capacity, groups separated by ';'). Every launch instance reads the same spec and
serves the hosts whose shard (partition of the placements topic) it is assigned.

Drivers: `sim` (simulated hosts inside the launch process, for benchmarks), `local` (real
processes started by the launch process itself), `agent` (real processes started by host
agents, separate processes that `pelotonctl dev up` starts one per host: they register with the
host manager themselves, so launch ignores these groups and the dev stack reads them) and
`simagent` (simulated hosts, all served by one agent process over the same protocol).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from peloton.model.resources import Resources
from peloton.topics import partition_for

DEFAULT_CAPACITY = {"cpu": 8.0, "mem_mb": 16384.0, "disk_mb": 100000.0, "gpu": 0.0}
AGENT = "agent"
SIM_AGENT = "simagent"  # simulated hosts served by one agent process over the agent protocol
REMOTE = (AGENT, SIM_AGENT)  # hosts that join the host manager through their agents' reports
DRIVERS = ("local", "sim", AGENT, SIM_AGENT)


class InventoryError(ValueError):
    pass


@dataclass(frozen=True)
class HostSpec:
    host_id: str
    driver: str
    capacity: Resources
    shard: int
    labels: dict[str, str] = field(default_factory=dict)
    port_ranges: tuple[tuple[int, int], ...] = ()  # the ports it gives tasks; () = placement's default
    log_url: str = ""  # where its agent serves the sandboxes' files to the API ("": nowhere)


# Simulated hosts run any task, images included (they run nothing): placement's runtime check
# (stages/place/checks.py) passes them. Agent hosts say so themselves, when their agent has a runtime.
_RUNS_IMAGES = {"sim": {"container.runtime": "simulated"}}


def parse_inventory(spec: str, shards: int) -> list[HostSpec]:
    hosts: list[HostSpec] = []
    for group in filter(None, (g.strip() for g in spec.split(";"))):
        parts = group.split(":")
        if len(parts) not in (2, 3) or parts[0] not in DRIVERS:
            raise InventoryError(f"host group {group!r}: expected DRIVER:COUNT[:cpu=N,mem_mb=N,...] "
                                 f"with DRIVER in {DRIVERS}")
        driver = parts[0]
        try:
            count = int(parts[1])
        except ValueError:
            raise InventoryError(f"host group {group!r}: count {parts[1]!r} is not a number") from None
        capacity = dict(DEFAULT_CAPACITY)
        for item in filter(None, (parts[2].split(",") if len(parts) == 3 else [])):
            name, _, value = item.partition("=")
            if name not in capacity:
                raise InventoryError(f"host group {group!r}: unknown resource {name!r} (known: {', '.join(capacity)})")
            try:
                capacity[name] = float(value)
            except ValueError:
                raise InventoryError(f"host group {group!r}: {name}={value!r} is not a number") from None
        for i in range(count):
            host_id = f"{driver}-{i}"
            hosts.append(HostSpec(host_id, driver, Resources(**capacity), partition_for(host_id, shards),
                                  {"hostname": host_id, "driver": driver, **_RUNS_IMAGES.get(driver, {})}))
    return hosts
