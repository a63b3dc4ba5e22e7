"""The lag sampler without a broker: since when each group has had its status, the view every
reader shares, what a failed sample leaves, and the peloton_group_* series it sets."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY

from peloton.config import Settings
from pelotonctl.lag_child import LagUnavailable
from pelotonctl.lag_sampler import UNKNOWN, LagSampler


def report(at_s: float, statuses: dict[str, str], lag: int = 0, members: int | None = 1, prefix: str = "u1.") -> dict:
    """pelotonctl.lag's sample shape, one partition per stage, of groups under `prefix`."""
    return {"sampled_ms": int(at_s * 1000), "queued": [], "groups": [
        {"group": f"{prefix}peloton.{stage}", "stage": stage, "status": status, "members": members != 0,
         "member_count": members, "total_lag": lag, "held": 0, "max_lag_seconds": 2.5 if lag else 0.0,
         "stalled_seconds": 0.0, "detail": f"{stage} is {status}",
         "partitions": [{"topic": f"{prefix}peloton.{stage}-in", "partition": 0, "current_offset": 5,
                         "log_end_offset": 5 + lag, "lag": lag, "lag_seconds": 2.5 if lag else 0.0, "held": 0,
                         "status": status}]}
        for stage, status in statuses.items()]}


class Scripted:
    """A monitor that answers the reports (or raises the errors) it is given, in order."""

    def __init__(self, *answers) -> None:
        self.answers = list(answers)
        self.closed = False

    def sample(self, stages=None, window=None) -> dict:
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def settings(tmp_path) -> Settings:
    return Settings(bootstrap="kafka-1:9092", home=tmp_path, store=str(tmp_path / "x.db"))


def test_each_group_keeps_since_when_it_has_had_its_status(settings) -> None:
    monitor = Scripted(report(100, {"admit": "OK", "launch": "OK"}),
                       report(101, {"admit": "OK", "launch": "STALL"}, lag=4),
                       report(102, {"admit": "OK", "launch": "STALL"}, lag=6),
                       report(103, {"admit": "OK", "launch": "STOP"}, lag=8, members=0))
    sampler = LagSampler(settings, monitor=monitor)
    for _ in range(3):
        sampler.sample_once()
    assert sampler.stage_health() == {"admit": ("OK", 100.0, "admit is OK"),
                                      "launch": ("STALL", 101.0, "launch is STALL")}
    sampler.sample_once()
    assert sampler.stage_health()["launch"] == ("STOP", 103.0, "launch is STOP")
    seen = sampler.view(("launch",), wait_s=0)
    assert [g["stage"] for g in seen["groups"]] == ["launch"]
    assert seen["groups"][0]["status_since_ms"] == 103_000 and seen["sampled_ms"] == 103_000
    assert seen["sampler"] == {"every_s": 1.0, "window": 10, "stall_after_s": 5.0}
    sampler.close()
    assert monitor.closed


def test_before_any_sample_and_after_a_failed_one_readers_are_told_why(settings) -> None:
    monitor = Scripted(LagUnavailable("broker at kafka-1:9092 is unavailable: Connection refused"),
                       report(200, {"place": "OK"}))
    sampler = LagSampler(settings, monitor=monitor)
    [(word, _since, why)] = set(sampler.stage_health().values())
    assert (word, why) == (UNKNOWN, "no sample of the groups' lag yet")
    with pytest.raises(LagUnavailable, match="no sample within 0s"):
        sampler.view(wait_s=0)
    sampler.sample_once()  # the broker is away: the last report would be a stale one
    with pytest.raises(LagUnavailable, match="^broker at kafka-1:9092 is unavailable: Connection refused$"):
        sampler.view()
    assert {v[0] for v in sampler.stage_health().values()} == {UNKNOWN}
    sampler.sample_once()  # it answers again
    assert sampler.view(wait_s=0)["groups"][0]["status"] == "OK"


def test_a_broker_error_or_a_bug_in_one_sample_does_not_end_the_sampling(settings) -> None:
    from confluent_kafka import KafkaError, KafkaException

    monitor = Scripted(KafkaException(KafkaError(KafkaError._TRANSPORT, "Connection refused")), KeyError("x"),
                       report(300, {"entitle": "WARN"}))
    sampler = LagSampler(settings, monitor=monitor)
    sampler.sample_once()
    with pytest.raises(LagUnavailable, match="^broker at kafka-1:9092 is unavailable: Connection refused$"):
        sampler.view(wait_s=0)
    sampler.sample_once()
    with pytest.raises(LagUnavailable, match="KeyError"):
        sampler.view(wait_s=0)
    sampler.sample_once()
    assert sampler.stage_health()["entitle"][0] == "WARN"


def value(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


def test_the_series_keep_a_stopped_groups_lag_growing_and_its_one_status(settings) -> None:
    monitor = Scripted(report(400, {"launch": "OK"}, lag=0),
                       report(401, {"launch": "STALL"}, lag=3),
                       report(402, {"launch": "STOP"}, lag=7, members=0))
    sampler = LagSampler(settings, monitor=monitor, export=True)
    group = {"group": "u1.peloton.launch", "stage": "launch"}
    partition = {**group, "topic": "u1.peloton.launch-in", "partition": "0"}
    seen = []
    for _ in range(3):
        sampler.sample_once()
        seen.append((value("peloton_group_lag", **partition), value("peloton_group_members", **group),
                     [s for s in ("OK", "WARN", "STALL", "STOP", "ERR")
                      if value("peloton_group_status", **group, status=s) == 1]))
    assert seen == [(0, 1, ["OK"]), (3, 1, ["STALL"]), (7, 0, ["STOP"])]
    assert value("peloton_group_lag_seconds", **partition) == 2.5
    assert value("peloton_group_sampled_timestamp_seconds", **group) == 402


def test_without_export_no_series_is_set(settings) -> None:
    sampler = LagSampler(settings, monitor=Scripted(report(500, {"admit": "OK"}, lag=1, prefix="u2.")))
    sampler.sample_once()
    assert value("peloton_group_members", group="u2.peloton.admit", stage="admit") is None


def test_the_thread_samples_every_period_until_closed(settings) -> None:
    monitor = Scripted(*[report(600 + i, {"admit": "OK"}) for i in range(100)])
    sampler = LagSampler(settings, every_s=0.01, monitor=monitor)
    sampler.start()
    sampler.start()  # once is enough
    assert sampler.view(wait_s=5)["groups"][0]["stage"] == "admit"
    sampler.close()
    left = len(monitor.answers)
    assert left < 100 and monitor.closed and not sampler._thread.is_alive()
