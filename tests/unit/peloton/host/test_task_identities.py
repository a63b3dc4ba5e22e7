"""A run holds nothing of its agent's: an environment built from nothing, a uid of its job's own,
a sandbox no other job may enter (peloton/host/environment.py, identities.py)."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import tempfile
import time
from pathlib import Path

import pytest

from peloton.host.driver import LaunchRequest
from peloton.host.environment import BASE_LANG, BASE_PATH, container_environment, task_environment
from peloton.host.identities import STATE_FILE, JobIdentities, NoIdentity, parse_uid_range, sysv_ipc_owners
from peloton.host.local import LocalDriver
from tests.builders.agents import poll_until, run_to_end, wait_for_file_text

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="only root switches users")
UIDS = "60521-60540"  # the tests' own, apart from the machine's default range


@pytest.fixture
def open_root():
    """A sandbox root whose directories above let any user through (pytest's own are root's alone),
    so runs reach their sandbox by its absolute path too ($HOME, $TMPDIR)."""
    top = Path(tempfile.mkdtemp(prefix="peloton-ids-"))
    os.chmod(top, 0o711)
    yield top / "sandboxes"
    shutil.rmtree(top, ignore_errors=True)


def launch(task_id: str, command: str, job_id: str = "job-1", **fields) -> LaunchRequest:
    instance = int(task_id.rsplit("-", 2)[1]) if task_id.count("-") >= 2 else 0
    return LaunchRequest(task_id=task_id, job_id=job_id, instance=instance, run_id=1, host_id="host-a",
                         command=command, shell=True, **fields)


def environ_of(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.split("\0") if "=" in line)


def test_a_runs_environment_is_its_jobs_own_and_its_identity_cannot_be_overridden(tmp_path: Path) -> None:
    request = launch("j-3-1", "true", job_id="j", environment=(("PATH", "/opt/bin"), ("APP", "1"),
                                                               ("PELOTON_JOB_ID", "someone-else")))
    env = task_environment(request, tmp_path / "j-3-1", "peloton-61184", ("1",))
    assert env == {"PATH": "/opt/bin", "HOME": str(tmp_path / "j-3-1"), "TMPDIR": str(tmp_path / "j-3-1" / "tmp"),
                   "LANG": "C.UTF-8", "USER": "peloton-61184", "LOGNAME": "peloton-61184", "APP": "1",
                   "PELOTON_JOB_ID": "j", "PELOTON_INSTANCE_ID": "3", "PELOTON_TASK_ID": "j-3-1",
                   "PELOTON_SANDBOX": str(tmp_path / "j-3-1"), "CUDA_VISIBLE_DEVICES": "1",
                   "NVIDIA_VISIBLE_DEVICES": "1"}
    inside = container_environment(request)
    assert inside["HOME"] == inside["PELOTON_SANDBOX"] == "/sandbox" and inside["PELOTON_JOB_ID"] == "j"


def test_nothing_of_the_agents_environment_reaches_a_run_or_its_health_check(tmp_path: Path, monkeypatch) -> None:
    """The agent's settings (its Kafka password, the log key, the store's address) stay its own:
    the run's /proc/self/environ and its health check's hold none of their values."""
    secrets = {"PELOTON_KAFKA_PASSWORD": "kafka-s3cret-value", "PELOTON_STORE": "postgresql://peloton:pw@db/x",
               "PELOTON_AGENT_LOGS_KEY": "log-key-value", "SOME_OTHER_SECRET": "other-s3cret"}
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    check = json.dumps({"type": "COMMAND", "command": "cat /proc/self/environ > e.tmp && mv e.tmp check-env",
                        "interval_s": 0.1,
                        "initial_interval_s": 0, "timeout_s": 5, "max_consecutive_failures": 3})
    driver = LocalDriver(tmp_path / "sandboxes", task_uids=UIDS, identities_dir=tmp_path / "ids")
    try:
        driver.launch([launch("e-0-1", "cat /proc/self/environ > env; sleep 0.5", job_id="e",
                              environment=(("APP", "mine"),), health_check=check)])
        run_to_end(driver, "e-0-1")
        sandbox = driver.sandbox("e-0-1")
        for name in ("env", "check-env"):
            env = environ_of((sandbox / name).read_text())
            assert env["APP"] == "mine" and env["PELOTON_TASK_ID"] == "e-0-1", env
            assert env["PATH"] == BASE_PATH
            leaked = [v for v in (*secrets.values(), *os.environ.values()) if len(v) > 3 and v in env.values()
                      and v not in (BASE_PATH, BASE_LANG, "mine")]
            assert not leaked and not {n for n in env if n in secrets}, (name, leaked, env)
            assert not any(n.startswith("PELOTON_") and n not in ("PELOTON_JOB_ID", "PELOTON_INSTANCE_ID",
                                                                   "PELOTON_TASK_ID", "PELOTON_SANDBOX")
                           for n in env), env
    finally:
        driver.close()


@as_root
def test_each_job_runs_as_a_uid_of_its_own_in_a_sandbox_no_other_job_may_enter(open_root: Path) -> None:
    driver = LocalDriver(open_root, task_uids=UIDS, identities_dir=open_root.parent / "ids")
    try:
        driver.launch([launch("a-0-1", "echo x > $TMPDIR/t; id -u > uid; sleep 30", job_id="a"),
                       launch("a-1-1", "id -u > uid", job_id="a"),
                       launch("b-0-1", "id -u > uid; sleep 30", job_id="b")])
        run_to_end(driver, "a-1-1")
        for task_id in ("a-0-1", "b-0-1"):
            wait_for_file_text(driver.sandbox(task_id) / "uid", "6")
        uid = {t: int((driver.sandbox(t) / "uid").read_text()) for t in ("a-0-1", "a-1-1", "b-0-1")}
        assert uid["a-0-1"] == uid["a-1-1"] != uid["b-0-1"], uid
        assert all(u in parse_uid_range(UIDS) for u in uid.values())
        for task_id in ("a-0-1", "b-0-1"):
            sandbox = driver.sandbox(task_id)
            info = sandbox.stat()
            assert (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)) == (uid[task_id], uid[task_id], 0o700)
            for name in ("stdout", "stderr"):
                out = (sandbox / name).stat()
                assert (out.st_uid, stat.S_IMODE(out.st_mode)) == (uid[task_id], 0o600), name
        assert (driver.sandbox("a-0-1") / "tmp" / "t").read_text() == "x\n"
        assert stat.S_IMODE((driver.sandbox("a-0-1") / "tmp" / "t").stat().st_mode) == 0o600  # umask 077
        # Job b's run tries job a's: its process (signal), its sandbox and its environment.
        victim = _executor_pid(driver.sandbox("a-0-1"))
        attack = (f"kill -9 {victim} 2>> tried; ls {driver.sandbox('a-0-1')} 2>> tried; "
                  f"cat /proc/{victim}/environ 2>> tried; cat {driver.sandbox('a-0-1')}/uid 2>> tried; "
                  "echo done >> tried")
        driver.launch([launch("b-1-1", attack, job_id="b")])
        run_to_end(driver, "b-1-1")
        tried = (driver.sandbox("b-1-1") / "tried").read_text()
        assert tried.count("Operation not permitted") == 1 and tried.count("Permission denied") == 3, tried
        assert os.kill(victim, 0) is None  # still alive
    finally:
        driver.close()


@as_root
def test_a_job_that_left_gives_its_uid_back_and_a_uid_with_a_file_left_is_not_given_again(tmp_path: Path) -> None:
    root, shared = tmp_path / "sandboxes", tmp_path / "shared-tmp"
    shared.mkdir(mode=0o1777)
    os.chmod(shared, 0o1777)
    root.mkdir()
    ids = JobIdentities(range(60501, 60503), tmp_path / "state", root, linger_s=0, shared_dirs=[str(shared)])
    first, second = ids.take("a"), ids.take("b")
    assert (first.uid, second.uid) == (60501, 60502) and ids.take("a") == first
    with pytest.raises(NoIdentity, match="no task identity is free on this host: 2 of the 2 uids"):
        ids.take("c")
    (root / "a-0-1").mkdir()
    (root / "a-0-1" / "out").write_text("a's")
    for path in (root / "a-0-1", root / "a-0-1" / "out"):
        os.lchown(path, first.uid, first.gid)
    left = shared / "left-by-b"
    left.write_text("b's")
    os.chown(left, second.uid, second.gid)
    assert sorted(ids.release_idle()) == [("a", 60501), ("b", 60502)]
    assert (root / "a-0-1").stat().st_uid == 0 and (root / "a-0-1" / "out").stat().st_uid == 0  # root's now
    assert ids.take("c").uid == 60501  # b's uid still has a file of b's in the shared directory
    with pytest.raises(NoIdentity, match="still have a process or a file of their last job's"):
        ids.take("d")
    left.unlink()
    assert ids.take("d").uid == 60502
    # The allotment is the machine's, kept in a file every agent of it reads under a lock.
    assert set(json.loads((tmp_path / "state" / STATE_FILE).read_text())["held"]) == {"c", "d"}
    assert JobIdentities(range(60501, 60503), tmp_path / "state", tmp_path / "elsewhere").holder(60502) == "d"


@as_root
def test_a_uid_a_process_still_runs_as_is_kept(tmp_path: Path) -> None:
    driver = LocalDriver(tmp_path / "sandboxes", task_uids=UIDS, identities_dir=tmp_path / "ids")
    ids = driver._launcher._identities
    ids.linger_s = 0
    try:
        driver.launch([launch("k-0-1", "sleep 30", job_id="k")])
        poll_until(driver, lambda seen: any(u.state == "TASK_RUNNING" for u in seen))
        uid = ids.take("k").uid
        assert ids.release_idle() == [] and ids.holder(uid) == "k"
        driver.kill(["k-0-1"])
        run_to_end(driver, "k-0-1")
        deadline = time.monotonic() + 5
        while ids.release_idle() == [] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ids.holder(uid) is None and driver.sandbox("k-0-1").stat().st_uid == 0
    finally:
        driver.close()


def test_a_lost_allotment_is_made_again_from_the_sandboxes(tmp_path: Path) -> None:
    root, state = tmp_path / "sandboxes", tmp_path / "state"
    (root / "job-x-0-1").mkdir(parents=True)
    if os.geteuid() == 0:
        os.lchown(root / "job-x-0-1", 60512, 60512)
        ids = JobIdentities(range(60511, 60520), state, root)
        assert ids.holder(60512) == "job-x" and ids.take("other").uid == 60513
    (state / STATE_FILE).write_text("garbled")
    assert JobIdentities(range(60511, 60520), state, root).take("y").uid in range(60511, 60520)


def test_uid_ranges_are_read_strictly() -> None:
    assert parse_uid_range("61184-65519") == range(61184, 65520) and parse_uid_range("") is None
    for bad in ("0-10", "5", "10-5", "a-b"):
        with pytest.raises(ValueError, match="PELOTON_TASK_UIDS"):
            parse_uid_range(bad)
    assert isinstance(sysv_ipc_owners(), set)


def _executor_pid(sandbox: Path) -> int:
    deadline = time.monotonic() + 5
    while not (sandbox / ".peloton-pid").exists():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    return json.loads((sandbox / ".peloton-pid").read_text())["pgid"]


def test_a_job_naming_a_user_the_cluster_does_not_allow_is_refused_at_submission() -> None:
    from peloton.config import Settings
    from pelotonctl.admin import UserError, validate_job

    job = ("name: j\ninstancecount: 1\ndefaultconfig:\n  resource: {{cpulimit: 0.1}}\n"
           "  command: {{value: 'true', user: {user}}}\n")
    for allowed, user, refused in (("", "root", True), ("*", "root", True), ("bin", "daemon", True),
                                   ("root", "root", False), ("*", "daemon", False), ("", "nobody", False)):
        settings = Settings(task_users=allowed, task_user="nobody")
        if refused:
            with pytest.raises(UserError, match=rf"defaultconfig.command.user: '{user}' is not allowed in this "
                                                rf"cluster \(PELOTON_TASK_USERS='{re.escape(allowed)}'"):
                validate_job(job.format(user=user), settings)
        else:
            assert validate_job(job.format(user=user), settings).tasks[0].command.user == user
