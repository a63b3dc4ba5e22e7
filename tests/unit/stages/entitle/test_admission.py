from __future__ import annotations

from peloton.model.host_capacities import HostCapacities
from peloton.model.resources import Resources
from stages.entitle.admission import (
    Charge,
    PoolLedger,
    PoolQueue,
    admit,
    choose_victims,
    over_allocation,
    plan_admission,
    priority_victims,
    reclaim_victims,
    why_waiting,
)
from stages.entitle.entitlement import PoolUsage
from stages.entitle.usage import slack_capacity


def gang(gang_id: str, priority: int = 0, cpu: float = 1.0, size: int = 1) -> dict:
    return {"gang_id": gang_id, "priority": priority, "tasks": [
        {"task_id": f"{gang_id}-{i}", "resources": {"cpu": cpu, "mem_mb": 10.0, "disk_mb": 0.0, "gpu": 0.0}}
        for i in range(size)]}


def test_higher_priority_first_then_first_come_first_served() -> None:
    q = PoolQueue()
    for g in (gang("a", 1), gang("b", 5), gang("c", 1), gang("d", 5)):
        q.push(g)
    ledger = PoolLedger(entitlement=Resources(cpu=100, mem_mb=1000))
    assert [x.gang["gang_id"] for x in admit(q, ledger)] == ["b", "d", "a", "c"]


def test_a_gang_is_admitted_whole_or_blocks_its_pool() -> None:
    q = PoolQueue()
    q.push(gang("big", cpu=1, size=5))
    q.push(gang("small", cpu=1, size=1))
    ledger = PoolLedger(entitlement=Resources(cpu=4, mem_mb=1000))
    assert admit(q, ledger) == []  # 5 cpu does not fit in 4, and the small one waits behind it
    assert ledger.held.total == Resources()
    ledger.entitlement = Resources(cpu=6, mem_mb=1000)
    assert [x.gang["gang_id"] for x in admit(q, ledger)] == ["big", "small"]
    assert ledger.held.total.cpu == 6


def test_release_gives_room_back_once() -> None:
    q = PoolQueue()
    q.push(gang("a", cpu=2))
    q.push(gang("b", cpu=2))
    ledger = PoolLedger(entitlement=Resources(cpu=2, mem_mb=1000))
    assert len(admit(q, ledger)) == 1
    assert ledger.held.release("a-0") and not ledger.held.release("a-0")
    assert [x.gang["gang_id"] for x in admit(q, ledger)] == ["b"]
    assert q.demand == Resources() and len(q) == 0


# -- Peloton's admission rules ---------------------------------------------------------------------

def flagged(gang_id: str, cpu: float = 1.0, priority: int = 0, preemptible: bool = True, revocable: bool = False,
            controller: bool = False, size: int = 1) -> dict:
    g = gang(gang_id, priority, cpu, size)
    g.update(preemptible=preemptible, revocable=revocable)
    for t in g["tasks"]:
        t["controller"] = controller
    return g


def ids(admitted) -> list[str]:
    return [q.gang["gang_id"] for q in admitted]


def test_non_preemptible_gangs_only_within_the_reservation_and_they_do_not_block_the_pool() -> None:
    q = PoolQueue()
    for g in (flagged("np1", 2, preemptible=False), flagged("np2", 2, preemptible=False), flagged("p1", 2)):
        q.push(g)
    ledger = PoolLedger(entitlement=Resources(cpu=10, mem_mb=1000), reservation=Resources(cpu=3, mem_mb=1000))
    assert ids(admit(q, ledger)) == ["np1", "p1"]  # np2 waits in its side queue; p1 passes it
    assert [x.side for x in q] == ["non-preemptible"]
    assert "reservation" in why_waiting(q.head(), ledger, 0.0)
    ledger.release("np1-0")
    assert ids(admit(q, ledger)) == ["np2"]


def test_controller_gangs_within_the_controller_limit() -> None:
    q = PoolQueue()
    q.push(flagged("c1", 1, controller=True))
    q.push(flagged("c2", 1, controller=True))
    ledger = PoolLedger(entitlement=Resources(cpu=10, mem_mb=1000), reservation=Resources(cpu=10, mem_mb=1000),
                        controller_limit_pct=10)
    assert ids(admit(q, ledger)) == ["c1"]  # 10% of a 10-cpu reservation: one 1-cpu controller
    assert "controller limit" in why_waiting(q.head(), ledger, 0.0)


def test_revocable_gangs_only_on_slack_entitlement() -> None:
    q = PoolQueue()
    q.push(flagged("r1", 2, revocable=True))
    q.push(flagged("r2", 2, revocable=True))
    q.push(flagged("n1", 2))
    ledger = PoolLedger(entitlement=Resources(cpu=2, mem_mb=1000), slack_entitlement=Resources(cpu=3, mem_mb=1000))
    assert ids(admit(q, ledger)) == ["r1", "n1"]
    assert ledger.slack.total.cpu == 2 and ledger.non_slack_allocation.cpu == 2
    assert q.slack_demand.cpu == 2 and q.demand.cpu == 0
    assert "slack entitlement" in why_waiting(q.head(), ledger, 0.0)


def test_side_queues_go_first_in_peloton_order() -> None:
    q = PoolQueue()
    q.push(flagged("np", 1, preemptible=False))
    q.push(flagged("plain", 1))
    ledger = PoolLedger(entitlement=Resources(cpu=10, mem_mb=1000), reservation=Resources(cpu=0, mem_mb=1000))
    admit(q, ledger)  # np moves to its side queue
    ledger.reservation = Resources(cpu=5, mem_mb=1000)
    q.push(flagged("later", 1))
    assert ids(admit(q, ledger)) == ["np", "later"]


def test_a_gang_sent_back_by_placement_waits_its_backoff_without_blocking() -> None:
    q = PoolQueue()
    q.push(gang("back"), not_before_ms=5000)
    q.push(gang("fresh"))
    ledger = PoolLedger(entitlement=Resources(cpu=10, mem_mb=1000))
    assert ids(plan_admission(q, ledger, now_ms=1000)) == ["fresh"]
    assert "admitted in 4s at the earliest" in why_waiting(q.head(), ledger, 0.0, now_ms=1000)
    assert ids(plan_admission(q, ledger, now_ms=6000)) == ["back", "fresh"]


def charge(task_id: str, cpu: float, priority: int = 0, admitted_ms: int = 0, preemptible: bool = True,
           revocable: bool = False) -> Charge:
    return Charge(task_id, task_id, Resources(cpu=cpu, mem_mb=10), priority, preemptible, revocable, False, admitted_ms)


def test_victims_revocable_first_then_lowest_priority_then_most_recent_and_never_non_preemptible() -> None:
    candidates = [charge("old-low", 1, 0, 1), charge("new-low", 1, 0, 2), charge("high", 1, 5, 3),
                  charge("np", 1, 0, 9, preemptible=False), charge("rev", 1, 9, 0, revocable=True)]
    assert [c.task_id for c in choose_victims(candidates, Resources(cpu=3))] == ["rev", "new-low", "old-low"]
    assert [c.task_id for c in choose_victims(candidates, Resources(cpu=99))] == [
        "rev", "new-low", "old-low", "high"]


def test_greedy_victims_skip_runs_that_free_nothing_owed() -> None:
    gpu_free = Charge("cpu-only", "g", Resources(cpu=4), 0, True, False, False, 5)
    gpu_task = Charge("gpu", "g", Resources(cpu=1, gpu=1), 0, True, False, False, 1)
    assert [c.task_id for c in choose_victims([gpu_free, gpu_task], Resources(gpu=1))] == ["gpu"]


def test_reclaim_frees_the_excess_over_the_non_slack_entitlement_once() -> None:
    ledger = PoolLedger(entitlement=Resources(cpu=6, mem_mb=1000))
    for i in range(12):
        ledger.charge(charge(f"t{i}", 1, admitted_ms=i))
    victims = reclaim_victims(ledger)
    assert [c.task_id for c in victims] == [f"t{i}" for i in range(11, 5, -1)]  # the 6 most recent
    for c in victims:
        ledger.preempting[c.task_id] = c.resources
    assert reclaim_victims(ledger) == []  # being preempted already: not chosen again
    assert over_allocation(ledger)[0].fits_in(Resources())


def test_a_higher_priority_gang_preempts_lower_priority_runs_of_its_pool_only_if_that_makes_room() -> None:
    ledger = PoolLedger(entitlement=Resources(cpu=4, mem_mb=1000))
    for i, prio in enumerate((1, 1, 5, 5)):
        ledger.charge(charge(f"t{i}", 1, priority=prio, admitted_ms=i))
    q = PoolQueue()
    urgent = q.push(flagged("urgent", 1, priority=3, size=2))
    assert sorted(c.task_id for c in priority_victims(urgent, ledger)) == ["t0", "t1"]
    greedy = q.push(flagged("greedy", 1, priority=3, size=3))
    assert priority_victims(greedy, ledger) == []  # only 2 cpu of lower priority: no point killing them
    too_big = q.push(flagged("huge", 5, priority=9))
    assert priority_victims(too_big, ledger) == []  # beyond the entitlement: no victim makes room


def test_slack_capacity_is_what_no_pool_holds_and_what_held_cpu_lends() -> None:
    usage = [PoolUsage(allocation=Resources(cpu=6), slack_allocation=Resources(cpu=1))]
    assert slack_capacity(Resources(cpu=10), usage) == Resources(cpu=5)  # 10 - (6 - 1) held for non-revocable runs
    assert slack_capacity(Resources(cpu=10), usage, lent=2.5) == Resources(cpu=7.5)
    hosts = {"a": {"capacity": Resources(cpu=4).to_record(), "state": "UP", "unused_cpu": 2.5},
             "b": {"capacity": Resources(cpu=4).to_record(), "state": "DRAINING", "unused_cpu": 1.0}}
    kept = HostCapacities()
    kept.update(hosts.items())
    assert kept.lent_total(hosts) == 2.5  # a host in maintenance lends nothing
    hosts["a"] = {**hosts["a"], "unused_cpu": 0.0}
    kept.update([("a", hosts["a"])])
    assert kept.lent_total(hosts) == 0
