"""Claims, what stops a record read twice from acting twice: job commands' claims and refusals,
deleted jobs' ids, and launches (the LAUNCHES part); with them, hosts' maintenance states."""

from __future__ import annotations

import json

from peloton.store.base import CLAIMS_KEPT_MS, Launch
from peloton.store.rows import LAUNCH_COLS, json_text, launch_from_row, launch_params, placeholders
from peloton.store.sql.base import LAUNCHES, MAIN, SqlBase

_REFUSAL_COLS = ("job_id", "pool", "kind", "reason", "at_ms")


class ClaimsSql(SqlBase):
    SQL = {
        "commands_known": "SELECT command_id FROM job_commands WHERE command_id {list}",
        "claim_command": "INSERT INTO job_commands (command_id, job_id, at_ms) VALUES (?, ?, ?) "
                         "ON CONFLICT DO NOTHING{returning:command_id}",
        "refuse_command": "INSERT INTO refused_commands (command_id, job_id, pool, kind, reason, at_ms) "
                          "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
        "refusal": f"SELECT {', '.join(_REFUSAL_COLS)} FROM refused_commands WHERE command_id = ?",
        "claimed_command": "SELECT job_id, at_ms FROM job_commands WHERE command_id = ?",
        "forget_commands": "DELETE FROM job_commands WHERE at_ms < ?",
        "forget_deleted_jobs": "DELETE FROM deleted_jobs WHERE deleted_ms < ?",
        "forget_refusals": "DELETE FROM refused_commands WHERE at_ms < ?",
        "deleted_jobs": "SELECT job_id, deleted_ms FROM deleted_jobs WHERE job_id {list}",
        "launches_known": "SELECT task_id FROM launches WHERE task_id {list}",
        "claim_launch": f"INSERT INTO launches ({LAUNCH_COLS}) VALUES ({placeholders(LAUNCH_COLS, '?')}) "
                        "ON CONFLICT DO NOTHING{returning:task_id}",
        "end_launch": "UPDATE launches SET ended_ms = ?, final_status = ? WHERE task_id = ? AND ended_ms IS NULL",
        "active_launches": f"SELECT {LAUNCH_COLS} FROM launches WHERE ended_ms IS NULL AND host_id {{list}}",
        "active_launch_hosts": "SELECT DISTINCT host_id FROM launches WHERE ended_ms IS NULL",
        "ended_launches": "SELECT final_status FROM launches WHERE ended_ms >= ? AND final_status IS NOT NULL "
                          "AND host_id {list} ORDER BY ended_ms",
        "forget_launches": "DELETE FROM launches WHERE task_id IN (SELECT task_id FROM launches WHERE ended_ms < ? "
                           "LIMIT ?)",
        "host_up": "DELETE FROM host_maintenance WHERE host_id = ?",
        "host_state": "INSERT INTO host_maintenance (host_id, state, updated_ms) VALUES (?, ?, ?) "
                      "ON CONFLICT (host_id) DO UPDATE SET state = excluded.state, updated_ms = excluded.updated_ms",
        "host_states": "SELECT host_id, state FROM host_maintenance",
    }

    # -- job commands and deleted jobs (the job manager's) -----------------------------------
    def claim_commands(self, command_ids: list[str], job_ids: list[str], at_ms: int) -> set[str]:
        if not command_ids:
            return set()
        return self._insert_new(MAIN, self.q.commands_known, self.q.claim_command,
                                [(c, j, at_ms) for c, j in zip(command_ids, job_ids, strict=True)])

    def refuse_command(self, command_id: str, job_id: str, pool: str, kind: str, reason: str, at_ms: int) -> None:
        self._count(MAIN, self.q.refuse_command, (command_id, job_id, pool, kind, reason, at_ms))

    def command_outcome(self, command_id: str) -> dict | None:
        rows = self._rows(MAIN, self.q.refusal, (command_id,))
        if rows:
            return {"state": "refused", **dict(zip(_REFUSAL_COLS, rows[0], strict=True))}
        rows = self._rows(MAIN, self.q.claimed_command, (command_id,))
        return {"state": "applied", "job_id": rows[0][0], "at_ms": rows[0][1]} if rows else None

    def forget_claims(self, now_ms: int) -> int:
        before = (now_ms - CLAIMS_KEPT_MS,)
        with self.transaction():
            return (self._count(MAIN, self.q.forget_commands, before)
                    + self._count(MAIN, self.q.forget_deleted_jobs, before)
                    + self._count(MAIN, self.q.forget_refusals, before))

    def deleted_jobs(self, job_ids: list[str]) -> dict[str, int]:
        return dict(self._rows(MAIN, self.q.deleted_jobs, (self.dialect.list_param(job_ids),)))

    # -- launches (launch's) ------------------------------------------------------------------
    def claim_launches(self, rows: list[Launch]) -> set[str]:
        if not rows:
            return set()
        return self._insert_new(LAUNCHES, self.q.launches_known, self.q.claim_launch,
                                [launch_params(r) for r in rows])

    def end_launches(self, task_ids: list[str], ended_ms: int, final_status: dict[str, dict] | None = None) -> None:
        final_status = final_status or {}
        self._many(LAUNCHES, self.q.end_launch,
                   [(ended_ms, json_text(final_status[t]) if t in final_status else None, t) for t in task_ids])

    def active_launches(self, host_ids: list[str]) -> list[Launch]:
        return [launch_from_row(r) for r in self._rows(LAUNCHES, self.q.active_launches,
                                                       (self.dialect.list_param(host_ids),))]

    def active_launch_hosts(self) -> list[str]:
        return [r[0] for r in self._rows(LAUNCHES, self.q.active_launch_hosts)]

    def ended_launches(self, host_ids: list[str], since_ms: int) -> list[dict]:
        return [json.loads(r[0]) for r in self._rows(LAUNCHES, self.q.ended_launches,
                                                     (since_ms, self.dialect.list_param(host_ids)))]

    def forget_launches(self, now_ms: int, limit: int) -> int:
        return self._count(LAUNCHES, self.q.forget_launches, (now_ms - CLAIMS_KEPT_MS, limit))

    def set_host_state(self, host_id: str, state: str, at_ms: int) -> None:
        if state == "UP":
            self._count(MAIN, self.q.host_up, (host_id,))
        else:
            self._count(MAIN, self.q.host_state, (host_id, state, at_ms))

    def host_states(self) -> dict[str, str]:
        return dict(self._rows(MAIN, self.q.host_states))
