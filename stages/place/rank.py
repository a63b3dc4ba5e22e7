"""Rankers: among the hosts that passed every check, which one takes the task. Pure: no Kafka.

A ranker turns a feasible host into a sort key; the smallest key wins. SPREAD's keys end with the
host id; PACK's leave a tie to the host's place on the instance's ring (the candidate's index).
Either way no two candidates are equal and the choice never depends on the order hosts were
looked at. A host in the gang's `avoid` set (where an earlier run of one of its tasks failed)
sorts after every other host whatever the strategy: it is taken only when nothing else fits.
"""

from __future__ import annotations

from collections.abc import Callable

from peloton.model.resources import Resources
from stages.place.checks import Tentative
from stages.place.host_view import HostView
from stages.place.task_need import TaskNeed

PACK = "PACK_HOST"
SPREAD = "SPREAD_JOB"

# (task, host, the host's free room net of the gang's share, the gang's share, avoided) -> key
Ranker = Callable[["TaskNeed", "HostView", Resources, "Tentative | None", bool], tuple]


def most_allocated_first(need: TaskNeed, host: HostView, free: Resources, share: Tentative | None,
                         avoided: bool) -> tuple:
    """PACK (Nomad's bin packing): the host with the least cpu left once the task is on it, so a
    host fills up before the next one is started and whole hosts stay free for big tasks. Among
    hosts alike (most often: empty ones) the ring's order decides, not the host id: the ring deals
    the host shards in turn, so the hosts a burst fills one after another are of different shards
    and every host manager instance gets its part. (By id, the window of candidates ranked held
    each shard's run of hosts, and the shard with the most hosts had the lowest ids in it: in a
    bench with two launch instances, every placement went to one.)"""
    return (avoided, free.cpu - need.resources.cpu)


def fewest_of_the_job_first(need: TaskNeed, host: HostView, free: Resources, share: Tentative | None,
                            avoided: bool) -> tuple:
    """SPREAD (Nomad's job anti-affinity): the host with the fewest tasks of the task's job,
    counting the gang's own; among those, the most free room once the task is on it (disk, then
    memory, cpu and gpu, as Peloton's worst fit orders them)."""
    job = need.job_id
    same_job = host.job_tasks.get(job, 0) + (share.job_tasks.get(job, 0) if share is not None else 0)
    r = need.resources
    return (avoided, same_job, r.disk_mb - free.disk_mb, r.mem_mb - free.mem_mb, r.cpu - free.cpu,
            r.gpu - free.gpu, host.host_id)


def spreads(strategy: str) -> bool:
    """SPREAD_JOB spreads; PACK_HOST and anything else packs (the batch default)."""
    return strategy == SPREAD or strategy == "SPREAD"


def ranker_for(strategy: str) -> Ranker:
    return fewest_of_the_job_first if spreads(strategy) else most_allocated_first
