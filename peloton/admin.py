"""What pelotonctl does against the broker and the store: topics, pools, job submission."""

from __future__ import annotations

import uuid
from contextlib import contextmanager

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from peloton.config import Settings
from peloton.model.jobconfig import JobSpec, parse_job_config
from peloton.model.pool import PoolConfigError, leaf_pool_error, parse_pool_config
from peloton.model.resources import Resources
from peloton.runtime import CompactedView, DeliveryError, Emitter, RecordTooLarge, now_ms, producer_config
from peloton.serde import registry
from peloton.store import QueryStore
from peloton.topics import Catalogue, apply_topics
from stages.admit.checks import distinct_capacities, fit_problems, job_id_problem, size_problems
from stages.admit.expand import expand_job


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
    # A command line waits for the broker a bounded time, and what it reports must be what
    # happened: messages not delivered by then are given up (purged), not sent later.
    config = {**producer_config(settings), **QUIET, "message.timeout.ms": int(settings.flush_timeout_s * 1000)}
    return Emitter(Producer(config), Catalogue(settings.topic_prefix), registry(), who, settings.max_message_bytes)


def _deliver(out: Emitter, settings: Settings) -> None:
    """Send and wait; on failure nothing is left queued to arrive after we said it failed."""
    try:
        out.flush(timeout=settings.flush_timeout_s)
    except DeliveryError:
        out.producer.purge()
        out.producer.flush(0)
        raise


def create_pool(settings: Settings, store: QueryStore, path: str, text: str) -> dict:
    """Validate a respool config, then store and publish it as one step: the store keeps it only
    once the broker has it, so a reported failure leaves nothing behind and a retry can succeed.
    Creating a pool that exists with the same config again publishes it again (idempotent)."""
    try:
        config = parse_pool_config(text, path)
    except PoolConfigError as exc:
        raise UserError(str(exc)) from None
    with pool_tree_lock(settings):
        return _create_pool(settings, store, path, config)


@contextmanager
def pool_tree_lock(settings: Settings):
    """Pool-tree changes happen one at a time in the cluster: the check of the tree and the
    write must not interleave with another pelotonctl's. ZooKeeper's lock when there is one."""
    if not settings.zookeeper:
        yield
        return
    from peloton.registry import Registry

    with Registry(settings.zookeeper) as registry, registry.lock("pool-tree", timeout=settings.flush_timeout_s):
        yield


def _create_pool(settings: Settings, store: QueryStore, path: str, config: dict) -> dict:
    pools = store.list_pools()
    if config["parent"] != "/" and config["parent"] not in pools:
        raise UserError(f"parent pool {config['parent']!r} does not exist; create it first")
    if path in pools and _comparable(pools[path]) != _comparable(config):
        raise UserError(f"resource pool {path!r} already exists with another config")
    config["updated_ms"] = now_ms()
    out = emitter(settings)
    with store.transaction():
        store.put_pool(path, config)
        out.emit("pools", path, "peloton.PoolConfig", config)
        _deliver(out, settings)  # raises inside the transaction: the store rolls back
    return config


def _comparable(config: dict) -> dict:
    return {k: v for k, v in config.items() if k != "updated_ms"}


def validate_job(text: str, settings: Settings | None = None) -> JobSpec:
    from peloton.model.jobconfig import JobConfigError

    settings = settings or Settings()
    try:
        return parse_job_config(text, settings.job_limits(), settings.yaml_limits())
    except JobConfigError as exc:
        raise UserError(str(exc)) from None


def host_capacities(settings: Settings, wait_s: float = 3.0) -> list[Resources]:
    """Distinct host capacities from the host-state topic, as admit sees them (empty if none yet)."""
    view = CompactedView(settings, "host-state")
    try:
        view.catch_up(timeout=wait_s)
        return distinct_capacities(view.values.values())
    finally:
        view.close()


def check_job(settings: Settings, store: QueryStore, pool: str, text: str, job_id: str,
              hosts: list[Resources] | None = None) -> JobSpec:
    """Every check the job manager makes at create, so a job refused there is refused here."""
    spec = validate_job(text, settings)
    pools = store.list_pools()
    problem = job_id_problem(job_id) or leaf_pool_error(pools, pool)
    if problem:
        raise UserError(problem)
    if hosts is None:
        hosts = host_capacities(settings)
    job, tasks = expand_job(job_id, pool, spec, text, now_ms())
    problems = fit_problems(spec, pool, pools[pool], hosts) or size_problems(
        spec, job, tasks, registry(), settings.max_message_bytes)
    if problems:
        raise UserError("job refused: " + "; ".join(problems))
    return spec


def submit_job(settings: Settings, store: QueryStore, pool: str, text: str, job_id: str | None = None,
               out: Emitter | None = None, hosts: list[Resources] | None = None) -> str:
    """Check locally (clear errors, nothing sent), then publish a CREATE command.

    Pass `out` (and `hosts`) to submit many jobs through one producer (creating one costs about a
    second)."""
    job_id = job_id or str(uuid.uuid4())
    check_job(settings, store, pool, text, job_id, hosts)
    out = out or emitter(settings)
    try:
        out.emit("job-commands", job_id, "peloton.JobCommand", {
            "command_id": uuid.uuid4().hex, "kind": "CREATE", "job_id": job_id, "pool": pool, "config": text,
            "requested_by": "pelotonctl", "timestamp_ms": now_ms(),
        })
    except RecordTooLarge as exc:
        raise UserError(f"the job file is too large to submit: {exc}") from None
    _deliver(out, settings)
    return job_id
