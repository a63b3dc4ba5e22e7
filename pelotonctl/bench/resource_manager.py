"""`pelotonctl respool bench` (the first step of `make bench`): the resource manager's pure parts,
entitlement and admission, with no broker. Figures are printed, never asserted."""

from __future__ import annotations

import time

from peloton.model.resources import Resources


def run_resource_manager_bench(console, fanout: int = 10, levels: int = 3, gangs: int = 100_000,
                               gang_size: int = 1, pools: int = 100) -> dict:
    """The resource manager's pure parts, no broker: the entitlement calculation on a tree of
    fanout**levels leaves, and admission of `gangs` queued gangs spread over `pools` pools (plan,
    then apply, up to 1,000 gangs per pool per pass, as the stage does)."""
    from stages.entitle.admission import PoolLedger, PoolQueue, apply_admission, plan_admission
    from stages.entitle.entitlement import benchmark_tree, time_entitlement

    tree = benchmark_tree(levels=levels, fanout=fanout)
    entitlement_ms = time_entitlement(tree.pools, tree.usage, tree.capacity, slack_capacity=tree.slack_capacity)
    console.print(f"entitlement: {len(tree.pools)} pools in a {levels}-level tree ({len(tree.usage)} leaves): "
                  f"[bold]{entitlement_ms:.1f} ms[/bold] (median of 20)", highlight=False)

    task = {"resources": {"cpu": 0.1, "mem_mb": 2.0, "disk_mb": 1.0, "gpu": 0.0}, "controller": False}
    queues = {f"/p{i}": PoolQueue() for i in range(pools)}
    names = list(queues)
    for g in range(gangs):
        pool = names[g % pools]
        queues[pool].push({"gang_id": f"g{g}", "job_id": "bench", "pool": pool, "priority": g % 3,
                           "preemptible": True, "tasks": [{**task, "task_id": f"g{g}-{i}"} for i in range(gang_size)]})
    big = Resources(cpu=1e9, mem_mb=1e12, disk_mb=1e12, gpu=0.0)
    ledgers = {p: PoolLedger(entitlement=big, reservation=big) for p in names}
    started = time.perf_counter()
    admitted = 0
    while admitted < gangs:
        for pool in names:
            chosen = plan_admission(queues[pool], ledgers[pool])
            apply_admission(queues[pool], ledgers[pool], chosen)
            admitted += len(chosen)
    seconds = time.perf_counter() - started
    rate = gangs / seconds
    console.print(f"admission: {gangs} gangs of {gang_size} task(s) over {pools} pools in {seconds:.2f}s: "
                  f"[bold]{rate:,.0f} gangs/s[/bold] ({rate * gang_size:,.0f} tasks/s)", highlight=False)
    return {"pools": len(tree.pools), "leaves": len(tree.usage), "entitlement_ms": round(entitlement_ms, 2),
            "gangs": gangs, "gang_size": gang_size, "admission_seconds": round(seconds, 3),
            "gangs_per_s": round(rate, 1), "tasks_per_s": round(rate * gang_size, 1)}
