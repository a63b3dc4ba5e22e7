"""An agent's AgentReport records, built from what it holds now, and the keys they are signed
with: plain functions, no Kafka."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from peloton.auth.host_keys import host_key
from peloton.config import Settings
from peloton.host.driver import RunUse, TaskUpdate
from stages.agent.spec import AgentSpec


def update_record(u: TaskUpdate) -> dict:
    """A status update as an AgentReport carries it."""
    return {"task_id": u.task_id, "state": u.state, "reason": u.reason, "message": u.message,
            "exit_code": u.exit_code, "signal": u.signal, "timestamp_ms": u.timestamp_ms, "health": u.health}


def updates_by_host(updates: Iterable[TaskUpdate]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for u in updates:
        out.setdefault(u.host_id, []).append(update_record(u))
    return out


def running_by_host(task_ids: Iterable[str], host_of: Callable[[str], str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for task_id in task_ids:
        out.setdefault(host_of(task_id), []).append(task_id)
    return out


def report_record(spec: AgentSpec, agent_id: str, running: Iterable[str], updates: list[dict],
                  commands_read: int | None, log_url: str, sent_ms: int, usage: list[dict] | None = None) -> dict:
    """One host's AgentReport: its resources and labels, every run it has now, the updates since
    its last report, where the agent's reader stands in the host's commands partition (every
    command before it handled: the host manager gives up a launch the agent does not run only once
    the agent has read past it), and what its runs measured use (at heartbeats)."""
    return {"host_id": spec.name, "agent_id": agent_id, "capacity": spec.capacity.to_record(),
            "labels": spec.labels, "running": sorted(running),
            "port_ranges": [{"low": low, "high": high} for low, high in spec.port_ranges],
            "updates": updates, "usage": usage or [], "sent_ms": sent_ms, "commands_read": commands_read,
            "log_url": log_url}


def usage_by_host(usage: Mapping[str, RunUse], host_of: Callable[[str], str]) -> dict[str, list[dict]]:
    """Each host's RunUsage records."""
    out: dict[str, list[dict]] = {}
    for task_id, use in usage.items():
        out.setdefault(host_of(task_id), []).append(
            {"task_id": task_id, "cpu": round(use.cpu, 3), "mem_mb": round(use.mem_mb, 1), "revocable": use.revocable})
    return out


def report_keys(settings: Settings, hosts: list[str]) -> dict[str, str]:
    """Each host's key its reports are signed with: this host's own (PELOTON_HOST_KEY), or, for a
    process that simulates many hosts, each derived from the cluster's (PELOTON_AGENT_REPORT_KEY).
    None given: reports go unsigned (a host manager that checks them refuses them)."""
    if settings.host_key:
        return dict.fromkeys(hosts, settings.host_key)
    if settings.agent_report_key:
        return {h: host_key(settings.agent_report_key, h) for h in hosts}
    return {}
