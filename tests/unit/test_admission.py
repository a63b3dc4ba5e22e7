from __future__ import annotations

from peloton.model.resources import Resources
from stages.entitle.admission import PoolLedger, PoolQueue, admit


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
