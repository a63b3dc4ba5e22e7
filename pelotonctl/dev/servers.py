"""Stopping the dev stack's processes (the stages together, then each server alone), starting one
of its own servers again on its data, and telling whether anything still uses a data folder."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from pelotonctl.dev.processes import alive


class StackError(RuntimeError):
    pass


def stop_together(components: list[dict], progress, timeout: float, restarting: bool = False) -> None:
    """SIGTERM to each running component at once (SIGHUP to an agent `restarting`: it hands its
    runs over to the next agent instead of ending them; SIGINT to PostgreSQL), then a wait of
    `timeout` for them all; those still running are killed. Says each one's end as it comes."""
    left = [c for c in components if c["pid"] and alive(c["pid"])]
    for c in left:
        sig = signal.SIGHUP if restarting and c["component"] == "agent" else signal.SIGTERM
        if c["component"] == "postgres":  # its fast shutdown: SIGTERM would wait for every client
            sig = signal.SIGINT
        if _is_group_leader(c["pid"]):  # started by us in its own session: reach its children too
            os.killpg(c["pid"], sig)
        else:
            os.kill(c["pid"], sig)
    deadline = time.monotonic() + timeout
    while left:
        for c in [c for c in left if not alive(c["pid"])]:
            left.remove(c)
            progress(f"{c.get('instance') or c['component']:<9} stopped")
        if not left or time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    for c in left:
        os.killpg(c["pid"], signal.SIGKILL)
        progress(f"{c.get('instance') or c['component']:<9} killed after {timeout:.0f}s")


def _is_group_leader(pid: int) -> bool:
    try:
        return os.getpgid(pid) == pid
    except ProcessLookupError:
        return False


def restartable(component: dict) -> bool:
    """A server of the stack's own that `dev restart` can start again on its data."""
    if component["component"] == "postgres":
        return all(component.get(k) for k in ("dir", "port", "options", "superuser"))
    return component["component"] == "zookeeper" and bool(component.get("dir"))


def restart_server(component: dict, progress) -> None:
    """The stack's PostgreSQL or ZooKeeper again, on its data and at its address."""
    if component["component"] == "postgres":
        from pelotonctl.dev.postgres import PostgresServer, PostgresUnavailable

        server = PostgresServer(Path(component["dir"]), component["port"], component["options"],
                                component["superuser"])
        try:
            server.start()
        except (PostgresUnavailable, OSError) as exc:
            raise StackError(f"postgres: {exc}") from None
        component["pid"] = server.pid
    else:
        from pelotonctl.dev.zookeeper import ZooKeeperError, start_zookeeper

        try:
            proc, _address = start_zookeeper(Path(component["dir"]), int(component["address"].rsplit(":", 1)[1]))
        except ZooKeeperError as exc:
            raise StackError(f"zookeeper: {exc}") from None
        component["pid"] = proc.pid
    progress(f"{component['component']:<9} running again on its data (pid {component['pid']})")


def processes_using(directory: Path) -> list[int]:
    """Live processes whose working directory, or a path on whose command line, lies in `directory`
    (a server started on it by hand, say): its data must not be removed under them."""
    real = str(directory.resolve())
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cwd = os.readlink(entry / "cwd")
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if cwd == real or cwd.startswith(real + "/") or real in cmdline:
            found.append(int(entry.name))
    return sorted(found)
