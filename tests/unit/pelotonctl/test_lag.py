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
