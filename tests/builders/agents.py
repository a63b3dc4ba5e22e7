"""Agent drivers' and host agents' test helpers: launch requests, polling a driver until its tasks
end, a fake clock, a process group's live members, and a fake Kafka message and producer."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from peloton.host.driver import AgentDriver, LaunchRequest, TaskUpdate


def request(task_id: str, command: str = "true", shell: bool = True, **fields) -> LaunchRequest:
    return LaunchRequest(
        task_id=task_id, job_id="job-1", instance=0, run_id=1, host_id="host-a",
        command=command, shell=shell, **fields,
    )


def poll_until(
    driver: AgentDriver, done: Callable[[list[TaskUpdate]], bool], timeout: float = 5.0
) -> list[TaskUpdate]:
    """Poll until `done(all updates so far)` holds; fail with what was seen at the deadline."""
    deadline = time.monotonic() + timeout
    seen: list[TaskUpdate] = []
    while True:
        seen.extend(driver.poll())
        if done(seen):
            return seen
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s; updates so far: {seen}")
        time.sleep(0.005)


def terminal_for(*task_ids: str) -> Callable[[list[TaskUpdate]], bool]:
    return lambda seen: set(task_ids) <= {u.task_id for u in seen if u.terminal}


def states(updates: list[TaskUpdate], task_id: str) -> list[str]:
    return [u.state for u in updates if u.task_id == task_id]


def run_to_end(driver: AgentDriver, *task_ids: str, timeout: float = 5.0) -> list[TaskUpdate]:
    return poll_until(driver, terminal_for(*task_ids), timeout)


def wait_for_file_text(path: Path, text: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not (path.exists() and text in path.read_text()):
        assert time.monotonic() < deadline, f"{path} never contained {text!r}"
        time.sleep(0.005)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def live_members(pgid: int) -> list[int]:
    """Pids in process group `pgid` that are not zombies (Linux /proc)."""
    live = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # exited meanwhile
        # Fields after "(comm)": state, ppid, pgrp, ...
        state, _ppid, pgrp = stat.rsplit(")", 1)[1].split()[:3]
        if int(pgrp) == pgid and state != "Z":
            live.append(int(entry.name))
    return live


def boot_id() -> str:
    return Path("/proc/sys/kernel/random/boot_id").read_text().strip()


class Msg:
    def __init__(self, value: bytes, offset: int = 0, partition: int = 0) -> None:
        self._value, self._offset, self._partition = value, offset, partition

    def value(self) -> bytes:
        return self._value

    def offset(self) -> int:
        return self._offset

    def partition(self) -> int:
        return self._partition

    def error(self):
        return None


class SilentProducer:
    """Takes reports and never answers them: the Kafka client seen stuck after a whole-cluster
    restart (neither delivered nor timed out). `answering` ones acknowledge at each poll, and
    `failing` ones fail each report at each poll (another client seen after such a restart: every
    report timed out, round after round)."""

    def __init__(self, answering: bool = False, failing: bool = False) -> None:
        self.answering = answering or failing
        self.error = "Local: Message timed out" if failing else None
        self.held: list = []
        self.purged = False

    def produce(self, topic, key=None, value=None, partition=None, on_delivery=None) -> None:
        self.held.append(on_delivery)

    def poll(self, timeout: float = 0) -> int:
        if not self.answering:
            return 0
        answered, self.held = self.held, []
        for callback in answered:
            callback(self.error, None)
        return len(answered)

    def purge(self, *args, **kwargs) -> None:
        self.purged = True

    def flush(self, timeout: float = 0) -> int:
        return len(self.held)

    def __len__(self) -> int:
        return len(self.held)
