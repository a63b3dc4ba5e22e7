"""The agent's report rounds in flight (stages/agent/rounds.py), with no broker."""

from __future__ import annotations

from peloton.host.driver import TaskUpdate
from stages.agent.rounds import Rounds


def update(task_id: str) -> TaskUpdate:
    return TaskUpdate(task_id, "h1", "TASK_FINISHED", 1, exit_code=0)


def test_a_round_whose_reports_are_all_acknowledged_is_finished_once_and_marks_the_first_delivery() -> None:
    rounds = Rounds(now=0.0)
    round_id, _ = rounds.start([update("t1")], now=1.0)
    rounds.handed(round_id)
    rounds.handed(round_id)
    assert rounds.produced(round_id, failed=False) == [] and len(rounds) == 1
    assert rounds.answered(round_id, None, now=2.0) is None  # one report still waits
    finished = rounds.answered(round_id, None, now=3.0)
    assert finished is not None and not finished.failed and finished.first and finished.sent == 1.0
    assert [u.task_id for u in finished.updates] == ["t1"]
    assert rounds.delivered_at == 3.0 and rounds.ever_delivered and not rounds
    assert rounds.answered(round_id, None, now=4.0) is None  # no longer kept

    second, _ = rounds.start([], now=5.0)
    rounds.handed(second)
    rounds.produced(second, failed=False)
    assert not rounds.answered(second, None, now=6.0).first


def test_a_round_with_one_failed_report_fails_and_is_counted() -> None:
    rounds = Rounds(now=0.0)
    round_id, _ = rounds.start([update("t1")], now=1.0)
    rounds.handed(round_id)
    rounds.handed(round_id)
    rounds.produced(round_id, failed=False)
    rounds.answered(round_id, "Local: Message timed out", now=2.0)
    finished = rounds.answered(round_id, None, now=3.0)
    assert finished.failed and [u.task_id for u in finished.updates] == ["t1"]
    assert rounds.failed == 1 and rounds.delivered_at == 0.0 and not rounds.ever_delivered


def test_a_round_none_of_whose_reports_went_gives_its_updates_back_at_once() -> None:
    rounds = Rounds(now=0.0)
    round_id, _ = rounds.start([update("t1")], now=1.0)
    assert [u.task_id for u in rounds.produced(round_id, failed=True)] == ["t1"]
    assert not rounds and rounds.failed == 1
    quiet, _ = rounds.start([], now=2.0)  # no host had news: nothing went, nothing failed
    assert rounds.produced(quiet, failed=False) == [] and rounds.failed == 1


def test_a_client_is_stuck_when_a_round_waits_past_the_limit_or_every_round_fails_as_long() -> None:
    rounds = Rounds(now=0.0)
    round_id, _ = rounds.start([], now=1.0)
    rounds.handed(round_id)
    rounds.produced(round_id, failed=False)
    assert rounds.oldest_wait(5.0) == 4.0
    assert rounds.stuck(now=10.9, limit=10.0) is None
    assert rounds.stuck(now=11.0, limit=10.0) == "unanswered"
    rounds.answered(round_id, "timed out", now=11.0)
    assert rounds.oldest_wait(11.0) is None and rounds.failed == 1
    assert rounds.stuck(now=11.0, limit=10.0) == "failing"  # nothing delivered since 0.0
    assert Rounds(now=0.0).stuck(now=100.0, limit=10.0) is None  # no round, none failed


def test_a_new_producer_takes_back_every_rounds_updates_in_the_order_they_were_sent() -> None:
    rounds = Rounds(now=0.0)
    for task_id in ("t1", "t2"):
        round_id, _ = rounds.start([update(task_id)], now=1.0)
        rounds.handed(round_id)
        rounds.produced(round_id, failed=False)
    rounds.failed = 3
    assert [u.task_id for u in rounds.take_back(now=20.0)] == ["t1", "t2"]
    assert not rounds and rounds.failed == 0 and rounds.delivered_at == 20.0
    assert rounds.answered(0, None, now=21.0) is None  # the old client's late answer finds no round
