"""LocalDriver: runs each task as a real process on this machine, composed of the host
runtime's parts: its sandbox (sandboxes.py), its account (identities.py, accounts.py), its
environment (environment.py), its executor (executor.py, spawn.py) leading a process group of its
own, its pid file (pidfiles.py) so that a later owner of the host finds what is left of it
(orphans.py), its cgroup and image where the agent is root (cgroups.py, containers.py), its GPUs
(devices.py), its health checks (health.py), and how its end reads in Mesos' words (exits.py).

When a task's main process ends, whatever is left in its process group is SIGKILLed, as Mesos
does when it destroys a task's container; that keeps background children from leaking.

No threads: poll() checks the few hundred local children with a non-blocking waitid each.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from peloton.model.health import HEALTH_UNKNOWN, HealthCheck
from peloton.model.mesos import MesosState, Reason
from peloton.runtime.sweep import Sweep

from .accounts import UserPolicy, task_user
from .cgroups import Hierarchy, TaskCgroup
from .containers import ContainerRuntime
from .devices import GpuAllotment
from .driver import AgentDriver, LaunchRequest, RunUse, TaskUpdate, update_for
from .executor import FENCED, NOT_STARTED
from .exits import orphan_update, outcome, read_status
from .health import HealthChecks, HealthNews
from .identities import JobIdentities, parse_uid_range
from .launcher import Launcher
from .leasefile import LeaseFile
from .orphans import DEFAULT_ORPHAN_GRACE_SECONDS, kill_escapees, kill_orphan, kill_orphans, signal_group
from .pidfiles import remove_pid_file, tell_executor, write_pid_file
from .run_usage import UsageMeter
from .sandboxes import SANDBOX_GC_BATCH, SANDBOX_GC_SECONDS, collect_sandboxes, disk_mb, sandbox_path
from .volumes import delete_volume

log = logging.getLogger("peloton.agent")

_CLOSE_POLL_SECONDS = 0.01
# How often an isolated task's sandbox is measured against its diskLimitMb (a watcher, as Mesos'
# posix/disk isolator does where no quota is available).
DISK_CHECK_SECONDS = 2.0

IDENTITY_SWEEP_S = 5.0  # how often jobs with no run left here are looked for, to release their uids


@dataclass(slots=True, eq=False)
class _LocalTask:
    request: LaunchRequest
    proc: subprocess.Popen[bytes]
    kill_sent_at: float | None = None  # time.monotonic() of our SIGTERM
    kill_signal: int | None = None  # last signal we sent; None if we never killed it
    unhealthy: str = ""  # why its agent killed it: its health check failed (it ends MesosState.TASK_FAILED)
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
        lease_file: Path | None = None,
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
        self._launcher = Launcher(self._root, self._user, self._allowed, self._identities, isolation, runtime,
                                  self._gpus, pids_max)
        # Every executor holds the agent's lease too, and fences its run at its end (executor.py).
        self._lease = LeaseFile(lease_file) if lease_file is not None else None
        self._launcher.lease_fd = self._lease.fd if self._lease is not None else -1
        self._close_timeout = close_timeout
        self._orphan_grace = orphan_grace_seconds
        self._tasks: dict[str, _LocalTask] = {}
        self._handed: set[str] = set()  # runs left going for the next agent (hand_over)
        self._adopted: dict[str, LaunchRequest] = {}  # runs of an earlier driver whose health is checked here
        self._outbox: list[TaskUpdate] = []
        self._health = HealthChecks()
        self._meter = UsageMeter()
        self._closed = False

    def sandbox(self, task_id: str) -> Path:
        """The task's sandbox directory; task ids must be plain names, not paths."""
        return sandbox_path(self._root, task_id)

    def describe_accounts(self) -> str:
        """Who runs run as here, for the agent's log."""
        return self._launcher.describe_accounts()

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

    def usage(self) -> dict[str, RunUse]:
        """Each run's cpu and memory now (run_usage.py); its cgroup's cpu time where it has one."""
        tasks = self._tasks
        cgroups = {t: task.cgroup.usage().cpu_seconds for t, task in tasks.items() if task.cgroup is not None}
        measured = self._meter.measure({t: task.pid for t, task in tasks.items()}, time.monotonic(), cgroups)
        return {t: RunUse(cpu, mem, tasks[t].request.revocable) for t, (cpu, mem) in measured.items()}

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

    def extend_lease(self, until: float) -> None:
        if self._lease is not None:
            self._lease.write(until)

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
                env, as_user = self._launcher.check_context(request)
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

    def delete_volumes(self, host_id: str, volume_ids: Sequence[str]) -> None:
        """Remove persistent volumes from this machine (the host id is this driver's own hosts')."""
        for volume_id in volume_ids:
            try:
                if delete_volume(self._root, volume_id):
                    log.info("volume %s deleted", volume_id)
            except (OSError, ValueError) as exc:
                log.warning("volume %s not deleted: %s", volume_id, exc)

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
        if self._lease is not None:
            self._lease.close()
        self.clear_leftovers(set())
        if self._isolation is not None:
            if self._runtime is not None:  # the runtime leaves its containers' parent cgroups behind
                self._isolation.at(self._runtime.cgroup_parent).destroy(wait_s=0)
            self._isolation.close()

    def _start(self, request: LaunchRequest) -> list[TaskUpdate]:
        wanted = math.ceil(request.resources.gpu) if request.resources.gpu > 0 else 0
        gpus = self._gpus.take(request.host_id, wanted)
        if gpus is None:
            return [update_for(request, MesosState.TASK_FAILED, reason=Reason.CONTAINER_LAUNCH_FAILED,
                               message=f"asks for {request.resources.gpu:g} GPUs; {self._gpus.free(request.host_id)} "
                                       f"of this host's {len(self._gpus.devices)} are free")]
        try:
            proc, env, as_user, cgroup = self._launcher.spawn(request, gpus)
        except (OSError, ValueError) as exc:  # e.g. executable not found, bad task id
            self._gpus.give_back(request.host_id, gpus)
            return [
                update_for(
                    request,
                    MesosState.TASK_FAILED,
                    reason=Reason.CONTAINER_LAUNCH_FAILED,
                    message=f"failed to start command: {exc}",
                )
            ]
        try:
            write_pid_file(self.sandbox(request.task_id), proc.pid)
        except OSError as exc:
            # Without the pid file a later owner could not stop the task were this process to
            # die, so the task does not run at all.
            signal_group(proc.pid, signal.SIGKILL)
            proc.wait()
            return [
                update_for(
                    request,
                    MesosState.TASK_FAILED,
                    reason=Reason.CONTAINER_LAUNCH_FAILED,
                    message=f"failed to record the task's process: {exc}",
                )
            ]
        self._tasks[request.task_id] = _LocalTask(request, proc, cgroup=cgroup, gpus=gpus,
                                                  runtime=self._runtime if request.image else None)
        check = HealthCheck.from_json(request.health_check)
        if check is not None:  # checked as the task's own account, in its sandbox and environment
            self._health.watch(request.task_id, check, self.sandbox(request.task_id), env, time.monotonic(), as_user)
        return [update_for(request, MesosState.TASK_STARTING),
                update_for(request, MesosState.TASK_RUNNING, health=HEALTH_UNKNOWN if check is not None else "")]

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
            watched = self._tasks.get(news.task_id)
            if watched is None and news.task_id in self._adopted:
                updates.extend(self._adopted_health(self._adopted[news.task_id], news))
                continue
            if watched is None or watched.kill_signal is not None:
                continue  # ended or being stopped already: its health says nothing any more
            updates.append(update_for(watched.request, MesosState.TASK_RUNNING,
                                      reason=Reason.HEALTH_CHECK_STATUS_UPDATED, message=news.message,
                                      health=news.health))
            if news.kill:
                watched.unhealthy = news.message
                self.kill([news.task_id])
        return updates

    def _adopted_health(self, request: LaunchRequest, news: HealthNews) -> list[TaskUpdate]:
        """An adopted run's health news; a run its check gave up on is killed, as _step kills its own."""
        said = update_for(request, MesosState.TASK_RUNNING, reason=Reason.HEALTH_CHECK_STATUS_UPDATED,
                          message=news.message, health=news.health)
        if not news.kill:
            return [said]
        self.let_go([request.task_id])
        kill_orphan(self._root, request.task_id, request.kill_grace_seconds)
        return [said, update_for(request, MesosState.TASK_FAILED, reason=Reason.TASK_UNHEALTHY,
                                 message=f"killed: {news.message}")]

    def _watch_disks(self) -> None:
        for task in self._tasks.values():
            limit = task.request.resources.disk_mb
            if limit <= 0 or task.over or task.kill_signal is not None:
                continue
            used = disk_mb(self.sandbox(task.request.task_id))
            if used > limit:
                task.over = f"disk limit of {limit:g} MB exceeded: its sandbox holds {used:.1f} MB"
                _send(task, signal.SIGKILL)

    def _reap(self, task: _LocalTask) -> TaskUpdate:
        # The main process is exited but not yet reaped (a zombie), so its pid, and thus
        # the group id, cannot have been reused: this SIGKILL only hits the task's leftovers.
        signal_group(task.pid, signal.SIGKILL)
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
        remove_pid_file(self.sandbox(task.request.task_id))
        if returncode in (NOT_STARTED, -signal.SIGKILL):
            status = read_status(self.sandbox(task.request.task_id))
            if status is not None and status[0] == "error":
                return update_for(task.request, MesosState.TASK_FAILED, reason=Reason.CONTAINER_LAUNCH_FAILED,
                                  message=f"failed to start command: {status[1]}")
            if status is not None and status[0] == FENCED:
                return update_for(task.request, MesosState.TASK_LOST, reason=Reason.AGENT_FENCED,
                                  message="killed by its executor: its agent's lease ran out")
        return outcome(task, returncode, usage)


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
        signal_group(task.pid, signum)


# --- pid files and orphans -------------------------------------------------------------------


