"""Every decision the API makes, allowed or refused, appended to the audit topic with the
principal, the action, the object and the reason."""

from __future__ import annotations

import socket
import threading
import uuid

from peloton import metrics
from peloton.auth.tokens import Principal
from peloton.runtime import Emitter, now_ms


class Audit:
    """Sends each decision at once and waits for the broker: a decision that cannot be recorded
    is not carried out (the caller gets 503)."""

    def __init__(self, out: Emitter, flush_timeout_s: float, source: str | None = None):
        self.out = out
        self.flush_timeout_s = flush_timeout_s
        self.source = source or f"api@{socket.gethostname()}"
        self._lock = threading.Lock()  # one Emitter, many request threads

    def record(self, principal: Principal | None, action: str, obj: str, pool: str | None, allowed: bool,
               reason: str) -> None:
        event = {"event_id": uuid.uuid4().hex, "timestamp_ms": now_ms(),
                 "user": principal.user if principal else "", "groups": sorted(principal.groups) if principal else [],
                 "action": action, "object": obj, "pool": pool or "", "allowed": allowed, "reason": reason,
                 "source": self.source}
        with self._lock:
            self.out.emit("audit", event["user"], "peloton.AuditEvent", event)
            self.out.flush(self.flush_timeout_s)
        metrics.API_DECISIONS.labels(action, "allowed" if allowed else "refused").inc()
