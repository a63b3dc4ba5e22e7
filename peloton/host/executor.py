# The run's executor: the small parent each local run has, so that how the run ended outlives
# its agent.
#
# A process's exit status goes to its parent alone. With the agent as the run's parent, a run
# that ended after its agent died (SIGKILL, a crash) could only be reported lost by the next
# agent, and a task that had succeeded ran again. Mesos keeps an executor beside each task for
# this; ours is this program, which the local driver starts in the run's place (it becomes the
# run's process group leader, in its cgroup, as its user): it starts the command, ignores the
# signals a kill sends to the group (the command gets them), waits for the command, writes how
# it ended to the status file, and ends the same way, so its parent reads the status it would
# have read from the command itself.
#
# The driver hands this file's text to `python3 -I -S` in the environment variable
# PELOTON_EXECUTOR (no file a task's user may be unable to read, no site or environment of the
# task's to load; the variable is taken out before the command starts): it must stay standalone,
# and cheap to start with every run (no json, and _signal rather than signal, whose enums would
# add 5 ms).
#
# The status file (.peloton-exit) holds one line: "exit N", "signal N", "error TEXT" when the
# command could not be started (then the executor exits 127), or "fenced" (below).
#
# The agent's lease, held here too (a dead man's switch): the agent keeps the end of its lease
# (time.monotonic() seconds, the same clock in every process of the host) in a file it writes in
# place, whose open descriptor the executor inherits (PELOTON_LEASE_FD; the command does not). At
# that end the executor reads the file again: extended, it waits for the new end; else it kills
# the run's whole process group, itself included, and writes "fenced". An agent that is frozen,
# stuck in the kernel or gone can then never leave a run alive past its lease, after which the
# host manager may run it elsewhere. The line holds the end twice ("E E"), so that a read that
# met a write half done is told apart and read again. SIGUSR1 makes it read the file at once (an
# agent handing its runs over, whose lease may end sooner than the alarm set).
#
# Without that descriptor (a run started by an older agent), the lease while no agent holds it
# comes by hand-over: an agent that restarts (SIGHUP) writes its lease's end (seconds since the
# epoch) to .peloton-lease in each sandbox and sends SIGUSR1; unless the next agent removes the
# file and sends SIGUSR1 again first, the executor fences the run at that end.

import _signal  # type: ignore[import-not-found]  # signal's C half: starts faster
import os
import sys
import time

# Sent to the run's process group by a kill (and by a terminal, were there one): the command's.
KILL_SIGNALS = (_signal.SIGTERM, _signal.SIGINT, _signal.SIGHUP, _signal.SIGQUIT)
# Python ignores these itself; a command must start with them as a shell would start it.
PYTHON_IGNORES = (_signal.SIGPIPE, _signal.SIGXFSZ)
NOT_STARTED = 127
# In the sandbox, the executor's working directory (named relative: the directories above may be
# closed to the task's user, who enters the sandbox as root before dropping to it).
STATUS_FILE = ".peloton-exit"
LEASE_FILE = ".peloton-lease"
LEASE_FD = "PELOTON_LEASE_FD"
FENCED = "fenced"
host_lease_fd = -1  # the agent's lease file, or -1 where the agent gave none


def write_status(line: str) -> None:
    """The status file, whole or not at all (a reader never sees half a line). Written into the
    task's own sandbox, where the task may have left anything under the names we use (as root, for
    a container's executor): a file made afresh, never one found there, nor a link followed."""
    tmp = f"{STATUS_FILE}.tmp"
    try:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        try:
            os.write(fd, line.encode(errors="replace"))
        finally:
            os.close(fd)
        os.replace(tmp, STATUS_FILE)
    except OSError:
        pass  # a sandbox gone or full: the agent that watches us still reads our own exit


def host_lease() -> float | None:
    """The end of the agent's lease (time.monotonic()), or None when the file says nothing
    readable (then the agent's own fence is all there is)."""
    for _ in range(3):
        try:
            parts = os.pread(host_lease_fd, 64, 0).split()
        except OSError:
            return None
        if len(parts) == 2 and parts[0] == parts[1]:
            try:
                return float(parts[0])
            except ValueError:
                return None
        time.sleep(0.001)  # a write half done: read again
    return None


def wait_for_lease() -> bool:
    """Sets the alarm for the end of the agent's lease; False when it has run out."""
    until = host_lease()
    if until is None:
        _signal.setitimer(_signal.ITIMER_REAL, 0)
        return True
    left = until - time.monotonic()
    if left <= 0:
        return False
    _signal.setitimer(_signal.ITIMER_REAL, left)
    return True


def lease_news(_signum: int, _frame: object) -> None:
    """SIGUSR1: the lease file says until when the run may go on with no agent, or (gone) that an
    agent holds the run again. A run that holds the agent's own lease reads that again instead."""
    if host_lease_fd >= 0:
        if not wait_for_lease():
            lease_out(_signal.SIGALRM, None)
        return
    try:  # a container's executor is root: no link followed, no pipe left there waited on
        fd = os.open(LEASE_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        try:
            until = float(os.read(fd, 64))
        finally:
            os.close(fd)
    except (OSError, ValueError):
        _signal.setitimer(_signal.ITIMER_REAL, 0)
        return
    _signal.setitimer(_signal.ITIMER_REAL, max(0.001, until - time.time()))


def lease_out(_signum: int, _frame: object) -> None:
    """SIGALRM: the lease ran out, unless the agent extended it meanwhile."""
    if host_lease_fd >= 0 and wait_for_lease():
        return
    write_status(f"{FENCED}\n")
    os.killpg(os.getpgrp(), _signal.SIGKILL)


def end_like(status: int) -> None:
    """Exit as the command did: with its code, or by its signal (no core of ours left behind)."""
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        try:
            import resource

            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        except (ImportError, OSError, ValueError):
            pass
        try:
            _signal.signal(signum, _signal.SIG_DFL)
        except (OSError, ValueError):  # SIGKILL and SIGSTOP have no handler to reset
            pass
        os.kill(os.getpid(), signum)
        os._exit(128 + signum)  # a signal that does not end a process by default
    os._exit(os.WEXITSTATUS(status))


def take_lease_fd() -> int:
    """The agent's lease file, kept from the command (which gets neither it nor its number)."""
    try:
        fd = int(os.environ.pop(LEASE_FD, ""))
        os.set_inheritable(fd, False)
    except (ValueError, OSError):
        return -1
    return fd


def main(command: list[str]) -> None:
    global host_lease_fd
    host_lease_fd = take_lease_fd()
    for signum in KILL_SIGNALS:
        _signal.signal(signum, _signal.SIG_IGN)
    _signal.signal(_signal.SIGUSR1, lease_news)
    _signal.signal(_signal.SIGALRM, lease_out)
    if host_lease_fd >= 0 and not wait_for_lease():
        lease_out(_signal.SIGALRM, None)  # out already: nothing starts
    try:
        pid = os.posix_spawnp(command[0], command, os.environ, setsigdef=KILL_SIGNALS + PYTHON_IGNORES)
    except (OSError, IndexError) as exc:
        write_status(f"error {exc}\n")
        os._exit(NOT_STARTED)
    while True:
        _, status = os.waitpid(pid, 0)
        if os.WIFEXITED(status) or os.WIFSIGNALED(status):
            break
    _signal.setitimer(_signal.ITIMER_REAL, 0)  # the run ended: nothing left to fence
    if os.WIFSIGNALED(status):
        write_status(f"signal {os.WTERMSIG(status)}\n")
    else:
        write_status(f"exit {os.WEXITSTATUS(status)}\n")
    end_like(status)


if __name__ == "__main__":
    main(sys.argv[1:])
