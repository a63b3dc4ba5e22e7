"""The host manager's decisions on placements, without a broker or a store."""

from __future__ import annotations

from peloton.model.resources import Resources
from stages.launch.ledger import HostLedger, judge_placement


def task(task_id: str, cpu: float) -> dict:
    return {"task_id": task_id, "resources": {"cpu": cpu, "mem_mb": 1.0, "disk_mb": 0.0, "gpu": 0.0}}


def test_a_placement_is_taken_while_the_host_has_room_and_refused_after() -> None:
    ledgers = {"h": HostLedger("h", Resources(cpu=2, mem_mb=10))}
    verdict = judge_placement([{"host_id": "h", "task": task("a", 1.5)}, {"host_id": "h", "task": task("b", 1)}],
                              ledgers, running=set(), served={"h"})
    assert [t["task_id"] for t, _ in verdict.accepted] == ["a"]
    assert [(t["task_id"], why) for t, _, why in verdict.refused] == [("b", "host no longer has room for the task")]
    assert verdict.applied_on == ["h", "h"] and ledgers["h"].held.total.cpu == 1.5


def test_a_repeat_of_a_running_task_changes_nothing_and_another_shards_host_is_refused() -> None:
    ledgers = {"h": HostLedger("h", Resources(cpu=2, mem_mb=10))}
    verdict = judge_placement([{"host_id": "h", "task": task("a", 1)}, {"host_id": "g", "task": task("b", 1)}],
                              ledgers, running={"a"}, served={"h", "g"})
    assert verdict.accepted == [] and ledgers["h"].held.total.cpu == 0
    assert [(t["task_id"], h) for t, h, _ in verdict.refused] == [("b", "g")]


def test_a_placement_naming_a_host_nobody_serves_is_refused_whole() -> None:
    ledgers = {"h": HostLedger("h", Resources(cpu=2, mem_mb=10))}
    verdict = judge_placement([{"host_id": "h", "task": task("a", 1)}, {"host_id": "nowhere", "task": task("b", 1)}],
                              ledgers, running=set(), served={"h"})
    assert verdict == "placement names unknown host 'nowhere'"
    assert ledgers["h"].held.total.cpu == 0  # nothing reserved for half of it
