"""ReadStall: a reader of assigned partitions that stopped fetching is told apart from one that
reads, or has nothing to read (peloton/runtime/stall.py)."""

from __future__ import annotations

from peloton.runtime.stall import ReadStall


def test_a_reader_behind_an_end_seen_long_enough_ago_is_stalled_and_goes_on_from_its_position() -> None:
    rule = ReadStall(after_s=20)
    assert rule.stalled(0, {0: 10, 1: 5}, {0: 10, 1: 5}) == []
    assert rule.stalled(5, {0: 12, 1: 5}, {0: 10, 1: 5}) == []  # records came: not judged yet
    assert rule.stalled(20, {0: 12, 1: 5}, {0: 10, 1: 5}) == []  # what it lacks came 15 s ago
    assert rule.stalled(25, {0: 12, 1: 5}, {0: 10, 1: 5}) == [0]  # and 20 s ago: stalled
    assert rule.restart_at({0: 10, 1: 5}) == {0: 10, 1: 5}


def test_a_reader_that_keeps_reading_or_has_nothing_to_read_is_never_stalled() -> None:
    rule = ReadStall(after_s=20)
    for t in range(0, 120, 5):
        # records arrive all along and the reader is a little behind each time, never by what
        # was there 20 s earlier
        assert rule.stalled(t, {0: 100 + 10 * t}, {0: 100 + 10 * t - 7}) == []
    idle = ReadStall(after_s=20)
    assert all(idle.stalled(t, {0: 42}, {0: 42}) == [] for t in range(0, 120, 5))


def test_a_reader_with_no_position_stands_at_the_first_end_seen() -> None:
    rule = ReadStall(after_s=10)
    assert rule.stalled(0, {0: 7}, {0: None}) == []  # started at the end: nothing to read yet
    assert rule.stalled(10, {0: 7}, {0: None}) == []  # still nothing came
    assert rule.stalled(15, {0: 9}, {0: None}) == []  # two commands came 0 s ago
    assert rule.stalled(25, {0: 9}, {0: None}) == [0]  # 10 s ago, and none was read
    assert rule.restart_at({0: None}) == {0: 7}  # from where it stood, so none is skipped


def test_a_new_reader_is_judged_afresh() -> None:
    rule = ReadStall(after_s=10)
    rule.stalled(0, {0: 5}, {0: 1})
    assert rule.stalled(10, {0: 5}, {0: 1}) == [0]
    rule.forget()
    assert rule.stalled(11, {0: 5}, {0: 1}) == []  # the new one has had no time yet
    assert rule.stalled(21, {0: 5}, {0: 5}) == []  # and read it


def test_a_reader_assigned_at_a_saved_offset_is_judged_from_there_until_it_fetches() -> None:
    from confluent_kafka import TopicPartition

    from peloton.runtime.stall import ReaderWatch

    class Unfetched:  # a consumer assigned at offset 100 that has fetched nothing: no position
        def position(self, parts):
            return [TopicPartition(tp.topic, tp.partition, -1001) for tp in parts]

    def ends(topic, partitions, timeout_s):
        return {p: 150 for p in partitions}

    clock = [0.0]
    watch = ReaderWatch("t", [0], ends, after_s=10, every_s=5, clock=lambda: clock[0])
    seen = []
    for t in (5, 10, 15, 20):
        clock[0] = t
        seen.append(watch.stalled(Unfetched(), {0: 100}))
    # The 50 commands after offset 100 waited all along, though none came after the first look.
    assert seen == [[], [], [0], [0]]
    assert watch.rule.restart_at(watch.positions(Unfetched(), {0: 100})) == {0: 100}


def test_a_reader_that_starts_at_the_end_and_never_fetches_is_judged_by_the_first_record_after_its_start() -> None:
    """Without the end at its start, the first check would see the record already there and take
    it for where the reader stands: a reader stalled from its start would be judged only once a
    second record came."""
    begun = ReadStall(after_s=10)
    begun.begin(0, {0: 7})
    unbegun = ReadStall(after_s=10)
    for rule in (begun, unbegun):
        assert rule.stalled(5, {0: 8}, {0: None}) == []  # a command came before the first check
    assert begun.stalled(15, {0: 8}, {0: None}) == [0]
    assert unbegun.stalled(15, {0: 8}, {0: None}) == []
    assert begun.restart_at({0: None}) == {0: 7}  # from its start, so the command is read


def test_ends_asked_of_no_partition_are_empty_and_make_no_client() -> None:
    from peloton.runtime.stall import EndsAside

    aside = EndsAside({"bootstrap.servers": "127.0.0.1:1"})
    assert aside("t", [], 0.5) == {}
    assert aside._admin is None


def test_a_renewed_reader_stands_where_it_was_assigned_until_it_fetches() -> None:
    """An agent that never handled a command on a partition and whose reader stalled: the new
    reader has no position until it fetches, and its owner knows no offset, so without this its
    reports said nothing of where it stood (the host manager then fell back to giving up unread
    launches after a grace, and they ran twice), and it was judged only from the first end seen
    after it came."""
    from confluent_kafka import TopicPartition

    from peloton.runtime.stall import ReaderWatch

    class Unfetched:
        def position(self, parts):
            return [TopicPartition(tp.topic, tp.partition, -1001) for tp in parts]

        def assign(self, parts):
            self.assigned = {tp.partition: tp.offset for tp in parts}

        def close(self):
            pass

    ends = {0: 7}
    clock = [0.0]
    watch = ReaderWatch("t", [0], lambda topic, partitions, timeout_s: dict(ends), after_s=10, every_s=5,
                        clock=lambda: clock[0])
    watch.begin([0])  # assigned at the end, 7: nothing handled there yet
    ends[0] = 9  # two commands came, and the reader fetched nothing
    for t in (5, 10, 15):
        clock[0] = t
        stalled = watch.stalled(Unfetched(), {0: None})
    assert stalled == [0]
    new, at = watch.renew(Unfetched(), Unfetched, {0: None})
    assert at == {0: 7} and new.assigned == {0: 7}
    assert watch.standing(new, {0: None}) == {0: 7}  # not {}: its reports say where it stands
    ends[0] = 10
    seen = []
    for t in (20, 25, 30):
        clock[0] = t
        seen.append(watch.stalled(new, {0: None}))
    assert seen == [[], [], [0]]  # the commands from 7 on waited for it from its start


class _Admin:
    """An admin client that answers ListOffsets with `end` for every partition, or never."""

    def __init__(self, end: int | None):
        self.end = end

    def list_offsets(self, request, isolation_level=None, request_timeout=None):
        from concurrent.futures import Future

        from confluent_kafka import KafkaError, KafkaException

        if self.end is None:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT))
        out = {}
        for tp in request:
            future = Future()
            future.set_result(type("Answer", (), {"offset": self.end})())
            out[tp] = future
        return out


def test_an_admin_client_that_answers_nothing_for_long_is_made_afresh() -> None:
    """The watch's own client can be stuck as a reader can: kept, it skipped every check for good."""
    from peloton.runtime.stall import EndsAside

    clock = [0.0]
    made = []

    def make_admin():
        made.append(_Admin(None if len(made) == 0 else 7))  # the first is stuck, its successor answers
        return made[-1]

    aside = EndsAside({}, unanswered_s=20, clock=lambda: clock[0], make_admin=make_admin)
    for t in (0, 5, 10, 15):
        clock[0] = t
        assert aside("t", [0, 1], 0.5) is None
    assert len(made) == 1 and aside.renewals == 0  # a broker away this long is an election, not a stuck client
    clock[0] = 20
    assert aside("t", [0, 1], 0.5) is None
    assert aside.renewals == 1
    clock[0] = 25
    assert aside("t", [0, 1], 0.5) == {0: 7, 1: 7}
    assert len(made) == 2


def test_an_admin_client_that_answers_now_and_then_is_kept() -> None:
    from peloton.runtime.stall import EndsAside

    clock = [0.0]
    answers = iter([None, 3, None, None, None, 4, None, None, None])
    current = _Admin(None)

    def ask(*args, **kwargs):
        current.end = next(answers)
        return _Admin.list_offsets(current, *args, **kwargs)

    current.list_offsets = ask
    made = []
    aside = EndsAside({}, unanswered_s=20, clock=lambda: clock[0], make_admin=lambda: made.append(1) or current)
    for i in range(9):
        clock[0] = 5 * i
        aside("t", [0], 0.5)
    assert made == [1] and aside.renewals == 0  # never 20 s without an answer


def test_partitions_a_client_never_answers_cost_one_wait_not_one_each(monkeypatch) -> None:
    """A stuck client's futures never resolve: each partition's wait came after the last one's,
    and an agent's loop stood still for partitions x (timeout + 1 s) at every check."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import OffsetSpec

    from peloton.runtime import readback

    clock = [100.0]
    monkeypatch.setattr(readback.time, "monotonic", lambda: clock[0])

    class Unanswered:
        def result(self, timeout=None):
            clock[0] += timeout  # the whole wait goes by
            raise TimeoutError()

    class Stuck:
        def list_offsets(self, request, isolation_level=None, request_timeout=None):
            return {TopicPartition(tp.topic, tp.partition): Unanswered() for tp in request}

    assert readback.offsets_at(Stuck(), [("t", p) for p in range(8)], OffsetSpec.latest(), 0.5) == {}
    assert clock[0] - 100.0 <= 1.5
