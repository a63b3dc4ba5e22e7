"""The status word of a consumer group, in Burrow's manner, from a window of offset samples."""

from __future__ import annotations

from peloton.topics import Catalogue
from pelotonctl.lag import STAGES, Sample, group_status, partition_status


def window(*points: tuple[int, int, int]) -> list[Sample]:
    """(committed, log end, read) per second."""
    return [Sample(float(i), c, e, r) for i, (c, e, r) in enumerate(points)]


def test_nothing_unread_is_ok_even_with_no_member() -> None:
    assert partition_status(window((5, 5, 5)), has_members=False) == "OK"
    assert partition_status(window((5, 5, 5), (5, 5, 5)), has_members=True) == "OK"


def test_messages_waiting_with_no_member_is_stop() -> None:
    assert partition_status(window((5, 9, 5)), has_members=False) == "STOP"


def test_a_position_that_does_not_move_over_the_window_with_messages_waiting_is_stall() -> None:
    assert partition_status(window((5, 9, 5), (5, 12, 5), (5, 14, 5)), has_members=True) == "STALL"


def test_one_sample_says_nothing_of_movement() -> None:
    assert partition_status(window((5, 9, 5)), has_members=True) == "OK"


def test_moving_but_falling_further_behind_at_every_sample_is_warn() -> None:
    assert partition_status(window((5, 10, 5), (7, 14, 7), (9, 20, 9)), has_members=True) == "WARN"
    # moving and catching up, or behind by the same: OK
    assert partition_status(window((5, 10, 5), (8, 12, 8), (11, 14, 11)), has_members=True) == "OK"


def test_held_messages_are_not_a_backlog() -> None:
    # place holds offset 5 (a gang waiting for a host) but has read everything: OK, not STALL.
    assert partition_status(window((5, 9, 9), (5, 9, 9), (5, 9, 9)), has_members=True) == "OK"
    # it holds 5 and has read on: the read position moving is movement.
    assert partition_status(window((5, 9, 7), (5, 11, 10)), has_members=True) == "OK"


def test_a_committed_offset_past_the_log_end_or_going_back_is_err() -> None:
    assert partition_status(window((12, 9, 12)), has_members=True) == "ERR"
    assert partition_status(window((8, 9, 8), (3, 9, 3)), has_members=True) == "ERR"


def test_a_group_is_as_bad_as_its_worst_partition() -> None:
    assert group_status(["OK", "WARN", "OK"]) == "WARN"
    assert group_status(["WARN", "STALL"]) == "STALL"
    assert group_status(["STOP", "ERR", "OK"]) == "ERR"
    assert group_status([]) == "OK"


def test_the_lag_groups_read_what_the_stages_consume() -> None:
    from stages.admit.stage import AdmitStage
    from stages.entitle.stage import EntitleStage
    from stages.launch.stage import LaunchStage
    from stages.place.stage import PlaceStage

    catalogue = Catalogue()
    for name, stage in zip(STAGES, (AdmitStage, EntitleStage, PlaceStage, LaunchStage), strict=True):
        assert sorted(t.id for t in catalogue.inputs_of(name)) == sorted(stage.inputs)


def test_a_group_is_named_by_its_stage_or_its_group_name() -> None:
    from peloton.config import Settings
    from pelotonctl.lag import stage_of

    settings = Settings(topic_prefix="t1.")
    assert [stage_of(settings, n) for n in ("place", "t1.peloton.place", "peloton.place", "nope")] == [
        "place", "place", None, None]


def at(*points: tuple[float, int, int, int]) -> list[Sample]:
    """(seconds, committed, log end, read) per sample."""
    return [Sample(t, c, e, r) for t, c, e, r in points]


def test_how_long_messages_waited_with_the_position_unmoved_is_measured_from_the_trailing_run() -> None:
    from pelotonctl.lag import stalled_for

    # Read on to 5 at t=1; messages wait from t=2; the position stays put to t=8.
    window = at((0, 3, 5, 3), (1, 5, 5, 5), (2, 5, 6, 5), (4, 5, 8, 5), (8, 5, 12, 5))
    assert stalled_for(window) == 6.0
    assert stalled_for(window[:2]) == 0.0  # caught up: nothing waits
    assert stalled_for(at((0, 5, 9, 5), (1, 6, 9, 6))) == 0.0  # it moved at the last sample


def test_messages_waiting_with_the_position_unmoved_for_stall_after_s_is_stall_though_the_window_saw_it_caught_up(
) -> None:
    # A member that was SIGKILLed stays listed for its session timeout (20 s): caught up at t=0,
    # then the messages that arrive wait. The window (10 samples) still holds the caught-up one.
    dead = at((0, 5, 5, 5), *[(float(t), 5, 5 + t, 5) for t in range(1, 10)])
    assert partition_status(dead[:5], has_members=True, stall_after_s=5.0) == "OK"  # unmoved for 3 s
    assert partition_status(dead[:7], has_members=True, stall_after_s=5.0) == "STALL"  # for 5 s
    assert partition_status(dead, has_members=True, stall_after_s=5.0) == "STALL"
    # Without a member the coordinator lists, it is STOP at once.
    assert partition_status(dead[:2], has_members=False) == "STOP"


def test_a_message_that_just_arrived_at_a_group_long_idle_is_no_stall() -> None:
    # Nothing to read for nine seconds, then one message, sampled before the stage read it.
    idle = at(*[(float(t), 5, 5, 5) for t in range(9)], (9, 5, 6, 5))
    assert partition_status(idle, has_members=True) == "OK"
    # and caught up at some sample of the window is OK whatever came after (Burrow's first rule)
    assert partition_status(at((0, 5, 5, 5), (1, 5, 7, 5), (2, 5, 9, 5)), has_members=True) == "OK"


def test_a_stage_that_reads_on_while_messages_keep_coming_is_not_stall() -> None:
    busy = at(*[(float(t), 10 * t, 10 * t + 3, 10 * t) for t in range(12)])
    assert partition_status(busy, has_members=True, stall_after_s=5.0) == "OK"


def test_the_detail_says_why_a_group_has_its_status() -> None:
    from pelotonctl.lag import status_detail

    def group(status: str, **fields) -> dict:
        return {"status": status, "total_lag": 14, "held": 0, "member_count": 1, "max_lag_seconds": 6.25,
                "stalled_seconds": 5.0, **fields}

    assert status_detail(group("STOP", member_count=0)) == "no member, and 14 messages wait, the oldest for 6.2 s"
    assert status_detail(group("STALL", held=2)) == (
        "12 messages wait unread and its position has not moved for 5.0 s; 1 member listed (the coordinator "
        "lists a member that died until its session times out)")
    assert status_detail(group("OK", total_lag=0, member_count=2)) == "caught up; 2 members listed"
    assert status_detail(group("OK", member_count=None)) == "14 messages behind; members unknown"
    assert "falls further behind" in status_detail(group("WARN"))
    assert "lost its log" in status_detail(group("ERR"))
