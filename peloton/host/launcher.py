"""How a run's processes start on a host: as whom (the job's command.user where allowed, else the
job's own identity on this host, else PELOTON_TASK_USER), in its sandbox, with an environment of
its own, under its executor; bare, behind a gate in its cgroup, or inside its image through the
OCI runtime. The local driver (local.py) asks it for each run and each adopted run's health check."""

from __future__ import annotations

import os
import pwd
import subprocess
from pathlib import Path

from .accounts import UserPolicy
from .cgroups import Hierarchy, Limits, TaskCgroup, memory_limit_mb
from .containers import ContainerRuntime, ImageError
from .devices import GpuAllotment
from .driver import LaunchRequest
from .environment import BASE_PATH, container_environment, task_environment
from .executor import LEASE_FD, STATUS_FILE
from .identities import Account, JobIdentities
from .sandboxes import open_sandbox, sandbox_path
from .spawn import EXECUTOR_ENVIRONMENT, EXECUTOR_MEM_MB, GATE, command_line, executor_argv, missing_command
from .volumes import link_volume, mount_point, prepare_volume

# A run's files are its job's alone: its sandbox 0700, what it makes 0600 unless it says otherwise.
TASK_UMASK = 0o077


class Launcher:
    def __init__(self, root: Path, user: pwd.struct_passwd | None, allowed: UserPolicy,
                 identities: JobIdentities | None, isolation: Hierarchy | None, runtime: ContainerRuntime | None,
                 gpus: GpuAllotment, pids_max: int) -> None:
        self._root, self._user, self._allowed, self._identities = root, user, allowed, identities
        self._isolation, self._runtime, self._gpus, self._pids_max = isolation, runtime, gpus, pids_max
        self.lease_fd = -1  # the agent's lease file (leasefile.py), handed to every executor; -1: none

    def _executor_fds(self) -> tuple[dict[str, str], tuple[int, ...]]:
        """What hands an executor the agent's lease: its variable and the descriptor to keep open."""
        if self.lease_fd < 0:
            return {}, ()
        return {LEASE_FD: str(self.lease_fd)}, (self.lease_fd,)

    def describe_accounts(self) -> str:
        """Who runs run as here, for the agent's log."""
        if self._identities is not None:
            return self._identities.describe()
        if self._user is not None:
            return f"every run as {self._user.pw_name} (PELOTON_TASK_USER)"
        return "every run as this agent's own user (it is not root, so it cannot switch users)"

    def spawn(self, request: LaunchRequest, gpus: tuple[str, ...] = ()
              ) -> tuple[subprocess.Popen[bytes], dict, dict, TaskCgroup | None]:
        """The task's process, the environment and account (Popen's user options) it runs with, and
        its cgroup."""
        (sandbox_path(self._root, request.task_id) / STATUS_FILE).unlink(missing_ok=True)  # an earlier attempt's
        if request.image:
            return self._spawn_container(request, gpus)
        path = dict(request.environment).get("PATH", BASE_PATH)  # as task_environment gives it
        if not request.shell and missing_command(request.command, path):
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
        assert self._isolation is not None  # _spawn chose isolation: the agent found a hierarchy
        memory = memory_limit_mb(res.mem_mb)
        cgroup = self._isolation.make(request.task_id, Limits(res.cpu, memory and memory + EXECUTOR_MEM_MB,
                                                              self._pids_max and self._pids_max + 1,
                                                              self._gpus.denied(gpus)))
        gate_out, gate_in = os.pipe()
        try:
            run = [*GATE, *executor_argv(), *command_line(request)]
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
        sandbox = sandbox_path(self._root, request.task_id)
        account = self.account(request)
        uid, gid = (account.uid, account.gid) if account is not None else (os.getuid(), os.getgid())
        env = container_environment(request, gpus)
        res = request.resources
        out, err = open_sandbox(sandbox, account)
        try:  # the executor, as root, runs the runtime: an environment of its own, none of ours
            bundles = self._root / ".bundles"
            bundles.mkdir(mode=0o700, exist_ok=True)  # a bundle holds its run's environment
            binds = []
            if request.volume is not None:  # bound onto its containerPath under /sandbox
                volume_id, container_path = request.volume
                binds.append((prepare_volume(self._root, volume_id, account),
                              mount_point(sandbox, container_path, account)))
            bundle = runtime.bundle(bundles / request.task_id, request.image, command_line(request), env, sandbox, uid,
                                    gid, res.cpu, memory_limit_mb(res.mem_mb), self._pids_max, request.task_id,
                                    self._gpus.nodes(gpus),
                                    binds)
            runtime.delete(request.task_id)  # a container of an earlier attempt under the same id
            lease, keep = self._executor_fds()
            proc = subprocess.Popen([*executor_argv(), *runtime.run_argv(request.task_id, bundle)], cwd=sandbox,
                                    env={"PATH": BASE_PATH, **EXECUTOR_ENVIRONMENT, **lease}, stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=err, start_new_session=True, pass_fds=keep)
        finally:
            os.close(out)
            os.close(err)
        cgroup = self._isolation.at(runtime.cgroups_path(request.task_id)) if self._isolation is not None else None
        return proc, env, {}, cgroup

    def _spawn_in(self, request: LaunchRequest, stdin: int | None, argv: list[str], gpus: tuple[str, ...]
                  ) -> tuple[subprocess.Popen[bytes], dict, dict]:
        sandbox = sandbox_path(self._root, request.task_id)
        account = self.account(request)
        env = task_environment(request, sandbox, account.name if account is not None else "", gpus)
        as_user = account.popen() if account is not None else {}
        # The child enters its sandbox (chdir) before it drops to its user, so the directories
        # above it need not be open to that user. It gets its own copies of the descriptors.
        out, err = open_sandbox(sandbox, account)
        try:
            if request.volume is not None:  # its persistent volume, at its containerPath in the sandbox
                volume_id, container_path = request.volume
                link_volume(sandbox, container_path, prepare_volume(self._root, volume_id, account), account)
            lease, keep = self._executor_fds()
            proc = subprocess.Popen(argv, cwd=sandbox, env={**env, **EXECUTOR_ENVIRONMENT, **lease}, stdin=stdin,
                                    stdout=out, stderr=err, start_new_session=True, umask=TASK_UMASK, pass_fds=keep,
                                    **as_user)
        finally:
            os.close(out)
            os.close(err)
        return proc, env, as_user

    def account(self, request: LaunchRequest) -> Account | None:
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

    def check_context(self, request: LaunchRequest) -> tuple[dict, dict]:
        """The environment and account (Popen's user options) a run's health check runs with: its
        own, as _spawn_in or _spawn_container gave them (less GPU devices)."""
        if request.image:
            return container_environment(request), {}
        account = self.account(request)
        name = account.name if account is not None else ""
        env = task_environment(request, sandbox_path(self._root, request.task_id), name)
        return env, account.popen() if account is not None else {}
