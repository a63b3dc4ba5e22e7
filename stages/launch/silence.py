"""The host manager's judgement of its agents' silence, as plain arithmetic (no Kafka, no clock of
its own). docs/concepts/delivery-and-fencing.md gives the rule and its timings; the agents'
side is stages/agent/outage.py.

A host whose agent sent no report for the timeout is lost (DOWN, its runs run elsewhere), unless:
- most of the hosts this host manager serves went quiet at once (none heard for half a lease): a
  control-plane outage, in which the agents keep their runs; nothing is judged lost until it ends,
  and then every host still silent has a whole timeout again to report;
- its agent, asked over HTTP, says its runs still hold a lease (one kept through an outage it
  sees, or a report that has not arrived yet): judged again once that has run out;
and never once a host has been silent for the timeout plus the outage limit: by then its agent
has fenced, whatever it saw.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Silence:
    lost: list[str] = field(default_factory=list)  # hosts to call DOWN now
    kept: dict[str, str] = field(default_factory=dict)  # silent hosts not called DOWN yet -> why
    outage: bool = False  # most hosts quiet at once
    quiet: list[str] = field(default_factory=list)  # hosts unheard for half a lease: their agents are asked


def quiet_after(lease_s: float) -> float:
    """How long unheard a host counts as quiet toward an outage: as its agent's peers judge it
    (stages/agent/outage.py reaching)."""
    return lease_s / 2


def judge(seen: Mapping[str, float], down: set[str], now: float, timeout_s: float, lease_s: float, limit_s: float,
          holds_until: Mapping[str, float]) -> Silence:
    """`seen`: host -> when its last report was read; `holds_until`: host -> until when its agent
    said (when last asked) its runs hold their lease."""
    watched = [h for h in seen if h not in down]
    quiet = [h for h in watched if now - seen[h] > quiet_after(lease_s)]
    outage = limit_s > 0 and len(quiet) * 2 > len(watched)
    lost, kept = [], {}
    for host_id in quiet:
        silent_s = now - seen[host_id]
        if silent_s <= timeout_s:
            continue
        if silent_s > timeout_s + limit_s:
            lost.append(host_id)
        elif outage:
            kept[host_id] = f"{len(quiet)} of {len(watched)} hosts are silent at once: a control-plane outage"
        elif holds_until.get(host_id, 0.0) > now:
            kept[host_id] = (f"its agent says its runs hold their lease for "
                             f"{holds_until[host_id] - now:.0f}s more")
        else:
            lost.append(host_id)
    return Silence(lost, kept, outage, quiet)
