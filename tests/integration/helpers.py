"""Helpers several integration test modules share: a dev stack's environment and its pelotonctl,
keys that land one on each partition, the partitions a log says were assigned, a job's live
processes, a raw job command, a job of sleeping tasks, and a wait until something holds."""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from peloton.runtime import now_ms
from peloton.topics import partition_for


def stack_env(home, **extra: str) -> dict[str, str]:
    """This environment without its PELOTON_ settings, a stack of its own in `home`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PELOTON_")}
    env.update(PELOTON_HOME=str(home), PELOTON_SESSION_TIMEOUT_MS="2000", **extra)
    return env


def ctl_in(env: dict[str, str], timeout: float):
    """Runs `pelotonctl ARGS...` in `env`."""
    def ctl(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "pelotonctl", *args], env=env, capture_output=True,
                              text=True, timeout=timeout)
    return ctl


def answered(ctl, *args: str, within_s: float = 30.0) -> subprocess.CompletedProcess:
    """ctl(*args), asked again while it answers 503 (exit 5): after a store's server restarts, the
    API's connections to it are made again."""
    deadline = time.monotonic() + within_s
    while True:
        done = ctl(*args)
        if done.returncode != 5 or time.monotonic() > deadline:
            return done
        time.sleep(1)


def one_key_per_partition(prefix: str, partitions: int = 4) -> list[str]:
    keys: dict[int, str] = {}
    for i in itertools.count():
        keys.setdefault(partition_for(f"{prefix}{i}", partitions), f"{prefix}{i}")
        if len(keys) == partitions:
            return [keys[p] for p in range(partitions)]


def assigned_partitions(log_text: str) -> list[str]:
    return re.findall(r"assigned (\[.+\])", log_text)


def processes_of(job_id: str) -> list[int]:
    """Pids of live processes started for the job's tasks (they carry PELOTON_JOB_ID)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if f"PELOTON_JOB_ID={job_id}".encode() in Path(f"/proc/{pid}/environ").read_bytes():
                found.append(int(pid))
        except OSError:
            continue
    return found


def command(job_id: str, config: str | None, pool: str = "/test", kind: str = "CREATE") -> dict:
    return {"command_id": uuid.uuid4().hex, "kind": kind, "job_id": job_id, "pool": pool, "config": config,
            "requested_by": "test", "timestamp_ms": now_ms()}


SLEEPERS = """
name: sleepers
instancecount: {count}
defaultconfig:
  resource: {{cpulimit: {cpu}, memlimitmb: 8, disklimitmb: 1}}
  command: {{shell: true, value: 'sleep {seconds}'}}
"""


def sleepers(count: int, seconds: float, cpu: float = 0.1) -> str:
    """A job of `count` tasks that each sleep `seconds`."""
    return SLEEPERS.format(count=count, seconds=seconds, cpu=cpu)


def wait_until(what: str, check: Callable[[], Any], timeout: float, every: float = 0.5,
               detail: Callable[[], str] = lambda: "") -> Any:
    """check() every `every` seconds until it gives something true, which is returned; past
    `timeout`, an AssertionError naming `what` and `detail()` (read then: logs, processes)."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} within {timeout}s{detail()}")
        time.sleep(every)
