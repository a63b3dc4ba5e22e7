"""Task runs' launches by host, hosts' maintenance states (the LaunchStore role), and the claims
of job commands: the rows that make a record read twice act once. Claims, refusals and ended
launches expire by their rows' TTL (CLAIMS_KEPT_MS): forget_claims and forget_launches have nothing
to do here."""

from __future__ import annotations

import orjson

from peloton.store.base import CLAIMS_KEPT_MS, Launch
from peloton.store.cassandra.session import CLAIM, TS, CassandraSession, insert_cql
from peloton.store.rows import LAUNCH_COLS, json_text, launch_from_row, launch_params


def _ended_ttl(r: Launch) -> int:
    """The TTL (seconds) of a launch's rows: CLAIMS_KEPT_MS once it has ended, none before."""
    return CLAIMS_KEPT_MS // 1000 if r.ended_ms is not None else 0


class LaunchesMixin(CassandraSession):
    """A launch is claimed by a lightweight transaction after its rows are written."""

    # -- launches: by host -------------------------------------------------------------------
    # An ended run's rows expire CLAIMS_KEPT_MS after it ended, so a host's partition holds the
    # runs of that long. Its rows are written again at its end with the TTL: an UPDATE's TTL would
    # reach only the cells it sets, never the row. (TTL 0 is none: a run not ended.)
    def _launch_rows(self, rows: list[Launch], final_status: dict[str, dict]) -> None:
        """A run's row in its host's launches and in its job's, whole, with its TTL."""
        self._write(f"INSERT INTO launches ({LAUNCH_COLS}, final_status) VALUES ({', '.join('?' * 12)}) "
                    "USING TIMESTAMP ? AND TTL ?",
                    [(*launch_params(r), json_text(final_status[r.task_id]) if r.task_id in final_status else None,
                      TS, _ended_ttl(r)) for r in rows])
        self._write("INSERT INTO launches_by_job (job_id, task_id, instance) VALUES (?, ?, ?) "
                    "USING TIMESTAMP ? AND TTL ?", [(r.job_id, r.task_id, r.instance, TS, _ended_ttl(r)) for r in rows])

    def claim_launches(self, rows: list[Launch]) -> set[str]:
        """The launch rows first (the same whoever wins), then a claim per task run. A run claimed
        already keeps its rows: written again, an ended run's would start again (and lose their TTL)."""
        rows = list({r.task_id: r for r in rows}.values())
        claimed = {t for (t,) in self._rows_in("SELECT task_id FROM launch_claims WHERE task_id IN ?",
                                               [r.task_id for r in rows])}
        rows = [r for r in rows if r.task_id not in claimed]
        if not rows:
            return set()
        with self.transaction():
            self._launch_rows(rows, {})
            self._write(insert_cql("active_launches", "bucket, host_id, task_id"),
                        [(0, r.host_id, r.task_id, TS) for r in rows if r.ended_ms is None])
        applied = self._applied_each("INSERT INTO launch_claims (task_id, host_id) VALUES (?, ?) IF NOT EXISTS "
                                     "USING TTL ?", [(r.task_id, r.host_id, _ended_ttl(r)) for r in rows])
        return {r.task_id for r, ok in zip(rows, applied, strict=True) if ok}

    def end_launches(self, task_ids: list[str], ended_ms: int, final_status: dict[str, dict] | None = None) -> None:
        final_status = final_status or {}
        hosts = dict(self._rows_in("SELECT task_id, host_id FROM launch_claims WHERE task_id IN ?", task_ids))
        by_host: dict[str, list[str]] = {}
        for t, h in hosts.items():
            by_host.setdefault(h, []).append(t)
        running = [launch_from_row(r) for r in self._rows_each(
            f"SELECT {LAUNCH_COLS} FROM launches WHERE host_id = ? AND task_id IN ?",
            list(by_host.items())) if r[10] is None] if by_host else []
        for r in running:
            r.ended_ms = ended_ms
        with self.transaction():
            self._launch_rows(running, final_status)
            self._write("INSERT INTO launch_claims (task_id, host_id) VALUES (?, ?) USING TIMESTAMP ? AND TTL ?",
                        [(r.task_id, r.host_id, TS, _ended_ttl(r)) for r in running])
            self._write("DELETE FROM active_launches USING TIMESTAMP ? WHERE bucket = 0 AND host_id = ? "
                        "AND task_id = ?",
                        [(TS, r.host_id, r.task_id) for r in running])

    def active_launches(self, host_ids: list[str]) -> list[Launch]:
        rows = self._rows_each(f"SELECT {LAUNCH_COLS} FROM launches WHERE host_id = ?",
                               [(h,) for h in dict.fromkeys(host_ids)]) if host_ids else []
        return [launch_from_row(r) for r in rows if r[10] is None]

    def active_launch_hosts(self) -> list[str]:
        return list(dict.fromkeys(r[0] for r in self._rows("SELECT host_id FROM active_launches WHERE bucket = 0")))

    def ended_launches(self, host_ids: list[str], since_ms: int) -> list[dict]:
        rows = self._rows_each("SELECT ended_ms, final_status FROM launches WHERE host_id = ?",
                               [(h,) for h in dict.fromkeys(host_ids)]) if host_ids else []
        return [orjson.loads(s) for _e, s in sorted(r for r in rows if r[0] is not None and r[0] >= since_ms and r[1])]

    def forget_launches(self, now_ms: int, limit: int) -> int:
        return 0  # an ended run's rows carry their TTL (end_launches)

    # -- hosts' maintenance states ---------------------------------------------------------
    def set_host_state(self, host_id: str, state: str, at_ms: int) -> None:
        if state == "UP":
            self._write("DELETE FROM host_maintenance USING TIMESTAMP ? WHERE bucket = 0 AND host_id = ?",
                        [(TS, host_id)])
        else:
            self._write(insert_cql("host_maintenance", "bucket, host_id, state, updated_ms"),
                        [(0, host_id, state, at_ms, TS)])

    def host_states(self) -> dict[str, str]:
        return dict(self._rows("SELECT host_id, state FROM host_maintenance WHERE bucket = 0"))

    # -- job commands -----------------------------------------------------------------------
    def claim_commands(self, command_ids: list[str], job_ids: list[str], at_ms: int) -> set[str]:
        pairs = dict(zip(command_ids, job_ids, strict=True))
        if not pairs:
            return set()
        tx = self._tx()
        if tx is None:
            applied = self._applied_each("INSERT INTO job_commands (command_id, job_id, at_ms) VALUES (?, ?, ?) "
                                         "IF NOT EXISTS", [(c, j, at_ms) for c, j in pairs.items()])
            return {c for c, ok in zip(pairs, applied, strict=True) if ok}
        known = {r[0] for r in self._rows_in("SELECT command_id FROM job_commands WHERE command_id IN ?", pairs)}
        new = {c: j for c, j in pairs.items() if c not in known and c not in tx.commands}
        tx.commands |= set(new)
        self._write(insert_cql("job_commands", "command_id, job_id, at_ms"),
                    [(c, j, at_ms, TS) for c, j in new.items()], CLAIM)
        return set(new)

    def refuse_command(self, command_id: str, job_id: str, pool: str, kind: str, reason: str, at_ms: int) -> None:
        self._write(insert_cql("refused_commands", "command_id, job_id, pool, kind, reason, at_ms"),
                    [(command_id, job_id, pool, kind, reason, at_ms, TS)])

    def command_outcome(self, command_id: str) -> dict | None:
        rows = self._rows("SELECT job_id, pool, kind, reason, at_ms FROM refused_commands WHERE command_id = ?",
                          (command_id,))
        if rows:
            return {"state": "refused",
                    **dict(zip(("job_id", "pool", "kind", "reason", "at_ms"), rows[0], strict=True))}
        rows = self._rows("SELECT job_id, at_ms FROM job_commands WHERE command_id = ?", (command_id,))
        return {"state": "applied", "job_id": rows[0][0], "at_ms": rows[0][1]} if rows else None

    def forget_claims(self, now_ms: int) -> int:
        return 0  # the tables' default_time_to_live drops them (cassandra_schema, versions 2 and 3)
