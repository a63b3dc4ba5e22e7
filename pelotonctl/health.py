"""What a job's status and its task list say about the cluster behind the job: the stages the job
waits on that have no live instance or do not keep up, and the hosts of its runs whose agents went
silent. Without this, a job whose statuses are no longer applied looks like a job that runs
("RUNNING 16") for as long as anyone looks.

Pure: the API gathers the inputs (its lag sampler's word on each stage, its view of host-state)
and answers the parts; the CLI prints them as lines:

    statuses not applied since 12:03:10: launch has no live instance
    host h3 silent since 12:02:55: its agent stopped reporting; 4 tasks of this job were there"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

from peloton.model.states import JOB_TERMINAL, UNPLACED, TaskState

STAGES = ("admit", "entitle", "place", "launch")  # in pipeline order
# The words of the lag sampler that mean a stage is not doing its part (OK and UNKNOWN say nothing).
TROUBLE = ("STOP", "STALL", "WARN", "ERR")
# What a job misses while the stage does not do its part: admit applies the task statuses to the
# store, launch turns its agents' reports into them; entitle admits pending tasks, place places them.
EFFECTS = {"admit": "statuses not applied", "entitle": "pending tasks not admitted",
           "place": "pending tasks not placed", "launch": "statuses not applied"}
# Tasks waiting for admission or a host: the job waits on entitle and place too.
WAITING = (TaskState.INITIALIZED, *UNPLACED)


@dataclass(frozen=True)
class StageHealth:
    """The lag sampler's word on one stage: its status, since when (ms), and why in a sentence."""

    stage: str
    status: str  # OK, WARN, STALL, STOP, ERR, UNKNOWN
    since_ms: int
    detail: str


def stages_of(job_state: str, task_counts: dict[str, int]) -> tuple[str, ...]:
    """The stages a job waits on now: none once it ended; admit and launch while it has runs (they
    carry its statuses); entitle and place too while some of its tasks wait for admission or a host."""
    if job_state in JOB_TERMINAL:
        return ()
    if any(task_counts.get(state) for state in WAITING):
        return STAGES
    return ("admit", "launch")


def why_not(health: StageHealth) -> str:
    """Why a stage is not doing its part, in a few words and its sampler's sentence."""
    if health.status == "STOP":
        return f"{health.stage} has no live instance"
    if health.status == "STALL":
        return f"{health.stage} is not reading its input: {health.detail}"
    if health.status == "WARN":
        return f"{health.stage} is not keeping up: {health.detail}"
    return f"{health.stage}'s offsets are wrong: {health.detail}"


def stage_problems(health: dict[str, StageHealth], stages: Iterable[str]) -> list[dict]:
    """Of the stages given, those not doing their part: each with its status, since when, what the
    job misses and why, in pipeline order."""
    found = []
    for stage in STAGES:
        h = health.get(stage)
        if stage not in stages or h is None or h.status not in TROUBLE:
            continue
        found.append({"stage": stage, "status": h.status, "since_ms": h.since_ms, "effect": EFFECTS[stage],
                      "why": why_not(h), "detail": h.detail})
    return found


def silent_hosts(host_states: Iterable[dict], job_id: str | None = None, host_ids: Iterable[str] = ()) -> list[dict]:
    """Hosts whose agent stopped reporting (DOWN, and not for maintenance: what runs there is not
    known), among those holding the job's runs (job_id) or named (host_ids); since when their host
    manager has said so, and how many runs of the job it holds there."""
    named = set(host_ids)
    found = []
    for h in host_states:
        if h.get("state") != "DOWN" or h.get("reachable", True):
            continue
        held = (h.get("job_tasks") or {}).get(job_id, 0) if job_id else 0
        if held or h["host_id"] in named:
            found.append({"host_id": h["host_id"], "since_ms": h["updated_ms"], "tasks": held})
    return sorted(found, key=lambda h: h["host_id"])


def clock(ms: int, now_ms: int | None = None) -> str:
    """A time of today as 12:03:10 (local time); of another day with its date."""
    at = time.localtime(ms / 1000)
    today = time.localtime((now_ms if now_ms is not None else time.time() * 1000) / 1000)
    return time.strftime("%H:%M:%S" if at[:3] == today[:3] else "%Y-%m-%d %H:%M:%S", at)


def health_lines(answer: dict, now_ms: int | None = None) -> list[str]:
    """What an answer's stage_problems and silent_hosts say, a line each."""
    lines = [f"{p['effect']} since {clock(p['since_ms'], now_ms)}: {p['why']}"
             for p in answer.get("stage_problems", [])]
    for h in answer.get("silent_hosts", []):
        held = f"; {h['tasks']} task{'' if h['tasks'] == 1 else 's'} of this job were there" if h.get("tasks") else ""
        lines.append(f"host {h['host_id']} silent since {clock(h['since_ms'], now_ms)}: its agent stopped reporting, "
                     f"so what runs there is not known{held}")
    return lines
