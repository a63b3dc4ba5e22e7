"""What job status and task list add about the cluster behind a job (pelotonctl.health): the lag
sampler's word on the stages the job waits on, and its hosts whose agents are silent.

stage_health() is the one place the API reads the stages' words: the served API keeps it in
app.state.stage_health (server.py), bound to its lag sampler; an app without it (the tests')
tells no stage's word, and starts no sampler for it. Both sources are read as they are, never
waited for: the sampler's last word, and the host view polled (the served API reads it from its
start), so a read does not wait for the broker."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from confluent_kafka import KafkaException
from fastapi import Request

from pelotonctl.api.door import Door
from pelotonctl.api.operations import Operations
from pelotonctl.health import StageHealth, silent_hosts, stage_problems, stages_of

log = logging.getLogger("pelotonctl.api")

# What the API asks for the stages' words: no argument, an answer at once.
StageWords = Callable[[], dict[str, StageHealth]]


def stage_health(ops: Operations) -> dict[str, StageHealth]:
    """Each stage's status (OK, WARN, STALL, STOP, ERR, UNKNOWN), since when and why, as the API's
    lag sampler last saw it (Operations.stage_health: it never waits nor raises)."""
    return {stage: StageHealth(stage, status, int(since_s * 1000), detail)
            for stage, (status, since_s, detail) in ops.stage_health().items()}


async def stage_words_of(request: Request) -> StageWords | None:
    # async: read on the event loop, without a worker thread of its own
    return getattr(request.app.state, "stage_health", None)


def behind_the_job(door: Door, words: StageWords | None, job_id: str, job_state: str, task_counts: dict[str, int],
                   host_ids: Iterable[str] = ()) -> dict:
    """The stage_problems and silent_hosts of a job's answer (both empty when all is well)."""
    health: dict[str, StageHealth] = {}
    if words is not None:
        try:
            health = words()
        except Exception:  # a read answers without the stages' words rather than not at all
            log.exception("the stages' health could not be read")
    try:
        hosts = door.hosts()
    except KafkaException as exc:
        log.warning("the host view could not be read: %s", exc)
        hosts = []
    return {"stage_problems": stage_problems(health, stages_of(job_state, task_counts)),
            "silent_hosts": silent_hosts(hosts, job_id, host_ids)}
