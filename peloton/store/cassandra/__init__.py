"""Cassandra backend, Peloton's own store (cassandra-driver: prepared statements, token-aware).

    cassandra://host[:port][,host2[:port]]/keyspace[?replication=SimpleStrategy:1]

The tables (cassandra_schema.py) put each read in one partition. How the contract's guarantees
are kept without SQL transactions (docs/decisions/0013-cassandra-batches-and-claims.md):

- transaction(): the writes inside are kept in memory and written when it ends, in phases:
  effects, then job rows, then claims (a command id, a job id), each phase once the one before
  is acknowledged (a partition's writes as one unlogged batch). A crash between two leaves
  effects whose claim is not written: the stage's next owner reads the same records, finds
  nothing claimed and does it again; every effect is an upsert by key, so doing it twice leaves
  what doing it once did. Reads inside see the transaction's own jobs, tasks, updates, configs
  and claims. A transaction that raises writes nothing. Each write carries its own timestamp,
  in the order it was asked for, so a later write of a cell wins whatever request it went in.
- Claims outside a transaction (a job created by create_jobs, a task run launched by
  claim_launches) are lightweight transactions (IF NOT EXISTS) written after their effects.
  Inside a stage's batch, the claim rides in the batch itself: one stage instance owns a job's
  commands (its Kafka partition), and an instance fenced by a rebalance cannot commit its
  output (Kafka's transactional ids), so the store need not arbitrate there.
- Admission charges a gang's tasks and takes the gang off its queue in one conditional batch on
  the pool's partition: both or neither, and only if the gang is still queued.

CassandraStore is the role mixins put together, each in its module: session.py (the connection,
prepared statements, transactions, the schema), jobs.py, tasks.py, allocations.py (charges and
queues), queries.py (listings, pools), tokens.py and launches.py (launches, hosts, command claims).
"""

from __future__ import annotations

from peloton.store.base import StorageGateway
from peloton.store.cassandra.allocations import AllocationsMixin
from peloton.store.cassandra.host_pools import HostPoolsMixin
from peloton.store.cassandra.jobs import JobsMixin
from peloton.store.cassandra.launches import LaunchesMixin
from peloton.store.cassandra.queries import QueriesMixin
from peloton.store.cassandra.session import (
    BATCH_KB,
    CONCURRENCY,
    DEFAULT_PORT,
    IN_KEYS,
    LOCK_TTL_S,
    MAX_STATEMENTS,
    CassandraSession,
    parse_url,
)
from peloton.store.cassandra.tasks import TASK_COLS_LIGHT, TasksMixin
from peloton.store.cassandra.tokens import TokensMixin
from peloton.store.cassandra.volumes import VolumesMixin


class CassandraStore(JobsMixin, TasksMixin, AllocationsMixin, QueriesMixin, TokensMixin, LaunchesMixin,
                     HostPoolsMixin, VolumesMixin, StorageGateway):
    # Commands' claims and refusals, deleted jobs' ids and ended launches go by their rows' TTL
    # (cassandra_schema, LaunchesMixin): forget_claims and forget_launches forget nothing.
    expires_by_ttl = True
    # Released charges carry no TTL: forget_released_allocations reads every pool's partition
    # whole, so it forgets every row its scan finds, past its limit.
    sweeps_whole_partitions = True


__all__ = ["BATCH_KB", "CONCURRENCY", "DEFAULT_PORT", "IN_KEYS", "LOCK_TTL_S", "MAX_STATEMENTS", "TASK_COLS_LIGHT",
           "CassandraSession", "CassandraStore", "parse_url"]
