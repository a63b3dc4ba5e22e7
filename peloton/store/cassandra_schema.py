"""The Cassandra backend's tables: laid out for the reads the stages make, not copied from SQL.

Every read names its partition: a job's tasks, events, updates and configs live in the job's
partition; a pool's queue and charges in the pool's (so admitting a gang is one conditional
batch); a host's launches in the host's. What SQL would find with an index is a table of its
own, written beside the row it points at: `active_jobs` (every job not ended), `jobs_by_day`
(newest first, for listings), `tasks_by_state` and `tasks_by_host` (the launch deadlines and
drains), `ledger_index` (a task or gang id -> its pool). Index rows are checked against the row
they point at when read, and a stale one is dropped then (see CassandraStore._checked).

Small tables that are read whole (pools, tokens, hosts in maintenance, the days that have jobs)
are one partition each: `bucket` is always 0. Tables whose index a busy cluster writes on every
status (`active_jobs`, `tasks_by_state`) spread over BUCKETS partitions by job id.
"""

from __future__ import annotations

from peloton.store.base import CLAIMS_KEPT_MS

BUCKETS = 8

# Made before any migration, as the lock and the version the migrations run under.
BOOTSTRAP = [
    "CREATE TABLE IF NOT EXISTS locks (name text PRIMARY KEY, owner text)",
    "CREATE TABLE IF NOT EXISTS schema_version (name text PRIMARY KEY, version int)",
]

# Migrations in order; the list index + 1 is the schema version each brings. Each is a list of
# statements (CQL runs one per request); IF NOT EXISTS makes a migration cut short by a crash
# safe to run again.
MIGRATIONS: list[list[str]] = [
    [
        "CREATE TABLE IF NOT EXISTS pools (bucket int, path text, config text, updated_ms bigint, "
        "PRIMARY KEY (bucket, path))",
        "CREATE TABLE IF NOT EXISTS jobs (job_id text PRIMARY KEY, name text, pool text, type text, state text, "
        "instance_count int, priority int, preemptible boolean, placement_strategy text, owner text, "
        "config_text text, created_ms bigint, updated_ms bigint, completed_ms bigint, revocable boolean, "
        "config_version int, rollout text)",
        "CREATE TABLE IF NOT EXISTS job_claims (job_id text PRIMARY KEY, at_ms bigint)",
        "CREATE TABLE IF NOT EXISTS active_jobs (bucket int, job_id text, pool text, PRIMARY KEY (bucket, job_id))",
        "CREATE TABLE IF NOT EXISTS jobs_by_day (day int, created_ms bigint, job_id text, "
        "PRIMARY KEY (day, created_ms, job_id)) WITH CLUSTERING ORDER BY (created_ms DESC, job_id ASC)",
        "CREATE TABLE IF NOT EXISTS job_days (bucket int, day int, PRIMARY KEY (bucket, day)) "
        "WITH CLUSTERING ORDER BY (day DESC)",
        "CREATE TABLE IF NOT EXISTS tasks (job_id text, instance int, run_id int, task_id text, pool text, "
        "gang_id text, state text, spec text, max_failures int, failures int, host_id text, reason text, "
        "message text, exit_code int, signal int, updated_ms bigint, health text, PRIMARY KEY (job_id, instance))",
        "CREATE TABLE IF NOT EXISTS tasks_by_state (state text, bucket int, job_id text, instance int, "
        "PRIMARY KEY ((state, bucket), job_id, instance))",
        "CREATE TABLE IF NOT EXISTS tasks_by_host (host_id text, job_id text, instance int, "
        "PRIMARY KEY (host_id, job_id, instance))",
        "CREATE TABLE IF NOT EXISTS task_events (job_id text, seq bigint, task_id text, instance int, run_id int, "
        "state text, reason text, exit_code int, timestamp_ms bigint, host_id text, message text, "
        "PRIMARY KEY (job_id, seq))",
        "CREATE TABLE IF NOT EXISTS job_commands (command_id text PRIMARY KEY, job_id text, at_ms bigint)",
        "CREATE TABLE IF NOT EXISTS refused_commands (command_id text PRIMARY KEY, job_id text, pool text, "
        "kind text, reason text, at_ms bigint)",
        "CREATE TABLE IF NOT EXISTS updates (update_id text PRIMARY KEY, job_id text, state text, body text, "
        "created_ms bigint)",
        "CREATE TABLE IF NOT EXISTS updates_by_job (job_id text, created_ms bigint, update_id text, "
        "PRIMARY KEY (job_id, created_ms, update_id)) WITH CLUSTERING ORDER BY (created_ms DESC, update_id ASC)",
        "CREATE TABLE IF NOT EXISTS job_configs (job_id text, version int, config_text text, created_ms bigint, "
        "PRIMARY KEY (job_id, version))",
        # A pool's queue ('g' rows: gangs) and charges ('a' rows: allocations) in one partition.
        "CREATE TABLE IF NOT EXISTS pool_ledger (pool text, kind text, id text, gang_id text, priority int, "
        "seq bigint, gang text, not_before_ms bigint, admitted_ms bigint, cpu double, mem_mb double, "
        "disk_mb double, gpu double, preemptible boolean, revocable boolean, controller boolean, "
        "released_ms bigint, PRIMARY KEY (pool, kind, id))",
        "CREATE TABLE IF NOT EXISTS ledger_index (id text PRIMARY KEY, pool text)",
        "CREATE TABLE IF NOT EXISTS ledger_pools (bucket int, pool text, PRIMARY KEY (bucket, pool))",
        "CREATE TABLE IF NOT EXISTS launch_claims (task_id text PRIMARY KEY, host_id text)",
        "CREATE TABLE IF NOT EXISTS launches (host_id text, task_id text, job_id text, instance int, run_id int, "
        "cpu double, mem_mb double, disk_mb double, gpu double, launched_ms bigint, ended_ms bigint, "
        "final_status text, PRIMARY KEY (host_id, task_id))",
        "CREATE TABLE IF NOT EXISTS active_launches (bucket int, host_id text, task_id text, "
        "PRIMARY KEY (bucket, host_id, task_id))",
        "CREATE TABLE IF NOT EXISTS launches_by_job (job_id text, task_id text, instance int, "
        "PRIMARY KEY (job_id, task_id))",
        "CREATE TABLE IF NOT EXISTS host_maintenance (bucket int, host_id text, state text, updated_ms bigint, "
        "PRIMARY KEY (bucket, host_id))",
        "CREATE TABLE IF NOT EXISTS tokens (bucket int, token_id text, secret_hash text, user_name text, "
        "groups text, admin boolean, created_ms bigint, revoked_ms bigint, PRIMARY KEY (bucket, token_id))",
    ],
    # 2: commands' claims and refusals expire (base.CLAIMS_KEPT_MS); rows written before keep no TTL.
    [f"ALTER TABLE {table} WITH default_time_to_live = {CLAIMS_KEPT_MS // 1000}"
     for table in ("job_commands", "refused_commands")],
    # 3: a deleted job's id stays taken for as long (an ended run's launch rows get their TTL when
    # it ends: CassandraStore.end_launches).
    [f"CREATE TABLE IF NOT EXISTS deleted_jobs (job_id text PRIMARY KEY, deleted_ms bigint) "
     f"WITH default_time_to_live = {CLAIMS_KEPT_MS // 1000}"],
    # 4: host pools, and each host's pool and the one it is moving to.
    ["CREATE TABLE IF NOT EXISTS host_pools (bucket int, name text, created_ms bigint, created_by text, "
     "PRIMARY KEY (bucket, name))",
     "CREATE TABLE IF NOT EXISTS host_pool_members (bucket int, host_id text, pool text, desired_pool text, "
     "updated_ms bigint, PRIMARY KEY (bucket, host_id))"],
    # 5: persistent volumes.
    ["CREATE TABLE IF NOT EXISTS volumes (bucket int, volume_id text, job_id text, instance int, host_id text, "
     "container_path text, size_mb int, state text, created_ms bigint, updated_ms bigint, "
     "PRIMARY KEY (bucket, volume_id))"],
    # 6: the cluster's lockdown.
    ["CREATE TABLE IF NOT EXISTS lockdown (bucket int, component text, locked_ms bigint, locked_by text, "
     "PRIMARY KEY (bucket, component))"],
]


def replication_of(setting: str) -> str:
    """The keyspace's replication map from a setting: `SimpleStrategy:1` (one machine) or
    `NetworkTopologyStrategy:dc1=3,dc2=3` (production: replicas per data centre)."""
    strategy, _, args = setting.partition(":")
    if strategy == "SimpleStrategy":
        factor = int(args or "1")
        return f"{{'class': 'SimpleStrategy', 'replication_factor': {factor}}}"
    if strategy == "NetworkTopologyStrategy":
        dcs = [part.split("=") for part in args.split(",") if part]
        if not dcs or any(len(dc) != 2 or not dc[1].isdigit() for dc in dcs):
            raise ValueError(f"replication={setting!r}: NetworkTopologyStrategy needs dc=N pairs, "
                             "e.g. NetworkTopologyStrategy:dc1=3,dc2=3")
        pairs = ", ".join(f"'{name}': {n}" for name, n in dcs)
        return f"{{'class': 'NetworkTopologyStrategy', {pairs}}}"
    raise ValueError(f"replication={setting!r}: SimpleStrategy:N or NetworkTopologyStrategy:dc=N,...")
