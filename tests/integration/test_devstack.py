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
        assert "start empty" in up.stdout  # the embedded broker and store keep nothing: say so
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


def test_two_dev_up_at_once_start_one_stack_and_the_other_names_it(tmp_path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PELOTON_")}
    env.update(PELOTON_HOME=str(tmp_path), PELOTON_SESSION_TIMEOUT_MS="2000")
    cmd = [sys.executable, "-m", "peloton.cli", "dev", "up", "--hosts", "sim:2:cpu=4"]
    both = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(2)]
    results = [(p.wait(120), *p.communicate()) for p in both]
    try:
        codes = sorted(code for code, _, _ in results)
        assert codes == [0, 5], results
        refused = next(err for code, _, err in results if code == 5)
        assert "starting a dev stack" in refused or "already running" in refused
        rows = json.loads(subprocess.run([sys.executable, "-m", "peloton.cli", "dev", "status", "--json"], env=env,
                                         capture_output=True, text=True, timeout=60).stdout)
        assert [r["component"] for r in rows] == ["broker", "admit", "entitle", "place", "launch"]
        # one stack's processes and no others: every process of this home is in the state file
        mine = set()
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                environ = open(f"/proc/{pid}/environ", "rb").read()
            except OSError:
                continue
            if f"PELOTON_HOME={tmp_path}".encode() in environ and b"stage" in open(f"/proc/{pid}/cmdline", "rb").read():
                mine.add(int(pid))
        assert mine == {r["pid"] for r in rows if r["component"] != "broker"}
    finally:
        subprocess.run([sys.executable, "-m", "peloton.cli", "dev", "down"], env=env, capture_output=True, timeout=120)
