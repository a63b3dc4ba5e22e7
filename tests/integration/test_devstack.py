"""`pelotonctl dev up / status / down` with its own embedded broker."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from peloton.devstack import alive

pytestmark = pytest.mark.integration


def test_dev_up_status_and_down(tmp_path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PELOTON_")}
    env.update(PELOTON_HOME=str(tmp_path), PELOTON_SESSION_TIMEOUT_MS="2000")

    def ctl(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "peloton.cli", *args], env=env, capture_output=True,
                              text=True, timeout=120)

    up = ctl("dev", "up", "--hosts", "sim:2:cpu=4")
    try:
        assert up.returncode == 0, up.stderr
        status = ctl("dev", "status", "--json")
        assert status.returncode == 0, status.stderr
        rows = json.loads(status.stdout)
        assert [r["component"] for r in rows] == ["broker", "admit", "entitle", "place", "launch"]
        assert all(r["running"] and r["pid"] > 0 for r in rows)
        assert rows[0]["address"].startswith("127.0.0.1:")
        # --hosts reached the stack: its launch stage serves that inventory
        assert json.loads((tmp_path / "dev" / "stack.json").read_text())["hosts"] == "sim:2:cpu=4"
        assert "PELOTON_HOSTS=sim:2:cpu=4" in open(f"/proc/{rows[-1]['pid']}/environ").read().replace("\0", " ")
        again = ctl("dev", "up")
        assert again.returncode == 5 and "already running" in again.stderr
    finally:
        down = ctl("dev", "down")
    assert down.returncode == 0, down.stderr
    # SIGTERM is enough: every stage finished its batch, committed and left on its own.
    assert "killed" not in down.stdout
    assert [line.split()[0] for line in down.stdout.splitlines()] == [
        "admit", "entitle", "place", "launch", "broker"]
    assert not any(alive(r["pid"]) for r in rows)
    for stage in ("admit", "entitle", "place", "launch"):
        assert f"{stage}-0 stopped after" in (tmp_path / "dev" / "logs" / f"{stage}.log").read_text()
    assert ctl("dev", "status", "--json").returncode == 5
