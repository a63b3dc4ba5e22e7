"""Peloton's TerminationStatus words for how a run ended (api/v0/task TerminationStatus.Reason), from
the run's state and our reason. Shown beside the reason, so scripts written for Peloton find the
words they know."""

from __future__ import annotations

# Our reasons of a kill (the job manager's words, stages/admit/lifecycle.py) -> Peloton's.
_KILL_REASONS = {
    "STOPPED": "TERMINATION_STATUS_REASON_KILLED_ON_REQUEST",
    "PREEMPTED": "TERMINATION_STATUS_REASON_PREEMPTED_RESOURCES",
    "HOST_MAINTENANCE": "TERMINATION_STATUS_REASON_KILLED_HOST_MAINTENANCE",
    "DEADLINE_EXCEEDED": "TERMINATION_STATUS_REASON_DEADLINE_TIMEOUT_EXCEEDED",
    "RESTARTED": "TERMINATION_STATUS_REASON_KILLED_FOR_RESTART",
}


def termination_status(state: str, reason: str | None) -> str:
    """Peloton's TerminationStatus reason of a run in `state` ended for `reason`; '' for a run that
    has not ended, succeeded, or was lost (Peloton gives those none)."""
    if state == "FAILED":
        return "TERMINATION_STATUS_REASON_FAILED"
    if state == "KILLED":
        return _KILL_REASONS.get(reason or "", "TERMINATION_STATUS_REASON_KILLED_ON_REQUEST")
    if state == "DELETED":  # removed by an update that shrank the job
        return "TERMINATION_STATUS_REASON_KILLED_FOR_UPDATE"
    return ""
