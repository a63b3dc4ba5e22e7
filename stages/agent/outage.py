"""Whether an agent whose reports stopped reaching the brokers is cut off alone, or is one of most
agents cut off at once (a control-plane outage: the brokers, or the network in front of them).
Plain arithmetic with no Kafka and no clock of its own; docs/concepts/delivery-and-fencing.md
gives the rule and its timings.

Cut off alone, its host manager calls it lost after the timeout and runs its tasks elsewhere, so
the agent fences at its lease's end. In an outage nobody can run anything elsewhere: the agent
keeps its runs (Lease.keep), as Kubernetes' node controller stops evicting when most of a zone's
nodes go silent at once. Both sides count the same thing the same way: an agent asks its peers
(over HTTP, stages/agent/peers.py) whether their reports reach the brokers; the host manager sees
whose reports it reads (stages/launch/silence.py). A peer counts as cut off only when it answers
so: one that does not answer (dead, frozen, or beyond a partition too) counts as reaching, which
errs toward fencing, the safe side.
"""

from __future__ import annotations

from collections.abc import Mapping


def reaching(ack_age_s: float, lease_s: float) -> bool:
    """Whether an agent whose last report was acknowledged `ack_age_s` ago reaches the brokers:
    one that reports every heartbeat and was answered within half a lease does."""
    return ack_age_s < lease_s / 2


def ask_ahead(lease_s: float) -> float:
    """How long before its lease ends an agent starts asking its peers (again every heartbeat):
    late enough that a peer cut off at the same moment says so (its last answer is then more than
    half a lease old)."""
    return 0.4 * lease_s


def decide_ahead(lease_s: float) -> float:
    """How long before its lease ends an agent may keep its runs (asking again at every step until
    the end): early enough that a loop slowed for a moment still extends the lease before its
    runs' executors read it at its end."""
    return 0.2 * lease_s


def most_cut_off(own_hosts: int, peers: Mapping[str, int], cut_off: Mapping[str, bool | None], up_hosts: int) -> bool:
    """Whether more than half of the cluster's hosts are cut off: this agent's own hosts, and those
    of every peer (its address -> how many hosts it serves) whose answer says it is cut off
    (True); `up_hosts`: every host not DOWN, this agent's included."""
    out = own_hosts + sum(n for url, n in peers.items() if cut_off.get(url) is True)
    return out * 2 > max(up_hosts, own_hosts)
