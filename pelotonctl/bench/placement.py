"""How fast placement goes at Peloton's scale: 50,000 hosts, thousands of gangs. Pure: no Kafka.

    .venv/bin/python -m pelotonctl.bench.placement            # both scenarios, both strategies
    .venv/bin/python -c 'from pelotonctl.bench.placement import bench_placement; print(bench_placement())'

The hosts and gangs are built before the clock starts; the timed part is what the place stage
does per gang: place_gang, then add_pending for every task placed, so each gang sees the ones
before it. Hosts start partly used (random allocations, ports and tasks of other jobs), tasks
carry labels and a dynamic port, and one job in ten has a TASK constraint (at most two of its
tasks per host), so every check does real work.
"""

from __future__ import annotations

import random
import time

from peloton.model.constraint import LabelConstraint
from peloton.model.resources import Resources
from stages.place.host_view import HostView
from stages.place.placement import DEFAULT_CANDIDATES, HostRing, LastCandidates, place_gang
from stages.place.task_need import TaskNeed

HOST_CAPACITY = Resources(cpu=32, mem_mb=131_072, disk_mb=1_000_000)
TASK = Resources(cpu=1, mem_mb=2_048, disk_mb=1_024)
JOBS = 100
PENDING_TTL_S = 300.0


def build_hosts(count: int, rng: random.Random) -> list[HostView]:
    hosts = []
    for i in range(count):
        used_cpu = rng.choice((0, 0, 4, 8, 16))
        hosts.append(HostView(
            f"host-{i:06d}", i % 64, HOST_CAPACITY,
            allocated=Resources(cpu=used_cpu, mem_mb=used_cpu * 2_048, disk_mb=used_cpu * 1_024),
            labels={"hostname": f"host-{i:06d}", "rack": f"rack-{i % 500}"},
            task_labels={("app", f"other-{i % 7}"): int(used_cpu)} if used_cpu else {},
            job_tasks={f"other-{i % 7}": int(used_cpu)} if used_cpu else {},
            used_ports=set(range(31000, 31000 + int(used_cpu)))))
    return hosts


def build_gangs(gangs: int, gang_size: int, in_a_row: bool = False) -> list[list[TaskNeed]]:
    """The gangs of JOBS jobs: interleaved, or each job's one after another (as entitle admits a
    job's gangs from its queue)."""
    result = []
    for g in range(gangs):
        job = f"job-{g * JOBS // gangs if in_a_row else g % JOBS}"
        limited = g % JOBS % 10 == 0  # one job in ten: at most two of its tasks per host
        constraint = LabelConstraint("TASK", "LESS_THAN", "app", job, 2) if limited else None
        result.append([TaskNeed(f"{job}-{g}-{i}", TASK, constraint, {"app": job}, job, dynamic_ports=1)
                       for i in range(gang_size)])
    return result


def bench_placement(hosts: int = 50_000, gangs: int = 10_000, gang_size: int = 1, strategy: str = "PACK_HOST",
                    seed: int = 1, candidates: int = DEFAULT_CANDIDATES, in_a_row: bool = False) -> dict:
    """Place `gangs` gangs of `gang_size` tasks on `hosts` hosts, one after another, in one pass
    as the stage's tick does (LastCandidates carried from gang to gang); returns the task
    placements per second and the seconds the placing took (building excluded). `in_a_row`: each
    job's gangs come one after another."""
    rng = random.Random(seed)
    views = build_hosts(hosts, rng)
    work = build_gangs(gangs, gang_size, in_a_row)
    ring = HostRing(views, rng)
    now = 1_000.0
    placed_tasks = unplaced = 0
    hosts_used: set[str] = set()
    last = LastCandidates()
    start, cpu_start = time.perf_counter(), time.process_time()
    for g, needs in enumerate(work):
        placed = place_gang(needs, ring, now, strategy, candidates=candidates, last=last)
        if placed is None:
            unplaced += 1
            continue
        pid = f"placement-{g}"
        for need in needs:
            a = placed[need.task_id]
            a.host.add_pending(pid, now + PENDING_TTL_S, need.resources, need.labels, need.job_id, a.ports)
            hosts_used.add(a.host.host_id)
        placed_tasks += len(needs)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    return {"hosts": hosts, "gangs": gangs, "gang_size": gang_size, "strategy": strategy,
            "candidates": candidates, "in_a_row": in_a_row, "tasks_placed": placed_tasks, "gangs_unplaced": unplaced,
            "hosts_used": len(hosts_used), "seconds": round(seconds, 3),
            "cpu_seconds": round(cpu_seconds, 3),
            "placements_per_s": round(placed_tasks / seconds) if seconds else 0}


def main() -> None:
    for strategy in ("PACK_HOST", "SPREAD_JOB"):
        for gangs, size, in_a_row in ((10_000, 1, False), (10_000, 1, True), (100, 100, False)):
            r = bench_placement(gangs=gangs, gang_size=size, strategy=strategy, in_a_row=in_a_row)
            order = "a job's in a row" if in_a_row else "jobs interleaved"
            print(f"placement {strategy:<10} {gangs:>6,} gangs of {size:<3} ({order}) on {r['hosts']:,} hosts: "
                  f"{r['placements_per_s']:>7,} task placements/s ({r['seconds']:.2f} s, "
                  f"{r['hosts_used']:,} hosts used, "
                  f"{r['gangs_unplaced']} gangs unplaced)")


if __name__ == "__main__":
    main()
