"""Persistent volumes, one partition (bucket 0: a row per stateful instance, read whole for a
listing, by id for one)."""

from __future__ import annotations

from peloton.store.cassandra.session import TS, CassandraSession, insert_cql
from peloton.store.sql.volumes import VOLUME_COLS

_COLS = ", ".join(VOLUME_COLS)


class VolumesMixin(CassandraSession):
    def add_volumes(self, rows: list[dict]) -> None:
        # A volume deleted and made again (its job started after) is the new one.
        known = {v["volume_id"] for v in self.list_volumes() if v["state"] != "DELETED"} if rows else set()
        self._write(insert_cql("volumes", ("bucket", *VOLUME_COLS)),
                    [(0, *(r[c] for c in VOLUME_COLS), TS) for r in rows if r["volume_id"] not in known])

    def get_volume(self, volume_id: str) -> dict | None:
        rows = self._rows(f"SELECT {_COLS} FROM volumes WHERE bucket = 0 AND volume_id = ?", (volume_id,))
        return dict(zip(VOLUME_COLS, rows[0], strict=True)) if rows else None

    def list_volumes(self, job_id: str | None = None) -> list[dict]:
        rows = [dict(zip(VOLUME_COLS, r, strict=True)) for r in self._rows(
            f"SELECT {_COLS} FROM volumes WHERE bucket = 0")]
        rows = [r for r in rows if job_id is None or r["job_id"] == job_id]
        return sorted(rows, key=lambda r: (r["job_id"], r["instance"])) if job_id else rows

    def set_volume_state(self, volume_id: str, state: str, at_ms: int) -> None:
        if self.get_volume(volume_id) is not None:
            self._write("UPDATE volumes USING TIMESTAMP ? SET state = ?, updated_ms = ? WHERE bucket = 0 AND "
                        "volume_id = ?", [(TS, state, at_ms, volume_id)])
