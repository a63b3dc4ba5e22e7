"""Persistent volumes: each instance's, written by the host manager when it first launches a run
with it and marked DELETED when an operator or a job's deletion removes it."""

from __future__ import annotations

from peloton.store.sql.base import MAIN, SqlBase

VOLUME_COLS = ("volume_id", "job_id", "instance", "host_id", "container_path", "size_mb", "state", "created_ms",
               "updated_ms")
_COLS = ", ".join(VOLUME_COLS)


class VolumesSql(SqlBase):
    SQL = {
        # A volume deleted and made again (its job started after) is the new one.
        "add_volume": f"INSERT INTO volumes ({_COLS}) VALUES ({', '.join('?' * len(VOLUME_COLS))}) "
                      "ON CONFLICT (volume_id) DO UPDATE SET host_id = excluded.host_id, state = excluded.state, "
                      "created_ms = excluded.created_ms, updated_ms = excluded.updated_ms "
                      "WHERE volumes.state = 'DELETED'",
        "volume": f"SELECT {_COLS} FROM volumes WHERE volume_id = ?",
        "volumes": f"SELECT {_COLS} FROM volumes ORDER BY volume_id",
        "volumes_of_job": f"SELECT {_COLS} FROM volumes WHERE job_id = ? ORDER BY instance",
        "volume_state": "UPDATE volumes SET state = ?, updated_ms = ? WHERE volume_id = ?",
    }

    def add_volumes(self, rows: list[dict]) -> None:
        self._many(MAIN, self.q.add_volume, [tuple(r[c] for c in VOLUME_COLS) for r in rows])

    def get_volume(self, volume_id: str) -> dict | None:
        rows = self._rows(MAIN, self.q.volume, (volume_id,))
        return dict(zip(VOLUME_COLS, rows[0], strict=True)) if rows else None

    def list_volumes(self, job_id: str | None = None) -> list[dict]:
        rows = self._rows(MAIN, self.q.volumes_of_job, (job_id,)) if job_id else self._rows(MAIN, self.q.volumes)
        return [dict(zip(VOLUME_COLS, r, strict=True)) for r in rows]

    def set_volume_state(self, volume_id: str, state: str, at_ms: int) -> None:
        self._count(MAIN, self.q.volume_state, (state, at_ms, volume_id))
