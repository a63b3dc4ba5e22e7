"""An answer other than 200 that a route or the door raises: its status and the reason the caller
reads (app.py answers it so). Apart from door.py, so the store guard below the door can raise one."""

from __future__ import annotations


class Refused(Exception):
    """An answer other than 200: the status and the reason the caller reads."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason
