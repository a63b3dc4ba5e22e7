"""A pool's share, as the entitlement calculation gives it, set on the ledger its admissions are
judged by; and the records that preempt runs (a TASK_KILLING for the job manager, a TaskKill for
every host shard), whatever chose them."""

from __future__ import annotations

from typing import NamedTuple

from peloton.model.events import split_task_id, task_kill, task_status
from peloton.model.mesos import PREEMPTED, MesosState
from peloton.model.pool import pool_resources
from peloton.model.resources import ZERO
from stages.entitle.admission import Charge, PoolLedger
from stages.entitle.entitlement import PoolEntitlement


def apply_share(ledger: PoolLedger, share: PoolEntitlement | None, config: dict | None) -> bool:
    """The ledger's entitlement, its reservation and controller limit from the pool's share and
    config; True when the entitlement changed. A pool without either (gone) admits nothing more."""
    if share is None or config is None:
        ledger.entitlement = ledger.non_slack_entitlement = ledger.slack_entitlement = ZERO
        return False
    changed = (ledger.entitlement, ledger.non_slack_entitlement, ledger.slack_entitlement) != (
        share.entitlement, share.non_slack_entitlement, share.slack_entitlement)
    ledger.entitlement = share.entitlement
    ledger.non_slack_entitlement = share.non_slack_entitlement
    ledger.slack_entitlement = share.slack_entitlement
    ledger.reservation = pool_resources(config, "reservation")
    ledger.controller_limit_pct = config.get("controller_limit_pct", 100.0)
    return changed


class Preemption(NamedTuple):
    job_id: str
    task_id: str
    status: dict  # the TASK_KILLING TaskStatus that tells the job manager
    kill: dict  # the TaskKill for every host shard


def preemption_records(victims: list[Charge], why: str, at_ms: int) -> list[Preemption]:
    """What preempts each run `why`."""
    out = []
    for c in victims:
        job_id, instance, run_id = split_task_id(c.task_id)
        message = f"preempted: {why}"
        out.append(Preemption(job_id, c.task_id,
                    task_status(job_id, instance, run_id, c.task_id, "", MesosState.TASK_KILLING, PREEMPTED, message,
                                timestamp_ms=at_ms),
                    task_kill(job_id, instance, run_id, c.task_id, PREEMPTED, message, at_ms)))
    return out
