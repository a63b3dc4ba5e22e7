"""What an agent answers about its lease over HTTP (GET /v1/lease, served beside its runs' output:
stages/agent/logs.py), and how its peers and the host managers ask: whether its reports reach the
brokers, and how much longer its runs may go on (docs/concepts/delivery-and-fencing.md)."""

from __future__ import annotations

import json
import urllib.request

LEASE_PATH = "/v1/lease"
ASK_TIMEOUT_S = 0.5


def ask(url: str, timeout_s: float = ASK_TIMEOUT_S) -> dict | None:
    """What the agent at `url` says of its lease ({"reaching": bool, "holds_runs_s": float,
    "hosts": N}), or None: no answer."""
    try:
        with urllib.request.urlopen(f"{url}{LEASE_PATH}", timeout=timeout_s) as answer:
            said = json.loads(answer.read(4096))
        return said if isinstance(said, dict) else None
    except (OSError, ValueError):
        return None
