"""The failover bench's summary and the coordinator names it picks (pure parts; the bench itself
kills brokers, and runs by hand: python -m pelotonctl.bench.failover)."""

import re
from types import SimpleNamespace

import pytest

from pelotonctl.bench.failover import summary
from pelotonctl.dev import coordinators
from pelotonctl.dev.coordinators import coordinated_by, java_hash


def test_the_summary_gives_each_way_its_trials_least_median_and_most_leaving_out_the_unmeasured() -> None:
    trials = [{"way": "renew", "commit_after_fencing_s": 1.2}, {"way": "abort", "commit_after_fencing_s": 0.4},
              {"way": "renew", "commit_after_fencing_s": 0.2}, {"way": "renew", "commit_after_fencing_s": None},
              {"way": "renew", "commit_after_fencing_s": 0.9}, {"way": "keep", "commit_after_fencing_s": None}]
    assert summary(trials) == {
        "renew": {"trials": 3, "min_s": 0.2, "median_s": 0.9, "max_s": 1.2},
        "abort": {"trials": 1, "min_s": 0.4, "median_s": 0.4, "max_s": 0.4},
        "keep": {"trials": 0, "min_s": None, "median_s": None, "max_s": None},
    }


def test_java_hash_is_javas_string_hash_code() -> None:
    # what Java's "".hashCode(), "a".hashCode() and "polygenelubricants".hashCode() return
    assert java_hash("") == 0
    assert java_hash("a") == 97
    assert java_hash("polygenelubricants") == -2147483648  # Integer.MIN_VALUE, the famous one


class Metadata:
    """An admin client whose metadata of one topic lists, in turn, the partitions given."""

    def __init__(self, *views: dict[int, int]):
        self.views = list(views)  # each {partition: leader}

    def list_topics(self, topic: str, timeout: float):
        view = self.views.pop(0) if len(self.views) > 1 else self.views[0]
        parts = {p: SimpleNamespace(leader=leader) for p, leader in view.items()}
        return SimpleNamespace(topics={topic: SimpleNamespace(partitions=parts)})


def test_a_coordinated_name_hashes_to_a_partition_the_node_leads_of_the_whole_topic(monkeypatch) -> None:
    monkeypatch.setattr(coordinators.time, "sleep", lambda s: None)
    whole = {p: 1 + p % 3 for p in range(10)}  # node 3 leads 2, 5, 8
    partial = {p: whole[p] for p in (0, 4, 8)}  # partitions missing: hashed mod 3, no name lands on 8
    name = coordinated_by(Metadata(partial, whole), "__transaction_state", 3, "probe")
    assert java_hash(name) >= 0 and java_hash(name) % 10 in {2, 5, 8}


def test_a_node_that_never_leads_is_told_with_what_was_seen(monkeypatch) -> None:
    monkeypatch.setattr(coordinators.time, "sleep", lambda s: None)
    with pytest.raises(RuntimeError, match=re.escape("node 3 leads no partition of __consumer_offsets, or its "
                                                     "metadata never listed them all (last seen: partitions [0, 1], "
                                                     "led by it [])")):
        coordinated_by(Metadata({0: 1, 1: 2}), "__consumer_offsets", 3, "probe")
