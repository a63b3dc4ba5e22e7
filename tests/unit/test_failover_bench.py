"""The failover bench's summary and the coordinator names it picks (pure parts; the bench itself
kills brokers, and runs by hand: python -m pelotonctl.bench.failover)."""

from pelotonctl.bench.failover import summary
from pelotonctl.dev.coordinators import java_hash


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
