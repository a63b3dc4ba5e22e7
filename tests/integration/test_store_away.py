"""What operators and users see through the API while the store is away, and when a stage dies
(issue 63), on a real dev stack: with PostgreSQL hung (every process of it SIGSTOPped, as a stalled
disk leaves it: connections accepted, nothing answered) or stopped, `job status` answers within 10 s
with exit 5 and one line naming the store and what needed it, while what the API serves from its
views (hosts, pools, lag) still answers and says so; with the store back, everything answers again.
With the only launch instance SIGKILLed, `job status` says within seconds that its statuses are no
longer applied, and why."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import time
from pathlib import Path

import pytest

from pelotonctl.dev.postgres import PostgresServer
from tests.integration.helpers import answered, ctl_in, sleepers, stack_env

pytestmark = pytest.mark.integration

ANSWER_WITHIN_S = 10.0  # what a person waits for an answer, at most, whatever is away


def processes_under(pid: int) -> list[int]:
    """pid and every process below it (PostgreSQL's postmaster and its backends and workers)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
    found, frontier = [pid], [pid]
    while frontier:
        children = [p for p, parent in parents.items() if parent in frontier]
        found.extend(children)
        frontier = children
    return found


def component(tmp_path: Path, name: str) -> dict:
    return next(c for c in json.loads((tmp_path / "dev" / "stack.json").read_text())["components"]
                if c["component"] == name)


def timed(ctl, *args: str):
    started = time.monotonic()
    done = ctl(*args)
    return done, time.monotonic() - started


def one_line_exit_5(done, names: str, needs: str) -> None:
    assert done.returncode == 5, (done.returncode, done.stdout, done.stderr)
    [line] = done.stderr.strip().splitlines()
    assert names in line and f"{needs} needs it" in line and "Traceback" not in done.stderr, done.stderr


def views_still_answer(ctl, store: str) -> dict[str, float]:
    """Hosts, pools, lag and the cluster's instances answer within the bound, those served from the
    API's views saying so; the seconds each took."""
    took = {}
    for args in (("host", "list"), ("respool", "get", "/DefaultResPool"), ("respool", "dump"), ("lag",),
                 ("cluster", "status")):
        done, took[" ".join(args)] = timed(ctl, *args)
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        assert took[" ".join(args)] < ANSWER_WITHIN_S, f"{args}: {took[' '.join(args)]:.1f}s"
        if args[0] in ("host", "respool"):  # lag and the instances never need the store: nothing to say
            assert f"served from the API's views without the store: the store ({store})" in done.stderr, \
                (args, done.stderr)
    return took


def two_sleepers(ctl, tmp_path) -> str:
    """A job of two tasks that sleep ten minutes, created in /DefaultResPool: its id."""
    job_file = tmp_path / "job.yaml"
    job_file.write_text(sleepers(2, 600))
    created = ctl("job", "create", "/DefaultResPool", str(job_file), "--json")
    assert created.returncode == 0, created.stderr
    return json.loads(created.stdout)["job_id"]


@pytest.mark.alone  # its bounds are times
def test_with_the_store_hung_then_stopped_store_reads_answer_503_in_one_line_and_view_reads_still_answer(
        tmp_path) -> None:
    ctl = ctl_in(stack_env(tmp_path, PELOTON_SIM_TASK_SECONDS="600"), 180)
    up = ctl("dev", "up", "--store", "postgres", "--hosts", "sim:2:cpu=4,mem_mb=4096,disk_mb=10000")
    stopped: list[int] = []
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        job = two_sleepers(ctl, tmp_path)
        for args in (("job", "status", job), ("host", "list"), ("respool", "get", "/DefaultResPool"), ("lag",)):
            done = ctl(*args)
            assert done.returncode == 0 and "note:" not in done.stderr, (args, done.stderr)
        pg = component(tmp_path, "postgres")
        store = f"PostgreSQL at 127.0.0.1:{pg['port']}"

        # Hung: every process of the server stopped; the kernel still accepts its connections.
        stopped = processes_under(pg["pid"])
        for pid in stopped:
            os.kill(pid, signal.SIGSTOP)
        figures = {}
        lines = []
        for args, needs in ((("job", "status", job), "job status"), (("task", "list", job), "task list")):
            done, figures[needs] = timed(ctl, *args)
            one_line_exit_5(done, f"the store ({store})", needs)
            assert figures[needs] < ANSWER_WITHIN_S, f"{args}: {figures[needs]:.1f}s"
            lines.append(done.stderr.strip())
        served = views_still_answer(ctl, store)
        done = ctl("job", "create", "/DefaultResPool", str(tmp_path / "job.yaml"))  # two_sleepers wrote it
        one_line_exit_5(done, f"the store ({store})", "job create")
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
        stopped = []
        status = answered(ctl, "job", "status", job, "--json", within_s=30)
        assert status.returncode == 0 and "note:" not in status.stderr, status.stderr
        print(f"\nstore hung: job status answered exit 5 in {figures['job status']:.1f}s, task list in "
              f"{figures['task list']:.1f}s; from the views: {', '.join(f'{k} {v:.1f}s' for k, v in served.items())}"
              f"\n  {lines[0]}\n  {lines[1]}")

        # Stopped: the server gone, its port refusing.
        PostgresServer(Path(pg["dir"]), pg["port"], pg["options"], pg["superuser"]).stop(keep=True)
        done, took = timed(ctl, "job", "status", job)
        one_line_exit_5(done, f"the store ({store})", "job status")
        assert took < ANSWER_WITHIN_S, f"job status: {took:.1f}s"
        served = views_still_answer(ctl, store)
        print(f"store stopped: job status answered exit 5 in {took:.1f}s; from the views: "
              f"{', '.join(f'{k} {v:.1f}s' for k, v in served.items())}\n  {done.stderr.strip()}")
        restarted = ctl("dev", "restart", "postgres")
        assert restarted.returncode == 0, restarted.stdout + restarted.stderr
        status = answered(ctl, "job", "status", job, "--json", within_s=30)
        assert status.returncode == 0 and json.loads(status.stdout)["job_id"] == job, status.stderr
        hosts = ctl("host", "list")
        assert hosts.returncode == 0 and "note:" not in hosts.stderr, hosts.stderr
    finally:
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        down = ctl("dev", "down")
    assert down.returncode == 0, down.stderr


@pytest.mark.alone  # its bound is a time
def test_the_only_launch_instance_killed_job_status_says_its_statuses_are_not_applied(tmp_path) -> None:
    ctl = ctl_in(stack_env(tmp_path), 120)
    up = ctl("dev", "up", "--hosts", "agent:2:cpu=2,mem_mb=4096,disk_mb=10000")
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        job = two_sleepers(ctl, tmp_path)
        deadline = time.monotonic() + 90
        while (status := json.loads(ctl("job", "status", job, "--json").stdout))["tasks"].get("RUNNING") != 2:
            assert time.monotonic() < deadline, status
            time.sleep(1)
        assert status["stage_problems"] == [] and status["silent_hosts"] == [], status

        os.kill(component(tmp_path, "launch")["pid"], signal.SIGKILL)
        killed = time.monotonic()
        seen = []
        while True:
            done = ctl("job", "status", job)
            assert done.returncode == 0, done.stderr
            said = [line for line in done.stdout.splitlines() if line.startswith("statuses not applied since")]
            if any(line.endswith(": launch has no live instance") for line in said):
                break
            seen.append((round(time.monotonic() - killed, 1), said))
            assert time.monotonic() - killed < 2 * ANSWER_WITHIN_S, seen
        told_s = time.monotonic() - killed
        assert re.search(r"^statuses not applied since \d\d:\d\d:\d\d: launch has no live instance$", done.stdout,
                         re.MULTILINE), done.stdout
        listed = ctl("task", "list", job)
        assert listed.returncode == 0 and "launch has no live instance" in listed.stdout, listed.stdout
        print(f"\nlaunch killed: job status said it {told_s:.1f}s later (before it: {seen}):\n{done.stdout}")
        assert told_s < ANSWER_WITHIN_S, seen
    finally:
        down = ctl("dev", "down")
    assert down.returncode == 0, down.stderr
