"""Rows and the gateway interface every backend implements.

Methods take and return whole batches: stages call the store once per poll, never per message.
Each method is declared once, in the part of the gateway that owns it (Nomad's narrow State
interfaces): a stage is typed with the part it uses, so what it reads and writes is plain at its
constructor, and StorageGateway is all of them, which every backend implements.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import ClassVar, NamedTuple, Protocol

from peloton.auth.tokens import TokenRow

# How long a claim is kept: a job command's (and a refusal's reason), an ended task run's launch, and
# a deleted job's id. A claim is what stops a record read twice from acting twice: it must outlive
# the record in its topic (job-commands, placements), which keeps a record up to its retention plus
# one segment (a segment goes only when its newest record is past the retention): 7 + 1 days in
# topics.yaml, and a day's margin. A wiped or expired group that reads a topic from its start then
# finds every record there claimed. A deleted job's id is not taken again for as long, since its
# runs' ids (job-instance-run) are claims too. tests/unit/peloton/store/test_store.py checks it against topics.yaml.
CLAIMS_KEPT_MS = 9 * 86_400_000


# The states tasks_in_states can be asked for (the launch deadline's, and KILLING: the job
# manager's kills sent again at a takeover). The stores index only these: indexing every state
# would rewrite an index entry at every status for reads nobody makes.
INDEXED_STATES = ("LAUNCHING", "LAUNCHED", "STARTING", "KILLING")


def require_indexed(states: list[str], store: str) -> None:
    """Refuses a tasks_in_states question about a state the stores do not index."""
    unknown = [s for s in states if s not in INDEXED_STATES]
    if unknown:
        raise ValueError(f"tasks_in_states: the {store} store indexes {', '.join(INDEXED_STATES)} only, "
                         f"not {', '.join(unknown)}")


@dataclass(slots=True)
class JobRow:
    job_id: str
    name: str
    pool: str
    type: str
    state: str
    instance_count: int
    priority: int
    preemptible: bool
    placement_strategy: str
    owner: str
    config_text: str
    created_ms: int
    updated_ms: int
    completed_ms: int | None = None
    revocable: bool = False
    config_version: int = 1
    rollout: dict | None = None  # the update workflow in progress (stages/admit/workflow.py), None when none


@dataclass(slots=True)
class TaskRow:
    """The current run of one instance of a job."""

    job_id: str
    instance: int
    run_id: int
    task_id: str
    pool: str
    gang_id: str
    state: str
    spec: dict | None  # the TaskLaunchSpec record of the current run (None: not read, see tasks_by_instance)
    max_failures: int = 0
    failures: int = 0
    host_id: str = ""
    reason: str = ""
    message: str = ""
    exit_code: int | None = None
    signal: int | None = None
    updated_ms: int = 0
    health: str = ""  # of the current run: DISABLED, HEALTH_UNKNOWN, HEALTHY, UNHEALTHY; "": not running yet


@dataclass(slots=True)
class Allocation:
    """What a pool has admitted for one task run, until it is released."""

    task_id: str
    pool: str
    gang_id: str
    cpu: float
    mem_mb: float
    disk_mb: float
    gpu: float
    admitted_ms: int
    # What admission and preemption rules need after a failover, without the gang record.
    priority: int = 0
    preemptible: bool = True
    revocable: bool = False
    controller: bool = False


@dataclass(slots=True)
class QueuedGang:
    """A gang waiting in its pool's queue. Entitle owns the queue: its input offsets commit as
    gangs are queued here, and a new owner of the pool rebuilds the queue from these rows."""

    gang_id: str
    pool: str
    priority: int
    seq: int  # arrival order within a priority
    gang: dict  # the GangDemand record
    not_before_ms: int = 0  # a gang sent back by placement waits out its backoff
    admitted_ms: int = 0  # when entitle stored its admission (0: still queued)


class TaskEvent(NamedTuple):
    """One step of a run's history (rows.EVENT_COLS): a tuple, as the stores write it, with names."""

    task_id: str
    job_id: str
    instance: int
    run_id: int
    state: str  # Peloton's task state the run moved to
    reason: str
    exit_code: int | None
    timestamp_ms: int
    host_id: str
    message: str


@dataclass(slots=True)
class Launch:
    """A task run a host manager accepted; the row that makes a second launch of it a no-op."""

    task_id: str
    job_id: str
    instance: int
    run_id: int
    host_id: str
    cpu: float
    mem_mb: float
    disk_mb: float
    gpu: float
    launched_ms: int
    ended_ms: int | None = None
    extra: dict = field(default_factory=dict)


# -- The parts of the gateway. A method several parts read is declared in a small reader part
# they share; every method is abstract, so a backend that misses one cannot be made.


class Transactional(Protocol):
    @abstractmethod
    def transaction(self) -> AbstractContextManager:
        """One transaction for this thread's calls inside it (nested calls join it): they commit
        together when it ends, or not at all, and read what it wrote."""


class PoolReader(Protocol):
    @abstractmethod
    def list_pools(self) -> dict[str, dict]:
        """Every pool's config by path, in path order."""

    @abstractmethod
    def get_pool(self, path: str) -> dict | None: ...


class LockdownReader(Protocol):
    @abstractmethod
    def lockdown(self) -> dict[str, dict]:
        """The locked components (peloton/model/lockdown.py): component -> {locked_ms, locked_by}."""


class JobReader(Protocol):
    """The job manager's tables, as it and the people asking read them."""

    @abstractmethod
    def tasks_of_job(self, job_id: str) -> list[TaskRow]:
        """A job's tasks, by instance."""

    @abstractmethod
    def tasks_by_instance(self, keys: list[tuple[str, int]], spec: bool = True) -> dict[tuple[str, int], TaskRow]:
        """The tasks of these (job id, instance) keys; with spec=False their specs are not read (None)."""

    @abstractmethod
    def tasks_on_hosts(self, host_ids: list[str], states: list[str]) -> list[TaskRow]:
        """Tasks whose current run is on one of these hosts, in one of `states` (by job, instance)."""

    @abstractmethod
    def task_state_counts(self, job_ids: list[str]) -> dict[str, dict[str, int]]:
        """Job id -> state -> how many of its tasks are in it."""

    @abstractmethod
    def deleted_jobs(self, job_ids: list[str]) -> dict[str, int]:
        """Job id -> when it was deleted, for those of these ids deleted and not forgotten yet
        (forget_claims): a create under one is refused, see CLAIMS_KEPT_MS."""

    @abstractmethod
    def get_update(self, update_id: str) -> dict | None: ...

    @abstractmethod
    def job_config(self, job_id: str, version: int) -> str | None:
        """The config text of one version of a job (the current one is in its row too)."""


class QueueReader(Protocol):
    """Entitle's tables, as it and the people asking read them."""

    @abstractmethod
    def queued_gangs(self, pools: list[str] | None = None) -> list[QueuedGang]:
        """The gangs queued and not admitted (of these pools only, when given), by seq."""

    @abstractmethod
    def allocations(self, pools: list[str] | None = None) -> list[Allocation]:
        """Every allocation still held (of these pools only, when given)."""


class TokenReader(Protocol):
    @abstractmethod
    def get_token(self, token_id: str) -> TokenRow | None: ...


class JobStore(Transactional, PoolReader, JobReader, TokenReader, LockdownReader, Protocol):
    """admit: jobs, tasks and task events (it owns them), pools (read), the signer of a signed
    command (tokens, read)."""

    @abstractmethod
    def has_pools_below(self, path: str) -> bool:
        """Whether any pool's path lies below this one (starts with `path/`; below "/": any
        other pool). False says the pool is a leaf without reading the tree."""

    @abstractmethod
    def create_jobs(self, jobs: list[JobRow], tasks: list[TaskRow]) -> set[str]:
        """Insert jobs that do not exist yet, with their tasks; returns the ids inserted."""

    @abstractmethod
    def get_jobs(self, job_ids: list[str]) -> dict[str, JobRow]: ...

    @abstractmethod
    def active_jobs(self) -> list[JobRow]:
        """Every job not in a terminal state."""

    @abstractmethod
    def update_jobs(self, jobs: list[JobRow]) -> None:
        """Store what an update may change of each job (rows.job_update_params)."""

    @abstractmethod
    def unlaunched_tasks_of_jobs(self, job_ids: list[str]) -> list[TaskRow]:
        """The tasks of these jobs not launched yet (model.states.UNLAUNCHED), by job, instance."""

    @abstractmethod
    def save_tasks(self, tasks: list[TaskRow]) -> None:
        """Store tasks whole, their specs too (a new run, a new spec)."""

    @abstractmethod
    def update_task_runs(self, tasks: list[TaskRow], same_run: bool = False, same_host: bool = False) -> None:
        """Store what a status changed of each task's run (RUN_COLS), not its spec: for tasks
        whose spec is as stored, cheaper than save_tasks, which writes the spec again. same_run:
        their run, task and gang ids are as stored too; only STATE_COLS are written. same_host
        (with same_run): their host too; STEP_COLS (rows.moved_cols) may be all that is written."""

    @abstractmethod
    def tasks_in_states(self, states: list[str], updated_before_ms: int, limit: int = 1000) -> list[TaskRow]:
        """Tasks in one of `states` (of INDEXED_STATES) since before the given time (the oldest first)."""

    @abstractmethod
    def record_task_events(self, events: Sequence[TaskEvent]) -> None:
        """(task_id, job_id, instance, run_id, state, reason, exit_code, timestamp_ms, host_id,
        message) rows."""

    @abstractmethod
    def delete_job(self, job_id: str, at_ms: int) -> bool:
        """Remove a job with its tasks and task events; its id is kept as deleted (deleted_jobs)."""

    @abstractmethod
    def ended_jobs(self, completed_before_ms: int, limit: int) -> list[str]:
        """Ids of jobs in a terminal state that ended before completed_before_ms, at most limit
        (the job manager deletes them past their retention)."""

    @abstractmethod
    def claim_commands(self, command_ids: list[str], job_ids: list[str], at_ms: int) -> set[str]:
        """Record job commands not seen before; returns the ids that are new (act on these)."""

    @abstractmethod
    def refuse_command(self, command_id: str, job_id: str, pool: str, kind: str, reason: str, at_ms: int) -> None:
        """Keep why the job manager refused a command, for whoever sent it to ask."""

    @abstractmethod
    def forget_claims(self, now_ms: int) -> int:
        """Drop the claims and refusals of commands handled, and the ids of jobs deleted, more than
        CLAIMS_KEPT_MS before now_ms (a command's claim goes by age, not with its job: the deleted
        id is what refuses its CREATE read again). Returns how many went; 0 where the store expires
        them itself (expires_by_ttl)."""

    @abstractmethod
    def save_updates(self, updates: list[dict]) -> None:
        """Store update workflows (stages/admit/workflow.py) whole, by their update_id."""

    @abstractmethod
    def save_job_configs(self, rows: list[tuple[str, int, str, int]]) -> None:
        """(job id, version, config text, at ms) of accepted configs; a version stored stays as it was."""


class AllocationStore(Transactional, PoolReader, QueueReader, Protocol):
    """entitle: the allocations and queued_gangs tables, which it alone writes; pools (read).
    A task run admitted is held until it ends; an ended run is kept as released, so a
    redelivered demand for it is recognised without asking the job manager."""

    @abstractmethod
    def queue_gangs(self, rows: list[QueuedGang]) -> None:
        """Add gangs to their pools' queues; a gang already queued is left as it is."""

    @abstractmethod
    def unqueue_gangs(self, gang_ids: list[str]) -> None: ...

    @abstractmethod
    def unsent_admissions(self) -> list[QueuedGang]:
        """Gangs admitted whose admission may not have reached the broker (the outbox)."""

    @abstractmethod
    def admissions_sent(self, gang_ids: list[str]) -> None:
        """Their admissions reached the broker: forget them."""

    @abstractmethod
    def admit_gangs(self, gang_ids: list[str], allocations: list[Allocation],
                    unqueued: Sequence[Allocation] = ()) -> set[str]:
        """In one transaction: take the gangs off their queues and charge their tasks. Only gangs
        still queued are admitted (returned); the allocations of the others are not written, so
        two instances that both believe they own a pool never admit one gang twice. An admitted
        gang stays, marked, as an unsent admission until admissions_sent. `unqueued` charges the
        tasks of gangs admitted by the batch that brought them, never queued here, as they are:
        their admission commits with their demand's offset, which fences a second instance."""

    @abstractmethod
    def add_allocations(self, rows: list[Allocation]) -> None:
        """Charge task runs (a run charged again is held again, as given)."""

    @abstractmethod
    def release_allocations(self, task_ids: list[str], released_ms: int) -> None:
        """The runs ended: their room is free, and they are never admitted again."""

    @abstractmethod
    def remove_allocations(self, task_ids: list[str]) -> None:
        """Forget the runs (their placement was refused: the same run may be admitted again)."""

    @abstractmethod
    def allocation_states(self, task_ids: list[str]) -> dict[str, str]:
        """'held' or 'released' for each of task_ids this store has admitted."""

    @abstractmethod
    def forget_released_allocations(self, before_ms: int, limit: int) -> int:
        """Drop released runs older than before_ms, limit at most (with sweeps_whole_partitions:
        every one its scan finds, which may be more); how many went."""


class QueryStore(Transactional, PoolReader, JobReader, QueueReader, LockdownReader, Protocol):
    """pelotonctl and dashboards: reads for people, and the pools table the control plane owns."""

    @abstractmethod
    def get_job(self, job_id: str) -> JobRow | None: ...

    @abstractmethod
    def list_jobs(self, limit: int = 100, *, states: list[str] | None = None, pool: str | None = None,
                  owner: str | None = None, name: str | None = None, created_since_ms: int | None = None,
                  oldest_first: bool = False) -> list[JobRow]:
        """The most recent jobs first (the oldest first with oldest_first; ties by id), those
        matching every filter given: created at or after created_since_ms, when given."""

    @abstractmethod
    def task_events(self, job_id: str) -> list[dict]:
        """A job's task events (EVENT_COLS), in the order they were recorded."""

    @abstractmethod
    def launch_counts(self, job_id: str) -> dict[int, int]:
        """Launches per instance of a job (every run counted), for checking run-once."""

    @abstractmethod
    def updates_of_job(self, job_id: str) -> list[dict]:
        """A job's update workflows, the newest first."""

    @abstractmethod
    def put_pool(self, path: str, config: dict) -> None: ...

    @abstractmethod
    def host_pools(self) -> dict[str, dict]:
        """The host pools operators made: name -> {created_ms, created_by} (the default pool,
        which always exists, has no row)."""

    @abstractmethod
    def add_host_pool(self, name: str, at_ms: int, by: str) -> bool:
        """Make a host pool; False when one of that name exists."""

    @abstractmethod
    def remove_host_pool(self, name: str) -> None: ...

    @abstractmethod
    def set_lockdown(self, component: str, locked: bool, at_ms: int, by: str) -> None:
        """Lock a component (kept as first locked when locked again) or unlock it."""

    @abstractmethod
    def get_volume(self, volume_id: str) -> dict | None:
        """A persistent volume's row (VOLUME_COLS), or None."""

    @abstractmethod
    def list_volumes(self, job_id: str | None = None) -> list[dict]:
        """Every volume (a job's, by instance, when job_id is given), DELETED ones included."""

    @abstractmethod
    def set_volume_state(self, volume_id: str, state: str, at_ms: int) -> None: ...

    @abstractmethod
    def delete_pool(self, path: str) -> bool: ...

    @abstractmethod
    def lock_pool_tree(self) -> None:
        """Inside transaction(): no other pool-tree change runs until it ends, so a change checked
        against the tree is written against the same tree."""

    @abstractmethod
    def pools_with_jobs(self) -> set[str]:
        """Pools holding at least one job that is not terminal."""


class TokenStore(TokenReader, Protocol):
    """the API: the tokens it issues and checks (peloton.auth.tokens, kept hashed), which it alone writes."""

    @abstractmethod
    def add_token(self, row: TokenRow) -> None: ...

    @abstractmethod
    def revoke_token(self, token_id: str, at_ms: int) -> bool:
        """Mark a token revoked; False when there is no such token (or it was revoked before)."""

    @abstractmethod
    def list_tokens(self) -> list[TokenRow]: ...


class LaunchStore(Protocol):
    """launch: the launches table, which it alone writes, and hosts' maintenance states."""

    @abstractmethod
    def claim_launches(self, rows: list[Launch]) -> set[str]:
        """Record launches not seen before; returns the task ids that are new (launch these)."""

    @abstractmethod
    def end_launches(self, task_ids: list[str], ended_ms: int, final_status: dict[str, dict] | None = None) -> None:
        """Mark runs ended; final_status keeps each one's last TaskStatus record, to send again
        if the broker loses it (see ended_launches)."""

    @abstractmethod
    def active_launches(self, host_ids: list[str]) -> list[Launch]:
        """The runs not ended on these hosts."""

    @abstractmethod
    def active_launch_hosts(self) -> list[str]:
        """Hosts with runs not ended (those of agents a new host manager adopts)."""

    @abstractmethod
    def set_host_state(self, host_id: str, state: str, at_ms: int) -> None:
        """A host's maintenance state (UP, DRAINING, DRAINED, DOWN); UP hosts have no row."""

    @abstractmethod
    def host_states(self) -> dict[str, str]:
        """Host id -> maintenance state, for the hosts not UP."""

    @abstractmethod
    def set_host_pool(self, host_id: str, pool: str, desired: str, at_ms: int) -> None:
        """A host's host pool and the one it is moving to (the same when it is not moving)."""

    @abstractmethod
    def host_pool_members(self) -> dict[str, tuple[str, str]]:
        """Host id -> (its host pool, the one it is moving to), for hosts ever given one."""

    @abstractmethod
    def add_volumes(self, rows: list[dict]) -> None:
        """Record volumes made (peloton.model.volumes.volume_row); one known already stays as it is,
        unless it was DELETED (then this is its instance's new volume)."""

    @abstractmethod
    def ended_launches(self, host_ids: list[str], since_ms: int) -> list[dict]:
        """The final TaskStatus records of runs on these hosts that ended at or after since_ms."""

    @abstractmethod
    def forget_launches(self, now_ms: int, limit: int) -> int:
        """Drop runs that ended more than CLAIMS_KEPT_MS before now_ms, limit at most: their
        launches are claims, kept while a placement of theirs may still be read. Returns how many
        went; 0 where the store expires them itself (expires_by_ttl)."""


class StorageGateway(JobStore, AllocationStore, QueryStore, TokenStore, LaunchStore, Protocol):
    """Every part: what each backend implements, and what a tool given the whole store uses."""

    # What a backend does beside the contract's letter, for callers and the contract tests:
    # claims, launches and released rows go by the rows' TTL, not by the forget_* sweeps (which
    # then forget nothing and say 0) ...
    expires_by_ttl: ClassVar[bool] = False
    # ... and forget_released_allocations forgets all its scan found, which may pass its limit.
    sweeps_whole_partitions: ClassVar[bool] = False

    @abstractmethod
    def command_outcome(self, command_id: str) -> dict | None:
        """What the job manager did with a command: {state: refused, job_id, pool, kind, reason,
        at_ms}, or {state: applied, job_id, at_ms} for a control command it acted on; None for one
        it has not handled (or a CREATE: its job's existence says it was applied)."""

    @abstractmethod
    def close(self) -> None: ...
