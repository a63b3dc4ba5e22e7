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
# The status file holds one line: "exit N", "signal N", or "error TEXT" when the command could
# not be started (then the executor exits 127).

import os
import sys

import _signal

# Sent to the run's process group by a kill (and by a terminal, were there one): the command's.
KILL_SIGNALS = (_signal.SIGTERM, _signal.SIGINT, _signal.SIGHUP, _signal.SIGQUIT)
# Python ignores these itself; a command must start with them as a shell would start it.
PYTHON_IGNORES = (_signal.SIGPIPE, _signal.SIGXFSZ)
NOT_STARTED = 127


def write_status(path: str, line: str) -> None:
    """The status file, whole or not at all (a reader never sees half a line). Written into the
    task's own sandbox, where the task may have left anything under the names we use (as root, for
    a container's executor): a file made afresh, never one found there, nor a link followed."""
    tmp = f"{path}.tmp"
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
        os.replace(tmp, path)
    except OSError:
        pass  # a sandbox gone or full: the agent that watches us still reads our own exit


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


def main(argv: list[str]) -> None:
    status_path, command = argv[0], argv[1:]
    for signum in KILL_SIGNALS:
        _signal.signal(signum, _signal.SIG_IGN)
    try:
        pid = os.posix_spawnp(command[0], command, os.environ, setsigdef=KILL_SIGNALS + PYTHON_IGNORES)
    except (OSError, IndexError) as exc:
        write_status(status_path, f"error {exc}\n")
        os._exit(NOT_STARTED)
    while True:
        _, status = os.waitpid(pid, 0)
        if os.WIFEXITED(status) or os.WIFSIGNALED(status):
            break
    if os.WIFSIGNALED(status):
        write_status(status_path, f"signal {os.WTERMSIG(status)}\n")
    else:
        write_status(status_path, f"exit {os.WEXITSTATUS(status)}\n")
    end_like(status)


if __name__ == "__main__":
    main(sys.argv[1:])
