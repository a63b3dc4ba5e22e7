"""`pelotonctl bench --cpu-per-instance`: the cap holds a real process back (the kernel's cgroup
cpu controller; root, or skipped where no controller can be written)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from pelotonctl.bench.cpu_cap import CpuCaps, find_controller

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(find_controller() is None, reason="no writable cgroup cpu controller here")]

BUSY = "import time\nend = time.monotonic() + 1.5\nwhile time.monotonic() < end:\n    pass\n"


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100  # utime + stime, in clock ticks of 1/100 s


def test_a_capped_process_gets_no_more_than_its_share_and_its_group_goes_with_the_run() -> None:
    caps = CpuCaps.make(0.1)
    busy = subprocess.Popen([sys.executable, "-c", BUSY + "time.sleep(30)\n"])
    try:
        group = caps.cap("busy", busy.pid)
        assert str(busy.pid) in (group / "cgroup.procs").read_text().split()
        time.sleep(1.6)  # its busy second and a half, capped
        used = _cpu_seconds(busy.pid)
        # Uncapped it would take 1.5 s of a core (less on a busy machine, never near 0.4): capped at a
        # tenth, 0.15 s and the odd period's rounding.
        assert used < 0.4, used
        assert caps.throttled()["busy"] > 0.5
    finally:
        busy.kill()
        busy.wait()
        caps.close()
    assert not group.exists() and caps.groups == {}
