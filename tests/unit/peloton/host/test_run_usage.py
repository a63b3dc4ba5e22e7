"""Runs' cpu and memory measured from /proc, per process group, as an agent reports them."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from peloton.host.run_usage import UsageMeter, groups_use


def test_a_busy_run_measures_its_cpu_and_a_sleeping_one_nearly_none() -> None:
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
    idle = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        meter = UsageMeter(window=3)
        groups = {"busy": busy.pid, "idle": idle.pid}
        assert meter.measure(groups, time.monotonic()) == {}  # one measurement is no rate yet
        time.sleep(0.5)
        said = meter.measure(groups, time.monotonic())
        # The bound tells a spinning process from a sleeping one on a loaded machine, no more.
        assert said["busy"][0] > 0.2, said
        assert said["idle"][0] < 0.05, said
        assert said["busy"][1] > 1 and said["idle"][1] > 0  # resident MB
        assert groups_use({busy.pid})[busy.pid].cpu_seconds > 0
        busy.kill()
        busy.wait()
        # Gone: no longer said, and forgotten once it is no longer asked about.
        assert "busy" not in meter.measure(groups, time.monotonic())
        meter.measure({"idle": idle.pid}, time.monotonic())
        assert set(meter._last) == {"idle"}
    finally:
        for proc in (busy, idle):
            proc.kill()
            proc.wait()


def test_the_rate_said_is_the_highest_of_the_window() -> None:
    meter = UsageMeter(window=2)
    seconds = {"t": 0.0}
    for now, used, expected in ((0.0, 0.0, None), (1.0, 1.0, 1.0), (2.0, 1.1, 1.0), (3.0, 1.2, 0.1)):
        seconds["t"] = used  # the run's cpu seconds as its cgroup counts them
        said = meter.measure({"t": os.getpgrp()}, now, seconds)  # this test's own group: it is there
        assert (said["t"][0] if said else None) == (None if expected is None else pytest.approx(expected))
