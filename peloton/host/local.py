"""LocalDriver: runs each task as a real subprocess on this machine.

Each task gets a sandbox directory <sandbox_root>/<task_id>/ holding its stdout and stderr,
and its own process group (start_new_session=True) so that signals reach its children too.

Exit mapping (Mesos command-executor style):
  exit 0                              -> TASK_FINISHED, exit_code 0
  exit n != 0                         -> TASK_FAILED, exit_code n
  killed by a signal we did not send  -> TASK_FAILED, signal set, exit_code None (not 128+n:
                                         the process never produced an exit code)
  after kill()                        -> TASK_KILLED, signal = the signal that ended it (or
                                         the last one we sent if the command exited by itself)
  cannot be started                   -> TASK_FAILED, exit_code None, message = the OS error
When a task's main process ends, whatever is left in its process group is SIGKILLed, as
Mesos does when it destroys a task's container; that keeps background children from leaking.

Orphans: a task's processes outlive the driver if the launch process dies without close()
(SIGKILL). So that the next owner of the host can stop them, each started task gets a pid file
<sandbox>/.peloton-pid (written atomically, removed once the task is reaped) naming its process
group and identifying its leader beyond the pid: the leader's start time (/proc/<pid>/stat
field 22) and the boot id. kill_orphan() / LocalDriver.reap_orphans() use it to find and stop
the group, never touching a process that merely reuses the pid. Linux /proc is needed to verify
a process; without it nothing is ever killed as an orphan.

Executor: the process this driver starts for a task is its executor (executor.py), the group's
leader, which starts the command, waits for it, writes how it ended to <sandbox>/.peloton-exit and
ends the same way; so the next agent of a host still learns how a run it adopted ended.

Isolation (host agents as root): a task runs in a cgroup of its own (cgroups.py), entered before
it runs anything (the gate); a task that names an image runs in it through an OCI runtime
(containers.py); GPUs are handed out per device; a sandbox past its disk limit is killed.

No threads: poll() checks the few hundred local children with a non-blocking waitid each.
"""

from __future__ import annotations

import json
import logging
import math
import os
import pwd
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from stat import S_ISREG

from peloton.model.health import HEALTH_UNKNOWN, HealthCheck
from peloton.model.users import allowed_names
from peloton.model.states import (REASON_AGENT_FENCED, REASON_CONTAINER_LAUNCH_FAILED,
                                   REASON_CONTAINER_LIMITATION_DISK, REASON_CONTAINER_LIMITATION_MEMORY)
from peloton.runtime.sweep import Sweep

from .driver import (
    REASON_COMMAND_EXECUTOR_FAILED,
    REASON_HEALTH_CHECK_STATUS_UPDATED,
    REASON_TASK_UNHEALTHY,
    TASK_FAILED,
    TASK_FINISHED,
    TASK_KILLED,
    TASK_LOST,
    TASK_RUNNING,
    TASK_STARTING,
    AgentDriver,
    LaunchRequest,
    TaskUpdate,
    exit_update,
    now_ms,
    update_for,
)
from .cgroups import Hierarchy, Limits, TaskCgroup, Usage
from .containers import ContainerRuntime, ImageError
from .environment import BASE_PATH, TMP_DIR, container_environment, task_environment
from .executor import FENCED, LEASE_FILE, NOT_STARTED, STATUS_FILE
from .devices import GpuAllotment
from .health import HealthChecks
from .identities import Account, JobIdentities, own_tree, parse_uid_range

log = logging.getLogger("peloton.agent")

_CLOSE_POLL_SECONDS = 0.01
# How often an isolated task's sandbox is measured against its diskLimitMb (a watcher, as Mesos'
# posix/disk isolator does where no quota is available).
DISK_CHECK_SECONDS = 2.0

PID_FILE = ".peloton-pid"  # in the task's sandbox; tasks must leave it alone
SANDBOX_GC_SECONDS = 60.0  # how often sandboxes past their keep are looked for
SANDBOX_GC_BATCH = 1_000  # and how many one look removes at most (a whole batch: the next poll looks again)
IDENTITY_SWEEP_S = 5.0  # how often jobs with no run left here are looked for, to release their uids
# A run's files are its job's alone: its sandbox 0700, what it makes 0600 unless it says otherwise.
TASK_UMASK = 0o077
DEFAULT_ORPHAN_GRACE_SECONDS = 2.0  # SIGTERM -> SIGKILL for orphans (the task spec is not at hand)
MAX_ORPHAN_GRACE_SECONDS = 10.0  # the new owner blocks while it waits, so the grace is capped
_ORPHAN_SIGKILL_WAIT_SECONDS = 1.0  # how long to wait for a SIGKILLed group to disappear
_ORPHAN_POLL_SECONDS = 0.02


@dataclass(slots=True, eq=False)
class _LocalTask:
    request: LaunchRequest
    proc: subprocess.Popen[bytes]
    kill_sent_at: float | None = None  # time.monotonic() of our SIGTERM
    kill_signal: int | None = None  # last signal we sent; None if we never killed it
    unhealthy: str = ""  # why its agent killed it: its health check failed (it ends TASK_FAILED)
    cgroup: TaskCgroup | None = None  # where the kernel holds it to its limits (cgroups.py)
    gpus: tuple[str, ...] = ()  # the GPU devices it holds
    over: str = ""  # the limit its agent killed it for (disk), said in its end
    runtime: ContainerRuntime | None = None  # the OCI runtime it runs in, when it names an image

    @property
    def pid(self) -> int:
        return self.proc.pid  # also the process group id (start_new_session)


class LocalDriver(AgentDriver):
    def __init__(
        self,
        sandbox_root: str | Path,
        close_timeout: float = 2.0,
        orphan_grace_seconds: float = DEFAULT_ORPHAN_GRACE_SECONDS,
        user: str = "",
        allowed_users: str = "",
        isolation: Hierarchy | None = None,
        pids_max: int = 0,
        gpus: Sequence[str] = (),
        gpu_dev: Path = Path("/dev"),
        runtime: ContainerRuntime | None = None,
        sandbox_keep_seconds: float = 0.0,
        task_uids: str = "",
        identities_dir: str | Path = "/var/lib/peloton",
    ) -> None:
        self._root = Path(sandbox_root)
        self._sandbox_keep = sandbox_keep_seconds  # 0: sandboxes stay (see collect_sandboxes)
        self._sandbox_sweep = Sweep(SANDBOX_GC_SECONDS, SANDBOX_GC_BATCH)
        self._runtime = runtime  # None: tasks that name an image fail to launch here
        # Each host's GPU devices: a task asking for N gets N that no running task holds, and may
        # open those alone (devices.py); given back at its end.
        self._gpus = GpuAllotment(tuple(gpus), Path(gpu_dev))
        self._adopted_gpus: dict[str, tuple[str, tuple[str, ...]]] = {}  # task id -> host, GPUs of an adopted run
        self._disk_checked = 0.0
        self._isolation = isolation  # None: tasks are bare process groups, their resources only counted
        self._pids_max = pids_max
        self._root.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:  # runs enter their own sandboxes, and may list none
            os.chmod(self._root, 0o711)
        self._user = task_user(user)
        self._allowed = UserPolicy(allowed_users, default=user)
        # Each job's runs under a uid of its own where this process may switch users; else every
        # run as PELOTON_TASK_USER (or as this process, not root).
        uids = parse_uid_range(task_uids)
        self._identities = (JobIdentities(uids, Path(identities_dir), self._root)
                            if uids is not None and os.geteuid() == 0 else None)
        self._identity_sweep = 0.0
        if os.geteuid() == 0 and (self._identities is not None or self._user is not None):
            closed = [str(p) for p in self._root.resolve().parents if not os.stat(p).st_mode & 0o001]
            if closed:
                log.warning("runs reach their sandboxes by relative paths only: %s let no other user through "
                            "(mode o+x), so a run's $HOME, $TMPDIR and $PELOTON_SANDBOX are closed to it",
                            ", ".join(closed))
        self._close_timeout = close_timeout
        self._orphan_grace = orphan_grace_seconds
        self._tasks: dict[str, _LocalTask] = {}
        self._handed: set[str] = set()  # runs left going for the next agent (hand_over)
        self._adopted: dict[str, LaunchRequest] = {}  # runs of an earlier driver whose health is checked here
        self._outbox: list[TaskUpdate] = []
        self._health = HealthChecks()
        self._closed = False

    def sandbox(self, task_id: str) -> Path:
        """The task's sandbox directory; task ids must be plain names, not paths."""
        return sandbox_path(self._root, task_id)

    def describe_accounts(self) -> str:
        """Who runs run as here, for the agent's log."""
        if self._identities is not None:
            return self._identities.describe()
        if self._user is not None:
            return f"every run as {self._user.pw_name} (PELOTON_TASK_USER)"
        return "every run as this agent's own user (it is not root, so it cannot switch users)"

    def launch(self, requests: Sequence[LaunchRequest]) -> None:
        if self._closed:
            raise RuntimeError("LocalDriver is closed")
        for request in requests:
            if request.task_id not in self._tasks:
                self._outbox.extend(self._start(request))

    def kill(self, task_ids: Sequence[str]) -> None:
        now = time.monotonic()
        for task_id in task_ids:
            task = self._tasks.get(task_id)
            # A task that already exited keeps its real outcome; poll() reports it.
            if task is None or task.kill_signal is not None or _exited(task.proc):
                continue
            _signal(task, signal.SIGTERM)
            task.kill_sent_at = now

    def kill_now(self, task_ids: Sequence[str]) -> None:
        for task_id in task_ids:
            task = self._tasks.get(task_id)
            if task is not None and not _exited(task.proc):
                _signal(task, signal.SIGKILL)

    def poll(self) -> list[TaskUpdate]:
        updates, self._outbox = self._outbox, []
        updates.extend(self._step(time.monotonic()))
        return updates

    def active(self) -> set[str]:
        return set(self._tasks)

    def reap_orphans(self, task_ids: Sequence[str]) -> dict[str, str]:
        """Stop what still runs of tasks an earlier driver on this machine started (see kill_orphans).

        Tasks this driver runs itself are never touched.
        """
        theirs = [t for t in task_ids if t not in self._tasks]
        return kill_orphans(self._root, theirs, self._orphan_grace)

    def orphan_ending(self, task_id: str, host_id: str) -> TaskUpdate | None:
        """How a run an earlier driver started ended (one adopted, or one that ended while no agent
        watched), from its executor's status file and what its cgroup counted, if still there (read
        before clear_leftovers). None when its executor wrote nothing: it was SIGKILLed (by a
        fence, or by hand), or the run started before executors."""
        try:
            status = read_status(self.sandbox(task_id))
        except ValueError:  # not a name a sandbox can have
            return None
        if status is None:
            return None
        usage = None
        if self._isolation is not None:
            cgroup = self._isolation.task(task_id)
            if not cgroup.directories()[0].is_dir() and self._runtime is not None:
                cgroup = self._isolation.at(self._runtime.cgroups_path(task_id))
            if cgroup.directories()[0].is_dir():
                usage = cgroup.usage()
        return orphan_update(task_id, host_id, status, usage)

    def hand_over(self, lease_until: float, adopted: Sequence[str] = ()) -> list[str]:
        """Leaves the runs, its own and those `adopted` from an earlier driver, to the next agent of
        this host (this one restarts): each goes on under its executor, told to kill it at
        `lease_until` (seconds since the epoch) unless an agent has taken it over by then. This
        driver forgets them (its close() ends nothing of theirs, cgroups included); a run whose
        executor cannot be told is left to close(), and an adopted one to its caller. The task ids
        handed over."""
        handed = []
        for task_id in list(self._tasks):
            if tell_executor(self.sandbox(task_id), lease_until):
                task = self._tasks.pop(task_id)
                self._health.forget(task_id)
                self._gpus.give_back(task.request.host_id, task.gpus)
                handed.append(task_id)
        handed += [t for t in adopted if tell_executor(self.sandbox(t), lease_until)]
        self._handed.update(handed)
        return handed

    def watch_adopted(self, runs: Sequence[tuple[LaunchRequest, float]]) -> None:
        """Health checks for runs adopted from an earlier driver (which this one does not wait
        for), each with when it started (seconds since the epoch): their news comes from poll(),
        and a run whose check gives up is killed and reported failed there, as one of its own."""
        for request, started in runs:
            try:  # what an earlier agent saved, under settings that may have changed since
                check = HealthCheck.from_json(request.health_check)
                if check is None:
                    continue
                env, as_user = self._check_context(request)
            except (ValueError, TypeError, KeyError, OSError) as exc:
                log.warning("the health check of adopted run %s cannot go on: %s", request.task_id, exc)
                continue
            self._adopted[request.task_id] = request
            since = time.monotonic() - max(0.0, time.time() - started)  # its start, on this clock
            self._health.watch(request.task_id, check, self.sandbox(request.task_id), env, since, as_user)

    def let_go(self, task_ids: Sequence[str]) -> None:
        """Adopted runs that ended or were killed: their checks stop, their GPUs are free again."""
        for task_id in task_ids:
            if self._adopted.pop(task_id, None) is not None:
                self._health.forget(task_id)
            host_id, gpus = self._adopted_gpus.pop(task_id, ("", ()))
            self._gpus.give_back(host_id, gpus)

    def hold_gpus(self, runs: dict[str, tuple[str, tuple[str, ...]]]) -> None:
        """Runs adopted from an earlier driver keep their GPUs (task id -> host, GPUs): none is
        given to another run until let_go()."""
        for task_id, (host_id, gpus) in runs.items():
            if gpus:
                self._gpus.hold(host_id, gpus)
                self._adopted_gpus[task_id] = (host_id, gpus)

    def gpus_of(self, task_id: str) -> tuple[str, ...]:
        """The GPUs a run of this driver holds (for its agent's record of it)."""
        task = self._tasks.get(task_id)
        return task.gpus if task is not None else ()

    def take_over(self, task_ids: Sequence[str]) -> None:
        """Runs an earlier agent handed over, adopted: their executors need not fence them any more."""
        for task_id in task_ids:
            tell_executor(self.sandbox(task_id), None)

    def clear_leftovers(self, keep: set[str]) -> list[str]:
        """The cgroups (and containers) of runs no driver holds any more: one that ended while its
        agent was away, or an orphan killed, kept its cgroup, and nothing else removes it (an
        agent SIGKILLed in tests left hundreds). Whatever is still in one is killed first: this
        agent's parent cgroup holds only runs it started, and one it does not track must not run
        on unseen (the host manager has counted it lost). Mesos' agent destroys its unknown
        containers at recovery alike."""
        if self._isolation is None:
            return []
        keep = keep | set(self._tasks) | self._handed
        cleared = self._isolation.leftovers(keep)
        for name in cleared:
            self._isolation.task(name).destroy(wait_s=0.2)
        if self._runtime is not None:
            for name in self._isolation.leftovers(keep, under=self._runtime.cgroup_parent):
                self._runtime.delete(name)  # its container's state, and its cgroup with it
                self._isolation.at(self._runtime.cgroups_path(name)).destroy(wait_s=0.2)
                cleared.append(name)
        return cleared

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.kill(list(self._tasks))
        deadline = time.monotonic() + self._close_timeout
        while self._tasks and time.monotonic() < deadline:
            time.sleep(_CLOSE_POLL_SECONDS)
            self._outbox.extend(self._step(time.monotonic()))
        left = list(self._tasks.values())
        for task in left:
            _signal(task, signal.SIGKILL)
            self._outbox.append(self._reap(task))
        kill_escapees({task.request.task_id for task in left})
        self._health.close()
        self.clear_leftovers(set())
        if self._isolation is not None:
            if self._runtime is not None:  # the runtime leaves its containers' parent cgroups behind
                self._isolation.at(self._runtime.cgroup_parent).destroy(wait_s=0)
            self._isolation.close()

    def _start(self, request: LaunchRequest) -> list[TaskUpdate]:
        wanted = math.ceil(request.resources.gpu) if request.resources.gpu > 0 else 0
        gpus = self._gpus.take(request.host_id, wanted)
        if gpus is None:
            return [update_for(request, TASK_FAILED, reason=REASON_CONTAINER_LAUNCH_FAILED,
                               message=f"asks for {request.resources.gpu:g} GPUs; {self._gpus.free(request.host_id)} "
                                       f"of this host's {len(self._gpus.devices)} are free")]
        try:
            proc, env, as_user, cgroup = self._spawn(request, gpus)
        except (OSError, ValueError) as exc:  # e.g. executable not found, bad task id
            self._gpus.give_back(request.host_id, gpus)
            return [
                update_for(
                    request,
                    TASK_FAILED,
                    reason=REASON_CONTAINER_LAUNCH_FAILED,
                    message=f"failed to start command: {exc}",
                )
            ]
        try:
            write_pid_file(self.sandbox(request.task_id), proc.pid)
        except OSError as exc:
            # Without the pid file a later owner could not stop the task were this process to
            # die, so the task does not run at all.
            _signal_group(proc.pid, signal.SIGKILL)
            proc.wait()
            return [
                update_for(
                    request,
                    TASK_FAILED,
                    reason=REASON_CONTAINER_LAUNCH_FAILED,
                    message=f"failed to record the task's process: {exc}",
                )
            ]
        self._tasks[request.task_id] = _LocalTask(request, proc, cgroup=cgroup, gpus=gpus,
                                                  runtime=self._runtime if request.image else None)
        check = HealthCheck.from_json(request.health_check)
        if check is not None:  # checked as the task's own account, in its sandbox and environment
            self._health.watch(request.task_id, check, self.sandbox(request.task_id), env, time.monotonic(), as_user)
        return [update_for(request, TASK_STARTING),
                update_for(request, TASK_RUNNING, health=HEALTH_UNKNOWN if check is not None else "")]

    def _spawn(self, request: LaunchRequest, gpus: tuple[str, ...] = ()
               ) -> tuple[subprocess.Popen[bytes], dict, dict, TaskCgroup | None]:
        """The task's process, the environment and account (Popen's user options) it runs with, and
        its cgroup."""
        (self.sandbox(request.task_id) / STATUS_FILE).unlink(missing_ok=True)  # an earlier attempt's
        if request.image:
            return self._spawn_container(request, gpus)
        path = dict(request.environment).get("PATH", BASE_PATH)  # as task_environment gives it
        if not request.shell and _missing(request.command, path):
            # Checked here, as the executor would only exit 127: not found is a launch failure.
            raise FileNotFoundError(f"[Errno 2] No such file or directory: {request.command!r}")
        if self._isolation is not None:
            return self._spawn_isolated(request, gpus)
        run = [*executor_argv(), *command_line(request)]
        return (*self._spawn_in(request, subprocess.DEVNULL, run, gpus), None)

    def _spawn_isolated(self, request: LaunchRequest, gpus: tuple[str, ...]
                        ) -> tuple[subprocess.Popen[bytes], dict, dict, TaskCgroup]:
        """The task starts held at a gate (a shell reading its stdin) until its first process is in
        its cgroup, so nothing it forks can start outside; then the shell execs the executor."""
        res = request.resources
        # The executor shares the task's cgroup (it must be in before the command starts): its
        # memory and its process come on top of what the task asked for, as Mesos' do.
        cgroup = self._isolation.make(request.task_id, Limits(res.cpu, res.mem_mb and res.mem_mb + EXECUTOR_MEM_MB,
                                                              self._pids_max and self._pids_max + 1,
                                                              self._gpus.denied(gpus)))
        gate_out, gate_in = os.pipe()
        try:
            run = [*_GATE, *executor_argv(), *command_line(request)]
            proc, env, as_user = self._spawn_in(request, gate_out, run, gpus)
        except BaseException:
            os.close(gate_in)
            cgroup.destroy()
            raise
        finally:
            os.close(gate_out)
        try:
            cgroup.enter(proc.pid)
        except OSError:
            os.close(gate_in)  # the gate reads end-of-file: the command never runs
            proc.wait()
            cgroup.destroy()
            raise
        os.write(gate_in, b"go\n")
        os.close(gate_in)
        return proc, env, as_user, cgroup

    def _spawn_container(self, request: LaunchRequest, gpus: tuple[str, ...]
                         ) -> tuple[subprocess.Popen[bytes], dict, dict, TaskCgroup | None]:
        """The task inside its image, through the runtime: the runtime's process is the task's here."""
        runtime = self._runtime
        if runtime is None:
            raise ImageError(f"image {request.image!r}: this host's agent has no container runtime")
        sandbox = self.sandbox(request.task_id)
        account = self._account(request)
        uid, gid = (account.uid, account.gid) if account is not None else (os.getuid(), os.getgid())
        env = container_environment(request, gpus)
        res = request.resources
        out, err = open_sandbox(sandbox, account)
        try:  # the executor, as root, runs the runtime: an environment of its own, none of ours
            bundles = self._root / ".bundles"
            bundles.mkdir(mode=0o700, exist_ok=True)  # a bundle holds its run's environment
            bundle = runtime.bundle(bundles / request.task_id, request.image, command_line(request), env, sandbox, uid,
                                    gid, res.cpu, res.mem_mb, self._pids_max, request.task_id, self._gpus.nodes(gpus))
            runtime.delete(request.task_id)  # a container of an earlier attempt under the same id
            proc = subprocess.Popen([*executor_argv(), *runtime.run_argv(request.task_id, bundle)], cwd=sandbox,
                                    env={"PATH": BASE_PATH, **EXECUTOR_ENVIRONMENT}, stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=err, start_new_session=True)
        finally:
            os.close(out)
            os.close(err)
        cgroup = self._isolation.at(runtime.cgroups_path(request.task_id)) if self._isolation is not None else None
        return proc, env, {}, cgroup

    def _spawn_in(self, request: LaunchRequest, stdin, argv: list[str], gpus: tuple[str, ...]
                  ) -> tuple[subprocess.Popen[bytes], dict, dict]:
        sandbox = self.sandbox(request.task_id)
        account = self._account(request)
        env = task_environment(request, sandbox, account.name if account is not None else "", gpus)
        as_user = account.popen() if account is not None else {}
        # The child enters its sandbox (chdir) before it drops to its user, so the directories
        # above it need not be open to that user. It gets its own copies of the descriptors.
        out, err = open_sandbox(sandbox, account)
        try:
            proc = subprocess.Popen(argv, cwd=sandbox, env={**env, **EXECUTOR_ENVIRONMENT}, stdin=stdin, stdout=out,
                                    stderr=err, start_new_session=True, umask=TASK_UMASK, **as_user)
        finally:
            os.close(out)
            os.close(err)
        return proc, env, as_user

    def _step(self, now: float) -> list[TaskUpdate]:
        """Reap tasks that exited and escalate kills whose grace period ran out."""
        updates = []
        for task in list(self._tasks.values()):
            if _exited(task.proc):
                updates.append(self._reap(task))
            elif _grace_expired(task, now):
                _signal(task, signal.SIGKILL)
        if self._isolation is not None and now - self._disk_checked >= DISK_CHECK_SECONDS:
            self._disk_checked = now
            self._watch_disks()
        if self._identities is not None and now - self._identity_sweep >= IDENTITY_SWEEP_S:
            self._identity_sweep = now
            for job_id, uid in self._identities.release_idle():
                log.info("job %s has no run on this host any more: its uid %d released, its sandboxes root's",
                         job_id, uid)
        if self._sandbox_keep > 0 and self._sandbox_sweep.due(now):
            self._sandbox_sweep.done(now, len(collect_sandboxes(self._root, self._sandbox_keep, set(self._tasks),
                                                                self._sandbox_sweep.batch)))
        if updates:  # what left the tasks' process groups (setsid) ends with them too
            kill_escapees({u.task_id for u in updates})
        for news in self._health.step(now):
            task = self._tasks.get(news.task_id)
            if task is None and news.task_id in self._adopted:
                updates.extend(self._adopted_health(self._adopted[news.task_id], news))
                continue
            if task is None or task.kill_signal is not None:
                continue  # ended or being stopped already: its health says nothing any more
            updates.append(update_for(task.request, TASK_RUNNING, reason=REASON_HEALTH_CHECK_STATUS_UPDATED,
                                      message=news.message, health=news.health))
            if news.kill:
                task.unhealthy = news.message
                self.kill([news.task_id])
        return updates

    def _adopted_health(self, request: LaunchRequest, news) -> list[TaskUpdate]:
        """An adopted run's health news; a run its check gave up on is killed, as _step kills its own."""
        said = update_for(request, TASK_RUNNING, reason=REASON_HEALTH_CHECK_STATUS_UPDATED, message=news.message,
                          health=news.health)
        if not news.kill:
            return [said]
        self.let_go([request.task_id])
        kill_orphan(self._root, request.task_id, request.kill_grace_seconds)
        return [said, update_for(request, TASK_FAILED, reason=REASON_TASK_UNHEALTHY, message=f"killed: {news.message}")]

    def _account(self, request: LaunchRequest) -> Account | None:
        """Who the run runs as (None: as this process): the job's command.user where allowed here,
        else the job's own identity on this host, else PELOTON_TASK_USER. ValueError where the
        run may not run: its user not allowed, or no identity free."""
        if request.user:
            entry = self._allowed.account(request.user)
            if entry is None:
                return None
            return Account(entry.pw_uid, entry.pw_gid, entry.pw_name,
                           tuple(os.getgrouplist(entry.pw_name, entry.pw_gid)))
        if self._identities is not None:
            return self._identities.take(request.job_id)
        if self._user is not None:
            return Account(self._user.pw_uid, self._user.pw_gid, self._user.pw_name)
        return None

    def _check_context(self, request: LaunchRequest) -> tuple[dict, dict]:
        """The environment and account (Popen's user options) a run's health check runs with: its
        own, as _spawn_in or _spawn_container gave them (less GPU devices)."""
        if request.image:
            return container_environment(request), {}
        account = self._account(request)
        env = task_environment(request, self.sandbox(request.task_id), account.name if account is not None else "")
        return env, account.popen() if account is not None else {}

    def _watch_disks(self) -> None:
        for task in self._tasks.values():
            limit = task.request.resources.disk_mb
            if limit <= 0 or task.over or task.kill_signal is not None:
                continue
            used = _disk_mb(self.sandbox(task.request.task_id))
            if used > limit:
                task.over = f"disk limit of {limit:g} MB exceeded: its sandbox holds {used:.1f} MB"
                _send(task, signal.SIGKILL)

    def _reap(self, task: _LocalTask) -> TaskUpdate:
        # The main process is exited but not yet reaped (a zombie), so its pid, and thus
        # the group id, cannot have been reused: this SIGKILL only hits the task's leftovers.
        _signal_group(task.pid, signal.SIGKILL)
        returncode = task.proc.wait()
        usage = None
        if task.cgroup is not None:
            usage = task.cgroup.usage()
        if task.runtime is not None:
            task.runtime.delete(task.request.task_id)  # its cgroup too
            shutil.rmtree(self._root / ".bundles" / task.request.task_id, ignore_errors=True)
        if task.cgroup is not None:
            task.cgroup.destroy()  # and whatever left the process group with it
        del self._tasks[task.request.task_id]
        self._gpus.give_back(task.request.host_id, task.gpus)
        self._health.forget(task.request.task_id)
        _remove_pid_file(self.sandbox(task.request.task_id))
        if returncode == NOT_STARTED:
            status = read_status(self.sandbox(task.request.task_id))
            if status is not None and status[0] == "error":
                return update_for(task.request, TASK_FAILED, reason=REASON_CONTAINER_LAUNCH_FAILED,
                                  message=f"failed to start command: {status[1]}")
        return _outcome(task, returncode, usage)


def task_user(name: str):
    """The account tasks run as (a pwd entry), or None to run them as this process's own user.

    Only root can switch users: a driver running as root runs tasks as `name` (PELOTON_TASK_USER,
    `nobody` by default), and as root only when told so (`root`). A driver not running as root
    runs them as itself, whatever `name` says. An unknown name is an error (ValueError), said at
    start rather than at the first task."""
    if os.geteuid() != 0 or not name or name == "root":
        return None
    try:
        return pwd.getpwnam(name)
    except KeyError:
        raise ValueError(f"PELOTON_TASK_USER={name!r}: no such user on this machine") from None


class UserPolicy:
    """Which accounts a job's own command.user may name on this host (PELOTON_TASK_USERS):
    names separated by commas, or `*` for any account of the machine but root. Root only when
    listed by name. Empty: none but the account tasks run as anyway (PELOTON_TASK_USER)."""

    def __init__(self, allowed: str, default: str = ""):
        self.setting = allowed
        self.names, self.any = allowed_names(allowed, default)

    def account(self, name: str):
        """The pwd entry to run a task that names `name` as (None: as this process), or a
        ValueError saying why it may not run as that user here."""
        if name not in self.names and (not self.any or name == "root"):
            raise ValueError(f"command.user {name!r} is not allowed on this host (PELOTON_TASK_USERS="
                             f"{self.setting!r})")
        if os.geteuid() != 0:
            if name == pwd.getpwuid(os.geteuid()).pw_name:
                return None
            raise ValueError(f"command.user {name!r}: the agent runs as {pwd.getpwuid(os.geteuid()).pw_name!r}, "
                             f"not root, and cannot switch users")
        if name == "root":
            return None
        try:
            return pwd.getpwnam(name)
        except KeyError:
            raise ValueError(f"command.user {name!r}: no such user on this host") from None


def sandbox_path(sandbox_root: str | Path, task_id: str) -> Path:
    """<sandbox_root>/<task_id>; task ids must be plain names, not paths (ValueError otherwise)."""
    if task_id in ("", ".", "..") or "/" in task_id or "\0" in task_id:
        raise ValueError(f"task id {task_id!r} cannot name a sandbox directory")
    return Path(sandbox_root) / task_id


def open_sandbox(sandbox: Path, account: Account | None) -> tuple[int, int]:
    """Makes the run's sandbox its job's own (0700, owned by its account, with a TMPDIR inside)
    and opens its stdout and stderr (0600) to append to: a relaunch under the same id keeps the
    earlier attempt's output, and whatever an earlier attempt left there becomes this account's.
    A link left under those names is not followed (the agent is root). The two descriptors."""
    existed = sandbox.is_dir()
    sandbox.mkdir(mode=0o700, exist_ok=True)
    os.chmod(sandbox, 0o700, follow_symlinks=False)
    try:
        (sandbox / TMP_DIR).mkdir(mode=0o700)
    except FileExistsError:  # its own, from an earlier attempt (whatever it made of it)
        pass
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
    fds = [os.open(sandbox / name, flags, 0o600) for name in ("stdout", "stderr")]
    try:
        for fd in fds:
            os.fchmod(fd, 0o600)
        if account is not None:
            if existed:
                own_tree(sandbox, None, account.uid, account.gid)
            else:
                for path in (sandbox, sandbox / TMP_DIR):
                    os.lchown(path, account.uid, account.gid)
                for fd in fds:
                    os.fchown(fd, account.uid, account.gid)
    except OSError:
        for fd in fds:
            os.close(fd)
        raise
    return fds[0], fds[1]


def command_line(request: LaunchRequest) -> list[str]:
    if request.shell:
        return ["/bin/sh", "-c", request.command]
    return [request.command, *request.arguments]


def _executor_interpreter() -> str:
    """A Python every task account can run: the system's (this process's own may live under a
    home only root can enter), else this one's."""
    return shutil.which("python3", path="/usr/bin:/bin:/usr/local/bin") or os.path.realpath(sys.executable)


# How long a hand-over waits for an executor that has just started to set its handlers.
_EXECUTOR_READY_WAIT_S = 1.0
# What the executor itself holds of its run's cgroup: its private memory is under 3 MB (the
# interpreter's code is shared, page cache), and it is one process.
EXECUTOR_MEM_MB = 4
# The executor's program travels in its environment (which it takes out before starting the
# command), so that `ps` shows a line, not the program.
EXECUTOR_ENVIRONMENT = {"PELOTON_EXECUTOR": (Path(__file__).parent / "executor.py").read_text()}
_EXECUTOR = [_executor_interpreter(), "-I", "-S", "-c", 'import os; exec(os.environ.pop("PELOTON_EXECUTOR"))']


def executor_argv() -> list[str]:
    """What starts a command under its executor (executor.py), given EXECUTOR_ENVIRONMENT too, in
    its sandbox."""
    return list(_EXECUTOR)


def read_status(sandbox: Path) -> tuple[str, str] | None:
    """How the executor in `sandbox` saw its command end: ("exit", code), ("signal", number),
    ("error", why it did not start) or ("fenced", "") when it killed the run itself, the lease
    having run out with no agent holding it; None when it wrote nothing readable. The sandbox is the
    task's: a task can only garble its own ending there, and what it leaves under the name (a
    link to a file of root's, a pipe that would hold the agent) is not read."""
    text = read_plain(sandbox / STATUS_FILE)
    if text is None:
        return None
    kind, _, value = text.strip().partition(" ")
    if kind == FENCED and not value:
        return kind, value
    if kind == "error" and value:
        return kind, value
    if kind in ("exit", "signal") and value.isdigit() and len(value) <= 3:
        return kind, value
    return None


def orphan_update(task_id: str, host_id: str, status: tuple[str, str], usage: Usage | None) -> TaskUpdate:
    """The terminal update of a run whose executor wrote `status` while no driver of ours waited
    for it: as _ending() maps a run's end, less what only its driver knew (a kill it sent)."""
    kind, value = status
    at = now_ms()
    if kind == FENCED:
        return TaskUpdate(task_id, host_id, TASK_LOST, at, REASON_AGENT_FENCED,
                          "killed by its executor: its agent's lease ran out while no agent held the run")
    if kind == "error":
        return TaskUpdate(task_id, host_id, TASK_FAILED, at, REASON_CONTAINER_LAUNCH_FAILED,
                          f"failed to start command: {value}")
    signum = int(value) if kind == "signal" else None
    code = int(value) if kind == "exit" else None
    if usage is not None and usage.oom_killed:
        update = TaskUpdate(task_id, host_id, TASK_FAILED, at, REASON_CONTAINER_LIMITATION_MEMORY,
                            "memory limit exceeded: killed by the kernel", exit_code=code, signal=signum)
    elif signum is not None:
        update = TaskUpdate(task_id, host_id, TASK_FAILED, at, REASON_COMMAND_EXECUTOR_FAILED,
                            f"command terminated by signal {_signal_name(signum)}", signal=signum)
    elif code == 0:
        update = TaskUpdate(task_id, host_id, TASK_FINISHED, at, exit_code=0)
    else:
        update = TaskUpdate(task_id, host_id, TASK_FAILED, at, REASON_COMMAND_EXECUTOR_FAILED,
                            f"command exited with code {code}", exit_code=code)
    return _with_usage(update, usage)


def _disk_mb(directory: Path) -> float:
    """What a sandbox holds on disk (allocated blocks, as du counts them), symbolic links not followed."""
    total, stack = 0, [str(directory)]
    while stack:
        try:
            with os.scandir(stack.pop()) as entries:
                for entry in entries:
                    try:
                        info = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    total += info.st_blocks * 512
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
        except OSError:
            continue
    return total / (1024 * 1024)


def _missing(command: str, path: str | None) -> bool:
    """A command named bare that is not on PATH, or by an absolute path that is not there."""
    if "/" not in command:
        return shutil.which(command, path=path) is None
    return command.startswith("/") and not os.path.exists(command)


# The gate an isolated task starts behind: its shell waits for 'go' on stdin (the agent writes it
# once the shell is in the task's cgroup), then becomes the command, with stdin from /dev/null.
_GATE = ["/bin/sh", "-c", 'read -r go && [ "$go" = go ] && exec "$@" </dev/null; exit 125', "peloton-gate"]


def _outcome(task: _LocalTask, returncode: int, usage: Usage | None = None) -> TaskUpdate:
    return _with_usage(_ending(task, returncode, usage), usage)


def _with_usage(update: TaskUpdate, usage: Usage | None) -> TaskUpdate:
    """A run's last update with what its cgroup counted it used, in its message too."""
    if usage is None:
        return update
    said = usage.describe()
    return replace(update, message=f"{update.message}; {said}" if update.message else said,
                   cpu_seconds=usage.cpu_seconds, peak_mem_mb=usage.peak_mem_mb)


def _ending(task: _LocalTask, returncode: int, usage: Usage | None) -> TaskUpdate:
    request = task.request
    signum = -returncode if returncode < 0 else None
    if task.over:
        return update_for(request, TASK_FAILED, reason=REASON_CONTAINER_LIMITATION_DISK,
                          message=f"killed: {task.over}", signal=signum)
    if usage is not None and usage.oom_killed and task.kill_signal is None:
        return update_for(request, TASK_FAILED, reason=REASON_CONTAINER_LIMITATION_MEMORY,
                          message=f"memory limit of {request.resources.mem_mb:g} MB exceeded: killed by the kernel",
                          exit_code=returncode if returncode >= 0 else None, signal=signum)
    if task.unhealthy:
        return update_for(request, TASK_FAILED, reason=REASON_TASK_UNHEALTHY, message=f"killed: {task.unhealthy}",
                          exit_code=returncode if returncode >= 0 else None, signal=signum or task.kill_signal)
    if task.kill_signal is not None:
        ended_by = signum or task.kill_signal
        return update_for(
            request,
            TASK_KILLED,
            message=f"command killed by {_signal_name(ended_by)}",
            exit_code=returncode if returncode >= 0 else None,
            signal=ended_by,
        )
    if signum is not None:
        return update_for(
            request,
            TASK_FAILED,
            reason=REASON_COMMAND_EXECUTOR_FAILED,
            message=f"command terminated by signal {_signal_name(signum)}",
            signal=signum,
        )
    return exit_update(request, returncode)


def _exited(proc: subprocess.Popen[bytes]) -> bool:
    """True once the process has ended, without reaping it (see _reap for why)."""
    if proc.returncode is not None:
        return True
    try:
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:  # reaped by someone else; Popen.wait() copes with that
        return True


def _grace_expired(task: _LocalTask, now: float) -> bool:
    return (
        task.kill_sent_at is not None
        and task.kill_signal != signal.SIGKILL
        and now - task.kill_sent_at >= task.request.kill_grace_seconds
    )


def _signal(task: _LocalTask, signum: int) -> None:
    task.kill_signal = signum
    _send(task, signum)


def _send(task: _LocalTask, signum: int) -> None:
    if task.runtime is not None:  # the container's init has a session of its own
        task.runtime.signal(task.request.task_id, signum)
    else:
        _signal_group(task.pid, signum)


def kill_escapees(task_ids: set[str]) -> int:
    """SIGKILL every process of these tasks that left its task's process group (a child that
    called setsid, a daemon that double-forked): each still carries its task's PELOTON_TASK_ID in
    the environment it was started with, which is how it is found (session tracking, as build
    servers find a build's strays). One /proc scan for all; a process that cleared its environment
    escapes it, which a cgroup per task closes. Returns how many were killed."""
    if not task_ids:
        return 0
    try:
        pids = [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return 0
    killed = 0
    me = os.getpid()
    for pid in pids:
        if pid != me and _task_id_of(pid) in task_ids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except (ProcessLookupError, PermissionError):
                pass
    return killed


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass  # the group is already gone


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return str(signum)


# --- pid files and orphans -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _ProcStat:
    state: str  # R, S, D, Z, ...
    pgrp: int
    session: int
    start_time: int  # clock ticks after boot (field 22)


def _proc_stat(pid: int) -> _ProcStat | None:
    """The few /proc/<pid>/stat fields we need, or None if there is no such process (or no /proc)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
        # Fields after "(comm)", which may itself hold spaces and parentheses, start at field 3.
        fields = raw.rsplit(")", 1)[1].split()
        return _ProcStat(fields[0], int(fields[2]), int(fields[3]), int(fields[19]))
    except (OSError, IndexError, ValueError):
        return None


def _boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None


def write_fresh(path: Path, text: str) -> None:
    """Writes `text` to `path` in a sandbox, whole (renamed into place), as a file made afresh:
    the task owns its sandbox and may have left anything under our names, and the agent is root
    (a link there is replaced, never written through). OSError when it cannot."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)


def read_plain(path: Path, limit: int = 4096) -> str | None:
    """The start of a file the agent wrote (or its executor did) in a sandbox, or None: what a
    task left under its name instead (a link to a file of root's, a pipe that would hold the
    agent) is not read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        return os.read(fd, limit).decode(errors="replace") if S_ISREG(os.fstat(fd).st_mode) else None
    except OSError:
        return None
    finally:
        os.close(fd)


def write_pid_file(sandbox: Path, pid: int) -> None:
    """Record the task's process group (= its executor's pid) and who that leader is, atomically."""
    stat = _proc_stat(pid)
    record = {"pgid": pid, "start_time": stat.start_time if stat else None, "boot_id": _boot_id(), "executor": True}
    write_fresh(sandbox / PID_FILE, json.dumps(record) + "\n")


def tell_executor(sandbox: Path, lease_until: float | None) -> bool:
    """Tells a run's executor until when (seconds since the epoch) the run may go on with no agent,
    or (None) that an agent holds it again. False when it has no executor alive to tell."""
    pid = executor_of(sandbox)
    if pid is None:
        return False
    if lease_until is None and not (sandbox / LEASE_FILE).exists():
        return True  # never told to fence: nothing to call off
    # SIGUSR1 ends an executor that has not yet set its handler (it is one that just started).
    deadline = time.monotonic() + _EXECUTOR_READY_WAIT_S
    while not _catches(pid, signal.SIGUSR1):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    try:
        if lease_until is None:
            (sandbox / LEASE_FILE).unlink(missing_ok=True)
        else:
            write_fresh(sandbox / LEASE_FILE, f"{lease_until:.3f}\n")
        os.kill(pid, signal.SIGUSR1)
    except OSError:
        return False
    return True


def _catches(pid: int, signum: int) -> bool:
    """Whether the process has a handler set for the signal (SigCgt in /proc/<pid>/status)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) & (1 << (signum - 1)))
    except (OSError, ValueError, IndexError):
        pass
    return False


def _read_pid_record(sandbox: Path) -> dict | None:
    try:
        record = json.loads(read_plain(sandbox / PID_FILE) or "")
        pgid, start_time, boot_id = record["pgid"], record["start_time"], record.get("boot_id")
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    valid = (
        type(pgid) is int and pgid > 1 and type(start_time) is int and start_time >= 0
        and (boot_id is None or isinstance(boot_id, str))
    )
    return record if valid else None


def _read_pid_file(sandbox: Path) -> tuple[int, int, str | None] | None:
    """(pgid, start time, boot id) from a task's pid file, or None if missing or garbled."""
    record = _read_pid_record(sandbox)
    return None if record is None else (record["pgid"], record["start_time"], record.get("boot_id"))


def executor_of(sandbox: Path) -> int | None:
    """The pid of the run's executor, alive, as its pid file names it (pid, start time and boot),
    or None: the run ended, or started before executors (its leader is the command itself, which
    must not be sent an executor's signals)."""
    record = _read_pid_record(sandbox)
    if record is None or record.get("executor") is not True:
        return None
    if record.get("boot_id") is not None and record["boot_id"] != _boot_id():
        return None
    leader = _proc_stat(record["pgid"])
    if leader is None or leader.state == "Z" or leader.start_time != record["start_time"]:
        return None
    return record["pgid"]


def collect_sandboxes(sandbox_root: Path, keep_seconds: float, held: set[str],
                      limit: int = SANDBOX_GC_BATCH) -> list[str]:
    """Remove the sandboxes of runs that ended more than keep_seconds ago, as Mesos' agent does
    after its gc_delay; returns their names. A sandbox changes last when its run's pid file goes at
    its end, so its own mtime says when. Kept whatever their age: the runs `held`, those whose
    pid file is from this boot (still running, an adopted run, or ending now: other agents of the
    machine share the root), names starting with a dot (the bundles), and any with a mount inside."""
    cutoff = time.time() - keep_seconds
    boot = _boot_id()
    mounts = _mount_points()
    gone: list[str] = []
    try:
        entries = list(os.scandir(sandbox_root))
    except OSError:
        return gone
    for entry in entries:
        if len(gone) >= limit:
            break
        name = entry.name
        try:
            if name.startswith(".") or name in held or not entry.is_dir(follow_symlinks=False) or \
                    entry.stat(follow_symlinks=False).st_mtime >= cutoff:
                continue
        except OSError:
            continue
        path = Path(entry.path)
        pid = _read_pid_file(path)
        if (pid is not None and (pid[2] is None or pid[2] == boot)) or \
                ((path / PID_FILE).exists() and pid is None):
            continue  # a run of this boot (or a pid file not read): it may still run
        real = path.resolve()  # mountinfo names real paths
        if any(m == real or real in m.parents for m in mounts):
            continue
        if _remove_tree(path):
            gone.append(name)
    return gone


def _mount_points() -> list[Path]:
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    # Field 5 is the mount point, with spaces and such written as octal escapes.
    return [Path(line.split()[4].encode().decode("unicode_escape")) for line in lines if len(line.split()) > 4]


def _remove_tree(path: Path) -> bool:
    """rmtree; where that fails (an agent not running as root runs tasks as itself, and a task may
    leave a directory it made unreadable), make the task's directories the agent's again first.
    Links are never followed: a task may point one anywhere. Whether it is gone."""
    try:
        shutil.rmtree(path)
        return True
    except OSError:
        pass
    _own(path)
    for dirpath, dirnames, _files in os.walk(path):  # top-down: each directory made readable before it is read
        for d in dirnames:
            _own(Path(dirpath) / d)
    shutil.rmtree(path, ignore_errors=True)
    return not path.exists()


def _own(path: Path) -> None:
    try:
        if not path.is_symlink():
            os.chmod(path, 0o700)
    except OSError:
        pass


def _remove_pid_file(sandbox: Path) -> None:
    try:
        (sandbox / PID_FILE).unlink(missing_ok=True)
    except OSError:
        pass


def _live_groups() -> dict[int, list[int]]:
    """Process group id -> pids of its members that are not zombies, from one /proc scan."""
    groups: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return groups
    for name in entries:
        if name.isdigit():
            stat = _proc_stat(int(name))
            if stat is not None and stat.state != "Z":
                groups.setdefault(stat.pgrp, []).append(int(name))
    return groups


def _task_id_of(pid: int) -> str | None:
    """PELOTON_TASK_ID from the environment the process was started with, if readable."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    for entry in environ.split(b"\0"):
        if entry.startswith(b"PELOTON_TASK_ID="):
            return entry.split(b"=", 1)[1].decode(errors="replace")
    return None


def _orphan_group(sandbox_root: Path, task_id: str, groups: dict[int, list[int]]) -> int | None:
    """The process group id of the task's processes if some still run here, else None."""
    try:
        record = _read_pid_file(sandbox_path(sandbox_root, task_id))
    except (ValueError, TypeError):  # not a usable task id
        return None
    if record is None:
        return None
    pgid, start_time, boot_id = record
    if boot_id is not None and boot_id != _boot_id():
        return None  # written before a reboot (or on another machine): none of it runs here
    leader = _proc_stat(pgid)
    if leader is not None and leader.start_time != start_time:
        return None  # the pid was reused by another process
    if leader is not None and leader.state != "Z":
        return pgid  # the task's own leader, alive
    # The leader has ended; members left in its group may still run. The kernel does not reuse a
    # pid while a group or session of that id exists, yet the group could belong to a later
    # process that got the pid after the task's group was gone, so members must also carry the
    # task's identity in the environment they were started with.
    for pid in groups.get(pgid, ()):
        stat = _proc_stat(pid)
        if stat is not None and stat.start_time >= start_time and _task_id_of(pid) == task_id:
            return pgid
    return None


def kill_orphans(
    sandbox_root: str | Path, task_ids: Iterable[str], grace_seconds: float = DEFAULT_ORPHAN_GRACE_SECONDS
) -> dict[str, str]:
    """Stop the processes of tasks that a dead driver started on this machine and left running.

    For each task whose pid file names a process group that still runs here (its leader verified
    by start time and boot id): SIGTERM the group, wait up to `grace_seconds` (capped at
    MAX_ORPHAN_GRACE_SECONDS) for every group together, then SIGKILL what is left. Returns task
    id -> a short description of what was done, only for tasks that had something running.
    Never raises: a missing or garbled pid file, a bad task id or processes that are gone all
    mean nothing to do.
    """
    root = Path(sandbox_root)
    try:
        grace = float(grace_seconds)
    except (TypeError, ValueError):
        grace = DEFAULT_ORPHAN_GRACE_SECONDS
    grace = min(grace, MAX_ORPHAN_GRACE_SECONDS) if grace >= 0 else 0.0  # NaN -> 0 too
    groups = _live_groups()
    found: dict[str, int] = {}
    for task_id in task_ids:
        pgid = _orphan_group(root, task_id, groups)
        if pgid is not None:
            found[task_id] = pgid
    if not found:
        return {}
    done: dict[str, str] = {}
    for task_id, pgid in found.items():
        problem = _send_group(pgid, signal.SIGTERM)
        if problem:
            done[task_id] = f"orphan process group {pgid} could not be stopped: {problem}"
    terminated = {t: g for t, g in found.items() if t not in done}
    left = _wait_groups_gone(terminated, time.monotonic() + grace)
    for pgid in left.values():
        _send_group(pgid, signal.SIGKILL)
    stuck = _wait_groups_gone(left, time.monotonic() + _ORPHAN_SIGKILL_WAIT_SECONDS)
    kill_escapees(set(terminated))
    for task_id, pgid in terminated.items():
        if task_id in stuck:
            done[task_id] = f"orphan process group {pgid} still running after SIGKILL"
            continue
        how = f"SIGKILL after {grace:g}s grace" if task_id in left else "SIGTERM"
        done[task_id] = f"orphan process group {pgid} killed ({how})"
        _remove_pid_file(root / task_id)
    return done


def surviving_groups(sandbox_root: str | Path, task_ids: Iterable[str]) -> dict[str, int]:
    """Task id -> process group, for the tasks (started by an earlier driver) whose processes
    still run here, each verified by its pid file (one /proc scan for all of them)."""
    groups = _live_groups()
    found = {t: _orphan_group(Path(sandbox_root), t, groups) for t in task_ids}
    return {t: g for t, g in found.items() if g is not None}


def kill_orphan(
    sandbox_root: str | Path, task_id: str, grace_seconds: float = DEFAULT_ORPHAN_GRACE_SECONDS
) -> str | None:
    """kill_orphans() for one task: what was done, or None when nothing of it was running."""
    return kill_orphans(sandbox_root, [task_id], grace_seconds).get(task_id)


def _send_group(pgid: int, signum: int) -> str | None:
    """Signal a process group; a problem worth reporting, or None (sent, or the group is gone)."""
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        return None
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def _wait_groups_gone(groups: dict[str, int], deadline: float) -> dict[str, int]:
    """Wait until the groups have no live members or the deadline passes; those still alive."""
    while True:
        live = _live_groups()
        left = {t: g for t, g in groups.items() if g in live}
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(_ORPHAN_POLL_SECONDS)
