"""What pelotonctl does against the broker and the store: topics, pools, job submission."""

from __future__ import annotations

import uuid

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from peloton.config import Settings
from peloton.model.jobconfig import JobSpec, parse_job_config
from peloton.model.pool import PoolConfigError, leaf_pool_error, parse_pool_config
from peloton.runtime import Emitter, now_ms, producer_config
from peloton.serde import registry
from peloton.store import StorageGateway
from peloton.topics import Catalogue, apply_topics


class UserError(Exception):
    """Bad input from a user: printed as a clear message with exit code 2."""


# A command line prints its own one-line error; librdkafka's reconnect chatter (one line per
# attempt, every 50 ms) would bury it, so CLI clients log only librdkafka's critical messages.
QUIET = {"log_level": 2}


def admin_client(settings: Settings) -> AdminClient:
    return AdminClient({"bootstrap.servers": settings.bootstrap, "socket.timeout.ms": 10000, **QUIET})


def ensure_topics(settings: Settings) -> list[dict]:
    return apply_topics(admin_client(settings), Catalogue(settings.topic_prefix))


def emitter(settings: Settings, who: str = "pelotonctl") -> Emitter:
    return Emitter(Producer({**producer_config(settings), **QUIET}), Catalogue(settings.topic_prefix), registry(), who)


def create_pool(settings: Settings, store: StorageGateway, path: str, text: str) -> dict:
    """Validate a respool config, store it, and publish it for the entitle stage."""
    try:
        config = parse_pool_config(text, path)
    except PoolConfigError as exc:
        raise UserError(str(exc)) from None
    pools = store.list_pools()
    if config["parent"] != "/" and config["parent"] not in pools:
        raise UserError(f"parent pool {config['parent']!r} does not exist; create it first")
    if path in pools:
        raise UserError(f"resource pool {path!r} already exists")
    config["updated_ms"] = now_ms()
    store.put_pool(path, config)
    out = emitter(settings)
    out.emit("pools", path, "peloton.PoolConfig", config)
    out.flush(timeout=10)
    return config


def validate_job(text: str) -> JobSpec:
    from peloton.model.jobconfig import JobConfigError

    try:
        return parse_job_config(text)
    except JobConfigError as exc:
        raise UserError(str(exc)) from None


def submit_job(settings: Settings, store: StorageGateway, pool: str, text: str, job_id: str | None = None,
               out: Emitter | None = None) -> str:
    """Validate locally (clear errors, nothing sent), then publish a CREATE command.

    Pass `out` to submit many jobs through one producer (creating one costs about a second)."""
    validate_job(text)
    problem = leaf_pool_error(store.list_pools(), pool)
    if problem:
        raise UserError(problem)
    job_id = job_id or str(uuid.uuid4())
    out = out or emitter(settings)
    out.emit("job-commands", job_id, "peloton.JobCommand", {
        "command_id": uuid.uuid4().hex, "kind": "CREATE", "job_id": job_id, "pool": pool, "config": text,
        "requested_by": "pelotonctl", "timestamp_ms": now_ms(),
    })
    out.flush(timeout=10)
    return job_id
