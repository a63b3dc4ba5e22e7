"""The lag monitor's own process: a broker's error comes back in its words, and a sampling process
that died (an abort in librdkafka) costs one sample, not the process that asked."""

from __future__ import annotations

import os
import signal

import pytest

from peloton.config import Settings
from pelotonctl.lag_child import LagInChild, LagUnavailable


@pytest.fixture
def sampler(tmp_path):
    # Nothing listens on port 1: every request fails after its timeout.
    lag = LagInChild(Settings(bootstrap="127.0.0.1:1", home=tmp_path, store=str(tmp_path / "x.db")), window=3,
                     timeout_s=0.5)
    yield lag
    lag.close()


def test_no_broker_is_told_and_the_sampler_lives_on(sampler) -> None:
    with pytest.raises(LagUnavailable, match=r"^broker at 127\.0\.0\.1:1 is unavailable: "):
        sampler.sample()
    child = sampler._child
    assert child is not None and child.poll() is None  # the same process answers the next sample
    with pytest.raises(LagUnavailable, match="is unavailable"):
        sampler.sample(("admit",), 2)
    assert sampler._child is child


def test_a_sampling_process_that_died_costs_one_sample(sampler) -> None:
    with pytest.raises(LagUnavailable):
        sampler.sample()
    first = sampler._child
    os.kill(first.pid, signal.SIGABRT)  # what librdkafka's failed assertion does
    with pytest.raises(LagUnavailable, match=r"the sampling process ended \(signal 6\)"):
        sampler.sample()
    assert sampler._child is None
    with pytest.raises(LagUnavailable, match="broker at 127.0.0.1:1 is unavailable"):  # a new one answers
        sampler.sample()
    assert sampler._child is not None and sampler._child.pid != first.pid


def test_close_ends_the_sampling_process(sampler) -> None:
    with pytest.raises(LagUnavailable):
        sampler.sample()
    child = sampler._child
    sampler.close()
    assert child.wait(timeout=10) is not None and sampler._child is None


def test_a_garbled_answer_costs_one_sample(sampler, monkeypatch) -> None:
    with pytest.raises(LagUnavailable):
        sampler.sample()
    first = sampler._child
    monkeypatch.setattr(sampler, "_answer", lambda child, limit_s: (b"{not json", ""))
    with pytest.raises(LagUnavailable, match="is unavailable: "):
        sampler.sample()
    assert sampler._child is None and first.wait(timeout=10) is not None


def test_a_sampling_process_that_died_before_the_question_is_told_as_such(sampler) -> None:
    with pytest.raises(LagUnavailable):
        sampler.sample()
    first = sampler._child
    os.kill(first.pid, signal.SIGABRT)
    first.wait()  # gone before the next question is written: a broken pipe, said as how it ended
    with pytest.raises(LagUnavailable, match=r"the sampling process ended \(signal 6\)"):
        sampler.sample()
