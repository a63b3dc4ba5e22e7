"""An agent's peers: the other agents of the cluster, known from host-state (each host's state and
where its agent answers), asked over HTTP whether their reports reach the brokers when this
agent's own stop reaching them (stages/agent/outage.py says what the answers mean).

A thread of its own reads host-state and asks, so the agent's loop never waits on either; what it
learnt last stays known while the brokers are away (which is when it is needed).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from peloton.host.lease_answer import ask
from stages.agent.outage import most_cut_off

log = logging.getLogger("peloton.agent")

READ_EVERY_S = 2.0  # how often host-state is read for hosts that came or went
STALE_AFTER_S = 2 * READ_EVERY_S + 1.0  # what was read longer ago says the agent was stopped meanwhile
MAX_ASKING = 16  # peers asked at once


class Peers:
    """The cluster's hosts as host-state tells them, and the last answer of each peer agent."""

    def __init__(self, view_factory: Callable[[], Any], own_hosts: set[str], own_url: str, heartbeat_s: float):
        self._view_factory = view_factory
        self.own_hosts, self.own_url, self.heartbeat_s = own_hosts, own_url, heartbeat_s
        self.hosts: dict[str, tuple[str, str]] = {}  # host id -> (state, its agent's address)
        self.answers: dict[str, tuple[float, bool | None]] = {}  # address -> (asked at, cut off?)
        self.read_at: float | None = None  # when host-state was last read (time.monotonic())
        self._asking_until = 0.0
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="agent-peers", daemon=True)

    def start(self) -> Peers:
        self._thread.start()
        return self

    def ask_until(self, until: float) -> None:
        """Ask every peer, again every heartbeat, until `until` (time.monotonic())."""
        if until > self._asking_until:
            self._asking_until = until
            self._wake.set()

    def outage(self, now: float, fresh_s: float) -> tuple[bool, str]:
        """Whether most of the cluster is cut off, from answers younger than `fresh_s`, and the
        sentence that says so. Never when this thread has not read host-state lately: then this
        agent itself was stopped (frozen, stalled), and what it knows of its peers is old."""
        if self.read_at is None or now - self.read_at > STALE_AFTER_S:
            return False, "its peers unknown or not read for a while (this agent was frozen or stalled)"
        up = {h: url for h, (state, url) in list(self.hosts.items()) if state != "DOWN"}
        up.update(dict.fromkeys(self.own_hosts, self.own_url))
        peers: dict[str, int] = {}
        for host_id, url in up.items():
            if host_id not in self.own_hosts and url and url != self.own_url:
                peers[url] = peers.get(url, 0) + 1
        answers = dict(self.answers)
        cut_off = {url: said for url, (at, said) in answers.items() if now - at <= fresh_s}
        out = sum(n for url, n in peers.items() if cut_off.get(url) is True)
        silent = sum(n for url, n in peers.items() if url not in cut_off or cut_off[url] is None)
        verdict = most_cut_off(len(self.own_hosts), peers, cut_off, len(up))
        return verdict, (f"{len(self.own_hosts) + out} of {len(up)} hosts cut off from the brokers "
                         f"({len(self.own_hosts)} here, {out} by their agents' word; {silent} hosts' agents "
                         f"did not answer and count as reaching them)")

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(2.0)

    def _run(self) -> None:
        view = None
        next_read = 0.0
        with ThreadPoolExecutor(MAX_ASKING, thread_name_prefix="agent-peer-ask") as pool:
            while not self._stop.is_set():
                now = time.monotonic()
                if now >= next_read:
                    next_read = now + READ_EVERY_S
                    view = self._read(view)
                if now < self._asking_until:
                    self._ask_all(pool)
                    self._wake.wait(self.heartbeat_s)
                else:
                    self._wake.wait(READ_EVERY_S)
                self._wake.clear()
        if view is not None:
            view.close()

    def _read(self, view: Any) -> Any:
        """host-state's news, read without waiting (the brokers may be away: what is known stays)."""
        try:
            if view is None:
                view = self._view_factory()
            view.poll(timeout=0.0)
            self.hosts = {h: (str(v.get("state") or ""), str(v.get("log_url") or "")) for h, v in view.values.items()}
            self.read_at = time.monotonic()
        except Exception as exc:  # a reader that failed is made again at the next read
            log.warning("cannot read host-state for the agent's peers: %s", exc)
            return None
        return view

    def _ask_all(self, pool: ThreadPoolExecutor) -> None:
        urls = sorted({url for h, (state, url) in self.hosts.items()
                       if url and url != self.own_url and h not in self.own_hosts and state != "DOWN"})
        for url, said in zip(urls, pool.map(ask, urls), strict=True):
            cut_off = None if said is None else said.get("reaching") is False
            self.answers[url] = (time.monotonic(), cut_off)
