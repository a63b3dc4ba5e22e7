"""What pelotonctl does against the broker and the store: topics, pools, job submission."""

from __future__ import annotations

import os
import time
import uuid
from contextlib import contextmanager
from dataclasses import asdict, replace

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from peloton.auth.signing import HEADER as SIGNATURE
from peloton.auth.signing import signature
from peloton.config import Settings
from peloton.model.jobconfig import parse_job_config
from peloton.model.jobspec import JobConfigError, JobSpec
from peloton.model.pool import (
    PoolConfigError,
    delete_problems,
    leaf_pool_error,
    parse_pool_config,
    same_pool,
    tree_problems,
)
from peloton.model.resources import Resources
from peloton.runtime import (
    QUIET,
    BrokerUnavailable,
    CompactedView,
    DeliveryError,
    Emitter,
    RecordTooLarge,
    kafka_access,
    now_ms,
    producer_config,
)
from peloton.serde import registry
from peloton.store import QueryStore
from peloton.topics import Catalogue, apply_topics
from stages.admit.checks import (
    deleted_id_problem,
    distinct_capacities,
    fit_problems,
    job_id_problem,
    size_problems,
)
from stages.admit.expand import expand_job
from stages.admit.workflow import UpdateOptions, options_problem, steer


class UserError(Exception):
    """Bad input from a user: printed as a clear message with exit code 2."""


class NotFound(UserError):
    """What the user named does not exist: exit code 3."""


class AlreadyExists(UserError):
    """An id that names something already (a job id taken): exit code 2, ALREADY_EXISTS over gRPC."""




def admin_client(settings: Settings) -> AdminClient:
    return AdminClient({**kafka_access(settings), "socket.timeout.ms": 10000, **QUIET})


def ensure_topics(settings: Settings) -> list[dict]:
    return apply_topics(admin_client(settings), Catalogue(settings.topic_prefix))


def emitter(settings: Settings, who: str = "pelotonctl") -> Emitter:
    # A command line waits for the broker a bounded time, and what it reports must be what
    # happened: messages not delivered by then are given up (purged), not sent later.
    config = {**producer_config(settings), **QUIET, "message.timeout.ms": int(settings.flush_timeout_s * 1000)}
    catalogue = Catalogue(settings.topic_prefix)
    out = Emitter(Producer(config), catalogue, registry(), who, settings.max_message_bytes)
    if settings.command_token:  # job commands go signed (peloton.auth.signing)
        commands, token = catalogue["job-commands"].name, settings.command_token
        out.headers_for = lambda topic, value: [(SIGNATURE, signature(token, value))] if topic == commands else None
    return out


def deliver(out: Emitter, settings: Settings) -> None:
    """Send and wait; on failure nothing is left queued to arrive after we said it failed."""
    try:
        out.flush(timeout=settings.flush_timeout_s)
    except DeliveryError:
        out.producer.purge()
        out.producer.flush(0)
        raise


def _parse_pool(text: str, path: str) -> dict:
    try:
        return parse_pool_config(text, path)
    except PoolConfigError as exc:
        raise UserError(str(exc)) from None


def _refuse(what: str, problems: list[str]) -> None:
    if problems:
        raise UserError(f"{what}:\n" + "\n".join(f"  {p}" for p in problems))


def create_pool(settings: Settings, store: QueryStore, path: str, text: str) -> dict:
    """Validate a respool config against the tree and store it: one row, so every stage sees the
    pool at its next read, or none does. Creating a pool again with the same config is a no-op."""
    config = _parse_pool(text, path)
    with pool_tree_lock(settings), store.transaction():
        store.lock_pool_tree()
        pools = store.list_pools()
        if path in pools and same_pool(pools[path], config):
            return pools[path]
        _refuse(f"resource pool {path} refused", tree_problems(
            pools, config, leaf_has_jobs=config["parent"] in store.pools_with_jobs()))
        config["updated_ms"] = now_ms()
        store.put_pool(path, config)
    return config


def update_pool(settings: Settings, store: QueryStore, path: str, text: str, force: bool = False) -> dict:
    """Replace a pool's config; the tree's rules hold unless forced (Peloton's --force)."""
    config = _parse_pool(text, path)
    with pool_tree_lock(settings), store.transaction():
        store.lock_pool_tree()
        pools = store.list_pools()
        if path not in pools:
            raise NotFound(f"no resource pool {path!r}")
        if not force:
            _refuse(f"resource pool {path} not updated", tree_problems(pools, config, update=True))
        config["updated_ms"] = now_ms()
        store.put_pool(path, config)
    return config


def delete_pool(settings: Settings, store: QueryStore, path: str) -> None:
    """Delete a leaf pool that has no job left to run."""
    with pool_tree_lock(settings), store.transaction():
        store.lock_pool_tree()
        pools = store.list_pools()
        if path not in pools and path != "/":
            raise NotFound(f"no resource pool {path!r}")
        _refuse(f"resource pool {path} not deleted",
                delete_problems(pools, path, has_jobs=path in store.pools_with_jobs()))
        store.delete_pool(path)


@contextmanager
def pool_tree_lock(settings: Settings, name: str = "pool-tree"):
    """Pool-tree changes (or host-pool ones: name "host-pools") happen one at a time in the
    cluster: the check and the write must not interleave with another pelotonctl's. ZooKeeper's
    lock when there is one (the store's own lock, taken inside, covers the pool tree without it)."""
    if not settings.zookeeper:
        yield
        return
    from peloton.registry import Registry

    with Registry(settings.zookeeper, auth=settings.zookeeper_auth) as registry, \
            registry.lock(name, timeout=settings.flush_timeout_s):
        yield


def pool_usage(settings: Settings, wait_s: float = 3.0) -> tuple[dict[str, dict], list[dict]]:
    """What entitle last published for each pool, and the host states: what `respool get`
    computes the tree from, as every entitle instance does."""
    usage = CompactedView(settings, "entitlements", quiet=True)
    hosts = CompactedView(settings, "host-state", quiet=True)
    try:
        usage.catch_up(timeout=wait_s)
        hosts.catch_up(timeout=wait_s)
        return dict(usage.values), list(hosts.values.values())
    finally:
        usage.close()
        hosts.close()


def pool_report(settings: Settings, store: QueryStore, path: str) -> dict:
    """`respool get`: a pool's reservation, limit and share, and its entitlement, allocation and
    demand now, per resource kind (computed from what entitle publishes, as entitle computes it)."""
    from stages.entitle.usage import pool_view

    pools = store.list_pools()
    if path != "/" and path not in pools:
        raise NotFound(f"no resource pool {path!r} (known pools: {', '.join(pools) or 'none'})")
    published, hosts = pool_usage(settings)
    return pool_view(pools, published, hosts)[path]


def validate_job(text: str, settings: Settings | None = None) -> JobSpec:
    from peloton.model.jobspec import JobConfigError

    settings = settings or Settings()
    try:
        return parse_job_config(text, settings.job_limits(), settings.yaml_limits())
    except JobConfigError as exc:
        raise UserError(str(exc)) from None


def host_capacities(settings: Settings, wait_s: float = 3.0) -> list[Resources]:
    """Distinct host capacities from the host-state topic, as admit sees them (empty if none yet)."""
    view = CompactedView(settings, "host-state", quiet=True)
    try:
        view.catch_up(timeout=wait_s)
        return distinct_capacities(view.values.values())
    finally:
        view.close()


def list_hosts(settings: Settings, wait_s: float = 3.0) -> list[dict]:
    """Every host as its host manager last reported it: state, total, allocated and free room,
    runs, labels (from the compacted host-state topic)."""
    view = CompactedView(settings, "host-state", quiet=True)
    try:
        if not view.catch_up(timeout=wait_s) and not view.values:
            raise BrokerUnavailable(f"host-state could not be read within {wait_s:g}s")
        records = list(view.values.values())
    finally:
        view.close()
    return [host_row(h) for h in sorted(records, key=lambda r: r["host_id"])]


def host_row(h: dict) -> dict:
    """A host-state record as `host list` and the dashboard show it."""
    total, allocated = Resources.from_record(h["capacity"]), Resources.from_record(h["allocated"])
    row = {"host_id": h["host_id"], "state": h["state"], "driver": h["driver"], "shard": h["shard"],
           "total": total.to_record(), "allocated": allocated.to_record(),
           "free": (total - allocated).to_record(), "tasks": h["task_count"], "labels": h["labels"],
           "updated_ms": h["updated_ms"], "runs_known": h.get("reachable", True)}
    # Revocable runs' cpu is on the host's slack: what non-revocable runs leave unallocated, and
    # what they hold but do not use (lent, as the host's agent measures it).
    lent, revocable = h.get("unused_cpu", 0.0), h.get("revocable_cpu", 0.0)
    row["slack"] = {"lent_cpu": lent, "revocable_cpu": revocable,
                    "free_cpu": round(max(0.0, total.cpu - allocated.cpu + lent - revocable), 3)}
    if not row["runs_known"]:  # its agent is silent: what still runs there is not known
        row.update(allocated=None, free=None, tasks=None, slack=None)
    return row


def with_drain_waits(settings: Settings, store: QueryStore, rows: list[dict]) -> list[dict]:
    """The hosts' rows, each with `waiting`: why runs still on a DRAINING host stay there for now
    (their job's disruption budget), as the job manager decides it (stages/admit/drain.py)."""
    from stages.admit.drain import ON_HOST, plan_drain

    draining = {r["host_id"] for r in rows if r["state"] == "DRAINING"}
    waits: dict[str, list[str]] = {}
    by_job: dict[str, set[str]] = {}
    for t in store.tasks_on_hosts(sorted(draining), list(ON_HOST)) if draining else []:
        by_job.setdefault(t.job_id, set()).add(t.host_id)
    for job_id in sorted(by_job):
        job = store.get_job(job_id)
        if job is None:
            continue
        try:
            budget = parse_job_config(job.config_text, settings.job_limits(),
                                      settings.yaml_limits()).max_unavailable_instances
        except JobConfigError:
            budget = 0
        tasks = store.tasks_of_job(job_id)
        plan = plan_drain(job_id, tasks, draining, budget)
        hosts = {t.task_id: t.host_id for t in tasks}
        for task_id, why in plan.waiting.items():
            waits.setdefault(hosts[task_id], []).append(f"{task_id}: {why}")
    return [{**r, "waiting": waits.get(r["host_id"], [])} for r in rows]


def maintenance_problem(hosts: list[dict], host_id: str, max_share: float) -> str | None:
    """Why draining `host_id` now would hurt more than an operator means to, or None: it is the
    last UP host (every running task would stop and nothing could run until maintenance ends), or
    it would put more than `max_share` of the hosts in maintenance at once."""
    up = [h["host_id"] for h in hosts if h["state"] == "UP"]
    if up == [host_id]:
        return (f"host {host_id} is the last UP host: draining it stops every running task, and nothing runs "
                f"until its maintenance completes")
    draining = {h["host_id"] for h in hosts if h["state"] in ("DRAINING", "DRAINED")} | {host_id}
    if len(draining) > max_share * len(hosts):
        return (f"draining {host_id} would put {len(draining)} of {len(hosts)} hosts in maintenance at once, above "
                f"the allowed share of {max_share:.0%} (PELOTON_MAX_DRAIN_SHARE)")
    return None


def request_maintenance(settings: Settings, host_id: str, action: str, who: str = "", force: bool = False) -> None:
    """Ask the host manager of the host's shard to drain it (START) or bring it back (COMPLETE).
    A drain maintenance_problem() objects to is refused (UserError) unless forced."""
    hosts = list_hosts(settings)
    if host_id not in {h["host_id"] for h in hosts}:
        raise NotFound(f"no host {host_id!r} is known (see `pelotonctl host list`)")
    if action == "START" and not force:
        problem = maintenance_problem(hosts, host_id, settings.max_drain_share)
        if problem:
            raise UserError(f"refused: {problem}; --force drains it anyway")
    out = emitter(settings)
    out.emit("placements", host_id, "peloton.HostMaintenance", {
        "request_id": uuid.uuid4().hex, "host_id": host_id, "action": action,
        "requested_by": who or os.environ.get("USER", ""), "sent_ms": int(time.time() * 1000)})
    deliver(out, settings)


def check_job(settings: Settings, store: QueryStore, pool: str, text: str, job_id: str,
              hosts: list[Resources] | None = None, may_read=None) -> JobSpec:
    """Every check the job manager makes at create, so a job refused there is refused here.
    may_read(pool) -> bool: whether the caller may read a job of that pool (an id taken by a job
    the caller may not read is said to be taken, and no more); None: the caller may read all."""
    spec = validate_job(text, settings)
    pools = store.list_pools()
    problem = job_id_problem(job_id) or leaf_pool_error(pools, pool)
    if problem:
        raise UserError(problem)
    if spec.respool is not None and "/" + spec.respool.strip("/") != pool:
        raise UserError(f"respoolid: the job file names pool {spec.respool}, but the job is created in {pool}: give "
                        "one pool (or leave respoolID out)")
    if (known := store.get_job(job_id)) is not None:
        if may_read is not None and not may_read(known.pool):
            raise AlreadyExists(f"job id {job_id} is taken: a job id names one job")
        raise AlreadyExists(f"job {job_id} exists already (in {known.pool}, {known.state}): a job id names one job")
    if deleted := store.deleted_jobs([job_id]):
        raise UserError(deleted_id_problem(job_id, deleted[job_id]))
    if hosts is None:
        hosts = host_capacities(settings)
    job, tasks = expand_job(job_id, pool, spec, text, now_ms())
    problems = fit_problems(spec, pool, pools[pool], hosts) or size_problems(
        spec, job, tasks, registry(), settings.max_message_bytes)
    if problems:
        raise UserError("job refused: " + "; ".join(problems))
    return spec


def submit_job(settings: Settings, store: QueryStore, pool: str, text: str, job_id: str | None = None,
               out: Emitter | None = None, hosts: list[Resources] | None = None, requested_by: str = "pelotonctl",
               command_id: str | None = None, may_read=None) -> str:
    """Check locally (clear errors, nothing sent), then publish a CREATE command.

    Pass `out` (and `hosts`) to submit many jobs through one producer (creating one costs about a
    second)."""
    job_id = job_id or str(uuid.uuid4())
    check_job(settings, store, pool, text, job_id, hosts, may_read)
    out = out or emitter(settings)
    try:
        out.emit("job-commands", job_id, "peloton.JobCommand", {
            "command_id": command_id or uuid.uuid4().hex, "kind": "CREATE", "job_id": job_id, "pool": pool,
            "config": text, "instances": None, "requested_by": requested_by, "timestamp_ms": now_ms(),
        })
    except RecordTooLarge as exc:
        raise UserError(f"the job file is too large to submit: {exc}") from None
    deliver(out, settings)
    return job_id


def _user(requested_by: str | None) -> str:
    import getpass

    if requested_by is not None:
        return requested_by
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "pelotonctl"


def control_job(settings: Settings, store: QueryStore, kind: str, job_id: str, instances: str | None = None,
                batch_size: int = 0, config: str | None = None, out: Emitter | None = None,
                requested_by: str | None = None, options: UpdateOptions | None = None) -> dict:
    """Check a STOP, START, RESTART, UPDATE or DELETE against the job as stored (the job manager
    checks it again the same way), then publish it. Returns what it will touch; a RESTART or an
    UPDATE is an update workflow whose id is its command id."""
    from stages.admit.commands import (
        CommandError,
        changed_instances,
        command_problem,
        daemon_problem,
        instance_ranges,
        to_restart,
        to_start,
        to_stop,
        update_config_problems,
        update_fields,
        update_problems,
    )

    job = store.get_job(job_id)
    problem = command_problem(kind, job, job_id)
    if problem:
        raise (NotFound if job is None else UserError)(problem)
    chosen = None
    if kind != "DELETE":
        try:
            chosen = instance_ranges(instances, job.instance_count)
        except CommandError as exc:
            raise UserError(str(exc)) from None
        if problem := daemon_problem(kind, job, chosen):
            raise UserError(problem)
    options = options or UpdateOptions(batch_size=batch_size)
    problem = options_problem(options)
    if problem:
        raise UserError(problem)
    tasks = store.tasks_of_job(job_id)
    if kind == "UPDATE":
        new = validate_job(config or "", settings)
        old = validate_job(job.config_text, settings)
        version, _ = update_fields(config or "")
        problems = update_problems(old, new, job.pool, job.config_version, version) + update_config_problems(
            config or "")
        if problems:
            raise UserError("update refused:\n" + "\n".join(f"  {p}" for p in problems))
        chosen = changed_instances(old, new)
        if job.type == "DAEMON":  # its template changed or not; every host's instance follows it
            chosen = [t.instance for t in tasks] if chosen else []
            old, new = replace(old, instance_count=job.instance_count), replace(new, instance_count=job.instance_count)
        touched = to_restart(tasks, chosen) if chosen else []
        added = list(range(old.instance_count, new.instance_count))
        removed = list(range(new.instance_count, old.instance_count))
    else:
        pick = {"STOP": to_stop, "START": to_start, "RESTART": to_restart}.get(kind, lambda ts, _i: ts)
        touched = pick(tasks, chosen)
    out = out or emitter(settings)
    command_id = uuid.uuid4().hex
    out.emit("job-commands", job_id, "peloton.JobCommand", {
        "command_id": command_id, "kind": kind, "job_id": job_id, "pool": job.pool, "config": config,
        "instances": instances or None, "requested_by": _user(requested_by), "timestamp_ms": now_ms(),
        **asdict(options),
    })
    deliver(out, settings)
    answer = {"job_id": job_id, "kind": kind, "command_id": command_id, "instances": [t.instance for t in touched]}
    if kind in ("RESTART", "UPDATE") or (kind in ("START", "STOP") and options.batch_size > 0):
        answer["update_id"] = command_id  # a workflow: `update get` follows it
    if kind == "UPDATE":
        answer["added"], answer["removed"] = added, removed
    return answer


def steer_update(settings: Settings, store: QueryStore, update_id: str, action: str, out: Emitter | None = None,
                 requested_by: str | None = None) -> dict:
    """PAUSE, RESUME, ABORT or ROLLBACK an update workflow: checked against it as stored (the job
    manager checks it again), then published."""
    wf = store.get_update(update_id)
    if wf is None:
        raise NotFound(f"no update {update_id}")
    user = _user(requested_by)
    _, problem = steer(wf, action, user, now_ms())
    if problem:
        raise UserError(problem)
    job = store.get_job(wf["job_id"])
    if job is None:
        raise NotFound(f"no job {wf['job_id']} (update {update_id})")
    out = out or emitter(settings)
    command_id = uuid.uuid4().hex
    out.emit("job-commands", job.job_id, "peloton.JobCommand", {
        "command_id": command_id, "kind": action, "job_id": job.job_id, "pool": job.pool, "update_id": update_id,
        "requested_by": user, "timestamp_ms": now_ms()})
    deliver(out, settings)
    return {"update_id": update_id, "job_id": job.job_id, "action": action, "command_id": command_id}
