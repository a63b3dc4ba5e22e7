"""Checks on gang records that every stage reading them applies."""

from __future__ import annotations

import math


def task_problem(task: dict) -> str | None:
    """Why a TaskLaunchSpec record cannot be used, or None."""
    for kind, value in task["resources"].items():
        if not math.isfinite(value) or value < 0:
            return f"task {task['task_id']}: {kind} must be a finite number >= 0, got {value}"
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
