"""An agent's commands, decoded once: the AgentCommand for one of its hosts (opened with the
host's key when sealed), the LaunchRequest its driver runs for each AgentLaunch, and what
runs.json keeps of a launch so that a next agent can adopt its run and go on checking it."""

from __future__ import annotations

from collections.abc import Container
from typing import Protocol

from peloton.auth.host_keys import unseal
from peloton.host.driver import LaunchRequest
from peloton.model.resources import Resources
from peloton.model.volumes import mount_of
from peloton.serde import SchemaRegistry


class CommandMessage(Protocol):
    """A message read from the commands topic, as the agent uses it."""

    def value(self) -> bytes: ...

    def partition(self) -> int: ...

    def offset(self) -> int: ...

    def error(self) -> object: ...


def opened(serde: SchemaRegistry, value: bytes, hosts: Container[str], keys: dict[str, str]) -> tuple[str, dict]:
    """The record in a commands message, a sealed one (peloton/auth/host_keys.py) opened with its
    host's key when the host is one of ours: another host's is left sealed. Raises on a message
    that is undecodable, not what the schema promised, or sealed and not openable here."""
    name, cmd = serde.decode(value)
    if name == "peloton.SealedAgentCommand" and cmd["host_id"] in hosts:
        key = keys.get(cmd["host_id"])
        if key is None:
            raise ValueError("sealed, and this agent has no host key (PELOTON_HOST_KEY)")
        name, cmd = serde.decode(unseal(key, cmd["host_id"], cmd["sealed"]))
    return name, cmd


def addressed(name: str, cmd: dict, hosts: Container[str], fresh_since_ms: int) -> dict | None:
    """The AgentCommand when it is for one of these hosts and sent since `fresh_since_ms` (a first
    start reads nothing sent before it); else None (another host's, on the same partition)."""
    host_id = cmd.get("host_id") if name == "peloton.AgentCommand" else None
    if host_id not in hosts:
        return None
    if cmd["sent_ms"] < fresh_since_ms:
        return None
    return cmd


def launch_request(host_id: str, launch: dict) -> LaunchRequest:
    """What the driver runs for an AgentLaunch record."""
    return LaunchRequest(
        task_id=launch["task_id"], job_id=launch["job_id"], instance=launch["instance"], run_id=launch["run_id"],
        host_id=host_id, command=launch["command"], shell=launch["shell"],
        arguments=tuple(launch["arguments"]), environment=tuple(launch["environment"].items()),
        resources=Resources.from_record(launch["resources"]), kill_grace_seconds=launch["kill_grace_seconds"],
        user=launch["user"], image=launch.get("image", ""), health_check=launch.get("health_check_json"),
        volume=mount_of(launch.get("volume")), revocable=launch.get("revocable", False))


def run_entry(host_id: str, launch: dict, started: float) -> dict:
    """runs.json's entry of a launch (`started`: seconds since the epoch), with what a next agent
    needs to go on checking its health when it has a check."""
    run = {"job_id": launch["job_id"], "instance": launch["instance"], "run_id": launch["run_id"], "host": host_id}
    if launch.get("health_check_json"):
        run["health"] = {
            "check": launch["health_check_json"], "environment": launch["environment"],
            "user": launch["user"], "image": launch.get("image", ""),
            "kill_grace_seconds": launch["kill_grace_seconds"], "started": started}
    return run


def checked_request(task_id: str, run: dict, host_id: str) -> tuple[LaunchRequest, float] | None:
    """An adopted run with a health check, as the driver needs it to go on checking it, and
    when it started (seconds since the epoch: its first check waits for it as before); None for
    a run with no check."""
    health = run.get("health")
    if not isinstance(health, dict):
        return None
    try:
        return LaunchRequest(
            task_id=task_id, job_id=run["job_id"], instance=run["instance"], run_id=run["run_id"],
            host_id=host_id, command="", shell=True,
            environment=tuple(health["environment"].items()), user=health["user"], image=health["image"],
            kill_grace_seconds=health["kill_grace_seconds"], health_check=health["check"]), float(health["started"])
    except (KeyError, TypeError, ValueError, AttributeError):  # a runs.json of another release, or garbled
        return None
