"""Checks on gang records that every stage reading them applies."""

from __future__ import annotations

import math

# The resources record last found sound. A job's alike tasks read from one bundle share theirs
# (avrocodec's shared spans, read-only), and entitle, place and launch each check every task.
_SOUND: list = [None]


def task_problem(task: dict) -> str | None:
    """Why a TaskLaunchSpec record cannot be used, or None."""
    resources = task["resources"]
    if resources is _SOUND[0]:
        return None
    for kind, value in resources.items():
        if not math.isfinite(value) or value < 0:
            return f"task {task['task_id']}: {kind} must be a finite number >= 0, got {value}"
    _SOUND[0] = resources
    return None


def gang_problem(gang: dict) -> str | None:
    """Why a gang record (GangDemand, or the gang of an AdmittedGang) cannot be used, or None.

    The job manager only sends sound gangs; this guards against any other producer, since a NaN
    or negative demand would corrupt a ledger and never fit anywhere."""
    if not gang["tasks"]:
        return "a gang without tasks"
    for t in gang["tasks"]:
        problem = task_problem(t)
        if problem:
            return problem
        if t["job_id"] != gang["job_id"]:
            return f"task {t['task_id']} belongs to job {t['job_id']}, not to the gang's job {gang['job_id']}"
    return None
