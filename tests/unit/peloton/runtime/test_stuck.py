"""The loop's watchdog: a stuck turn writes every thread's stack; turns that keep ending do not."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import time
from peloton.runtime.stuck import StuckWatch
watch = StuckWatch(stuck_s=0.4, rearm_s=0.2)
end = time.monotonic() + {busy}
while time.monotonic() < end:
    watch.turn()
    time.sleep(0.02)
watch.turn()
time.sleep({stuck})
watch.stop()
time.sleep(0.8)
print("done")
"""


def run(busy: float, stuck: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", SCRIPT.format(busy=busy, stuck=stuck)], capture_output=True,
                          text=True, timeout=30)


def test_a_turn_stuck_past_the_limit_writes_the_stacks_once_armed_only_every_few_seconds() -> None:
    out = run(busy=1.0, stuck=1.0)
    assert out.stdout.strip() == "done"
    assert "Timeout" in out.stderr, out.stderr  # faulthandler's dump
    assert "<string>" in out.stderr, out.stderr  # where the main thread stood


def test_turns_that_keep_ending_write_nothing_and_stop_disarms() -> None:
    out = run(busy=1.5, stuck=0.0)
    assert out.stdout.strip() == "done" and out.stderr == ""
