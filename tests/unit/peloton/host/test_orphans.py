"""Orphans: tasks left running by a launch process that died without close(), found by their pid
files and killed by the next driver or the next owner of their host shard."""

from __future__ import annotations

import contextlib
import gc
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from peloton.config import Settings
from peloton.host.local import LocalDriver
from peloton.host.orphans import kill_orphan, kill_orphans
from peloton.host.pidfiles import PID_FILE
from peloton.host.sim import SimDriver
from tests.builders.agents import FakeClock, boot_id, live_members, request, run_to_end, wait_for_file_text

# --- orphans: tasks left running by a launch process that died without close() ---------------

needs_proc = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")


def _start_time(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])


def _reap_if_ours(pid: int) -> None:
    """The test process may still be the parent of a dead task leader: do not leave a zombie."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def _orphan(root: Path, task_id: str, command: str) -> tuple[int, int]:
    """Start `command` (which writes its background child's pid to ./child) with a LocalDriver,
    then drop the driver without close(), as when the launch process is SIGKILLed.
    Returns (process group id, child pid)."""
    driver = LocalDriver(root)
    driver.launch([request(task_id, command)])
    sandbox = driver.sandbox(task_id)
    wait_for_file_text(sandbox / "child", "\n")
    child = int((sandbox / "child").read_text())
    pgid = json.loads((sandbox / PID_FILE).read_text())["pgid"]
    del driver
    gc.collect()
    return pgid, child


@needs_proc
def test_the_pid_file_names_the_task_group_and_its_start_time_and_goes_when_the_task_ends(
    local: LocalDriver,
) -> None:
    local.launch([request("task-1", "echo ready; sleep 30", kill_grace_seconds=0.2)])
    wait_for_file_text(local.sandbox("task-1") / "stdout", "ready")
    record = json.loads((local.sandbox("task-1") / PID_FILE).read_text())
    assert record["pgid"] in live_members(record["pgid"])
    assert record["start_time"] == _start_time(record["pgid"])
    assert record["boot_id"] == boot_id()
    local.kill(["task-1"])
    run_to_end(local, "task-1")
    assert not (local.sandbox("task-1") / PID_FILE).exists()
    assert local.reap_orphan("task-1") is None


@needs_proc
@pytest.mark.filterwarnings("ignore::ResourceWarning")  # the dropped driver's Popen is still running
def test_an_orphaned_task_and_the_child_it_spawned_are_killed_by_the_next_driver(tmp_path: Path) -> None:
    root = tmp_path / "sandboxes"
    pgid, child = _orphan(root, "task-1", "sleep 60 & echo $! > child; exec sleep 60")
    assert {pgid, child} <= set(live_members(pgid))  # they outlived their driver

    next_owner = LocalDriver(root)
    what = next_owner.reap_orphan("task-1")

    assert what == f"orphan process group {pgid} killed (SIGTERM)"
    assert live_members(pgid) == []
    assert next_owner.reap_orphan("task-1") is None  # nothing runs any more
    assert next_owner.active() == set()
    next_owner.close()
    _reap_if_ours(pgid)


@needs_proc
@pytest.mark.filterwarnings("ignore::ResourceWarning")
def test_an_orphan_ignoring_sigterm_is_killed_with_sigkill_after_the_grace(tmp_path: Path) -> None:
    root = tmp_path / "sandboxes"
    pgid, child = _orphan(root, "task-1", "trap '' TERM; sleep 60 & echo $! > child; exec sleep 60")
    started = time.monotonic()

    what = kill_orphan(root, "task-1", grace_seconds=0.2)

    assert what == f"orphan process group {pgid} killed (SIGKILL after 0.2s grace)"
    assert time.monotonic() - started < 2.0
    assert live_members(pgid) == []
    _reap_if_ours(pgid)


@needs_proc
@pytest.mark.filterwarnings("ignore::ResourceWarning")
def test_leftovers_of_an_orphan_whose_main_process_ended_are_killed_too(tmp_path: Path) -> None:
    root = tmp_path / "sandboxes"
    pgid, child = _orphan(root, "task-1", "sleep 60 & echo $! > child")
    _reap_if_ours(pgid)  # the main process exits and is reaped (by init, once its parent is gone)
    assert live_members(pgid) == [child]

    assert kill_orphan(root, "task-1") == f"orphan process group {pgid} killed (SIGTERM)"
    assert live_members(pgid) == []


@needs_proc
def test_a_pid_file_naming_a_process_with_another_start_time_kills_nothing(tmp_path: Path) -> None:
    sandbox = tmp_path / "task-1"
    sandbox.mkdir()
    stranger = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        record = {"pgid": stranger.pid, "start_time": _start_time(stranger.pid) + 1, "boot_id": boot_id()}
        (sandbox / PID_FILE).write_text(json.dumps(record))
        assert kill_orphan(tmp_path, "task-1", grace_seconds=0.1) is None
        assert stranger.poll() is None  # a reused pid: left alone

        record["boot_id"] = "another-boot"  # the right process, but the file is from another boot
        record["start_time"] -= 1
        (sandbox / PID_FILE).write_text(json.dumps(record))
        assert kill_orphan(tmp_path, "task-1", grace_seconds=0.1) is None
        assert stranger.poll() is None

        record["boot_id"] = boot_id()  # the same process: killed
        (sandbox / PID_FILE).write_text(json.dumps(record))
        assert kill_orphan(tmp_path, "task-1", grace_seconds=0.1) == (
            f"orphan process group {stranger.pid} killed (SIGTERM)"
        )
        assert stranger.wait(timeout=5) == -signal.SIGTERM
    finally:
        stranger.kill()
        stranger.wait()


@pytest.mark.parametrize("content", [
    None, "", "garbage", "12 34", "{}", '{"pgid": "12", "start_time": 3}', '{"pgid": 1, "start_time": 3}',
    '{"pgid": 12, "start_time": null}', "[1, 2]", '{"pgid": 12.5, "start_time": 3}', b"\xff\xfe",
])
def test_a_missing_or_garbled_pid_file_kills_nothing_and_does_not_raise(tmp_path: Path, content) -> None:
    sandbox = tmp_path / "task-1"
    sandbox.mkdir()
    if isinstance(content, bytes):
        (sandbox / PID_FILE).write_bytes(content)
    elif content is not None:
        (sandbox / PID_FILE).write_text(content)
    assert kill_orphan(tmp_path, "task-1") is None
    assert LocalDriver(tmp_path).reap_orphans(["task-1"]) == {}


def test_bad_task_ids_and_missing_sandboxes_kill_nothing(tmp_path: Path) -> None:
    assert kill_orphans(tmp_path, ["", "..", "a/b", "no-such-task"], grace_seconds=float("nan")) == {}
    assert kill_orphan(tmp_path / "no-such-root", "task-1") is None


def test_the_sim_driver_has_no_orphans_to_reap() -> None:
    driver = SimDriver(task_seconds=5, clock=FakeClock())
    driver.launch([request("t1")])
    assert driver.reap_orphans(["t1", "t2"]) == {}
    assert driver.reap_orphan("t2") is None


# --- the next owner of a host shard (LaunchStage.on_assign) ----------------------------------


class _Emitted:
    def __init__(self) -> None:
        self.records: list[tuple[str, str, str, dict]] = []

    def emit(self, topic: str, key: str, schema: str, value: dict, partition: int | None = None) -> None:
        self.records.append((topic, key, schema, value))


@needs_proc
@pytest.mark.filterwarnings("ignore::ResourceWarning")
def test_the_next_owner_kills_an_orphan_before_reporting_it_lost_and_says_so(tmp_path: Path) -> None:
    from peloton.store import Launch, open_store
    from peloton.topics import Catalogue
    from stages.launch.agents.remote import RemoteDriver
    from stages.launch.inventory import parse_inventory
    from stages.launch.stage import LaunchStage

    root = tmp_path / "sandboxes"
    pgid, child = _orphan(root, "job-1-0-1", "sleep 60 & echo $! > child; exec sleep 60")
    store = open_store(tmp_path / "peloton.db")
    try:
        store.claim_launches([Launch("job-1-0-1", "job-1", 0, 1, "local-0", 1, 1, 1, 0, 5)])
        stage = LaunchStage(store, drivers={"local": LocalDriver(root), "sim": SimDriver()})
        stage.book.inventory = {h.host_id: h for h in parse_inventory("local:1", 1)}
        stage.emit = _Emitted()
        stage.catalogue = Catalogue()
        stage.settings = Settings()
        stage.remote = RemoteDriver(lambda host_id, command: None)

        stage.on_assign([("placements", 0)])

        (lost,) = [v for topic, _, _, v in stage.emit.records if topic == "task-status"]
        assert (lost["task_id"], lost["state"], lost["reason"]) == (
            "job-1-0-1", "TASK_LOST", "REASON_AGENT_DISCONNECTED")
        assert lost["message"] == (
            f"its host manager instance went away; orphan process group {pgid} killed (SIGTERM)")
        assert live_members(pgid) == []
        assert store.active_launches(["local-0"]) == []
        stage.close()
    finally:
        store.close()
        _reap_if_ours(pgid)
