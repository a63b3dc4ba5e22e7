"""The host manager asks a quiet host's agent over HTTP (its GET /v1/lease, stages/agent/logs.py)
how long its runs hold their lease, from a thread of its own so the stage's loop never waits on
an agent: silence.py reads the answers. An agent that does not answer is taken at its silence."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from peloton.host.lease_answer import ask

MAX_ASKING = 16


class LeaseProbes:
    def __init__(self, every_s: float) -> None:
        self.every_s = every_s
        self.holds_until: dict[str, float] = {}  # host -> time.monotonic() until which its runs hold
        self._wanted: dict[str, str] = {}  # host -> its agent's address, to ask
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def want(self, hosts: dict[str, str]) -> None:
        """Ask these hosts' agents (host -> address) from now on; the others no more."""
        with self._lock:
            self._wanted = {h: url for h, url in hosts.items() if url}
            for host_id in [h for h in self.holds_until if h not in hosts]:
                del self.holds_until[host_id]
        if self._wanted and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="launch-lease-probes", daemon=True)
            self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(2.0)

    def _run(self) -> None:
        with ThreadPoolExecutor(MAX_ASKING, thread_name_prefix="launch-lease-ask") as pool:
            while not self._stop.is_set():
                with self._lock:
                    wanted = dict(self._wanted)
                asked_at = time.monotonic()
                hosts = sorted(wanted)
                for host_id, said in zip(hosts, pool.map(ask, [wanted[h] for h in hosts]), strict=True):
                    holds = said.get("holds_runs_s") if said is not None else None
                    with self._lock:
                        if host_id not in self._wanted:
                            continue
                        if isinstance(holds, (int, float)) and not isinstance(holds, bool):
                            self.holds_until[host_id] = asked_at + float(holds)
                        else:
                            self.holds_until.pop(host_id, None)
                self._wake.wait(self.every_s)
