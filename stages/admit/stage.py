"""admit stage: job commands and task status events in; task demand and releases out.

Per batch: one store transaction holds every job, task and state change; only after it commits
does anything go out (so a crash replays the batch and finds the store already right).

The stage reads, asks the decision modules (statuses.py, creates.py, control.py, rollouts.py,
upkeep.py), writes, and sends what they put in an Outbox: the deciding is theirs.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable

from peloton import metrics
from peloton.auth.permissions import PoolsAbove
from peloton.config import Settings
from peloton.model.constraint import Constraint
from peloton.model.daemon import eligible
from peloton.model.host_capacities import HOST_LABELS, HostCapacities
from peloton.model.jobconfig import parse_job_config
from peloton.model.jobspec import JobSpec
from peloton.model.lockdown import LockdownReads, component_of_command, locked_out
from peloton.model.mesos import MESOS_TERMINAL
from peloton.model.pool import leaf_pool_error
from peloton.model.resources import Resources
from peloton.model.states import JOB_TERMINAL
from peloton.runtime import CompactedView, Emitter, Record, Stage, Sweep, now_ms
from peloton.store import CLAIMS_KEPT_MS, JobRow, JobStore, TaskRow
from peloton.topics import Catalogue, partition_for
from stages.admit.checks import size_problems
from stages.admit.control import JobControl
from stages.admit.creates import plan_creates
from stages.admit.daemons import DAEMON, Daemons
from stages.admit.drain import ON_HOST, plan_drain
from stages.admit.expand import gang_records
from stages.admit.lifecycle import HOST_MAINTENANCE
from stages.admit.outbox import DEAD, EMIT, Outbox
from stages.admit.owned_tasks import OwnedTasks
from stages.admit.rollouts import Rollouts
from stages.admit.senders import sender_problem
from stages.admit.slas import Slas, sla_of
from stages.admit.statuses import STEP, Key, StatusOutcome, Step, apply_statuses, rerun_demand, status_steps
from stages.admit.upkeep import (
    CLAIM_SWEEP_S,
    DRAIN_CHECK_S,
    EXPIRED_PER_TICK,
    KILLS_RESENT_MAX,
    deadline_kills,
    drain_kills,
    expiry_period_s,
    ran_too_long,
    task_totals,
)
from stages.admit.weight import record_weight
from stages.admit.workflow import STOP
from stages.admit.writes import JobWrites

log = logging.getLogger("peloton.admit")

__all__ = ["AdmitStage", "new_job_id", "sla_of"]


class AdmitStage(Stage):
    name = "admit"
    inputs = ("job-commands", "task-status")
    assignment = "range"  # a job's commands and statuses (both keyed by job id) to one instance: OwnedTasks

    def __init__(self, store: JobStore, hosts: CompactedView | None = None):
        self.store = OwnedTasks(store)
        self.hosts = hosts  # host-state: tasks larger than every host refused, daemons kept on every host
        self.capacities = HostCapacities()  # the distinct capacities among them
        self.owned: set[int] = set()  # task-status partitions: the jobs whose deadlines this instance checks
        self.commands_owned: set[int] = set()  # job-commands partitions
        self.lockdown = LockdownReads(self.store.lockdown)  # the cluster's, as last read
        self.slas = Slas(self._parse)
        self.writes = JobWrites(self.store)
        self.rollouts = Rollouts(self.store, self.writes, self.slas)
        self.jobs = JobControl(self.store, self.writes, self.rollouts, self.slas, self._parse)
        self.daemons = Daemons(self.store, self.writes, self._parse)
        self.daemon_ids: set[str] = set()  # active DAEMON jobs, as the deadline check last found them
        self._last_deadlines = 0.0
        self._last_drains = 0.0
        self._last_sweep = float("-inf")  # the first tick sweeps
        self.expiry: Sweep | None = None  # of jobs past their retention (bind: it needs the settings)
        self._hosts_caught_up = 0.0  # when the host view, empty, last read host-state to its end

    def bind(self, emitter: Emitter, settings: Settings, catalogue: Catalogue) -> None:
        super().bind(emitter, settings, catalogue)
        if self.hosts is None:
            self.hosts = CompactedView(settings, "host-state", catalogue, head=HOST_LABELS)
        self.status_partitions = catalogue["task-status"].partitions
        self.expiry = Sweep(expiry_period_s(settings.job_retention_s), EXPIRED_PER_TICK)

    def weight(self, record: Record) -> int:
        return record_weight(record)

    def _parse(self, text: str) -> JobSpec:
        """A job config, within the settings' limits."""
        return parse_job_config(text, self.settings.job_limits(), self.settings.yaml_limits())

    def _send(self, box: Outbox) -> None:
        """What the decisions put in `box`, in its order."""
        for item in box.now:
            if item[0] == DEAD:
                self.emit.dead_letter(item[1], item[2])
            elif item[0] == EMIT:
                self.emit.emit(*item[1:])
            else:
                self.emit.emit_to_every_partition(*item[1:])
        for topic, key, schema, value in box.later:
            self.emit.emit(topic, key, schema, value)

    def handle(self, records: list[Record]) -> None:
        commands = [r for r in records if r.topic == "job-commands"]
        statuses = [r for r in records if r.topic == "task-status"]
        box = Outbox()
        # One transaction for the batch, and what it sends is emitted inside it: if anything
        # raises, the store rolls back and the runtime discards the output, so neither is half done.
        with self.store.transaction():
            if commands:
                self._commands(commands, box)
            if statuses:
                self._statuses(statuses, box)
            self._send(box)

    # -- partitions -----------------------------------------------------------------------------
    def on_assign(self, partitions: list[tuple[str, int]]) -> None:
        new = {p for t, p in partitions if t == "task-status"} - self.owned
        self.owned |= new
        self.commands_owned |= {p for t, p in partitions if t == "job-commands"}
        self._paired()
        if new:
            self._resend_kills(new)

    def _resend_kills(self, partitions: set[int]) -> None:
        """Kills the last owner stored (its runs went KILLING) but may have died before sending:
        its store commits before its transaction, so a stop it claimed could be lost for good (a
        redelivered command finds itself claimed). Every KILLING run of these partitions' jobs is
        killed again; a run already killed, or ended, is left as it is by launch and its agent."""
        now = now_ms()
        stuck = [t for t in self.store.tasks_in_states(["KILLING"], now + 1, limit=KILLS_RESENT_MAX)
                 if partition_for(t.job_id, self.status_partitions) in partitions]
        box = Outbox()
        for t in stuck:
            box.kill(t.job_id, t.instance, t.run_id, t.task_id, t.reason, t.message, now)
        self._send(box)
        if stuck:
            log.info("kills of %d runs left KILLING sent again", len(stuck))

    def on_revoke(self, partitions: list[tuple[str, int]]) -> None:
        self.owned -= {p for t, p in partitions if t == "task-status"}
        self.commands_owned -= {p for t, p in partitions if t == "job-commands"}
        self._paired()

    def _paired(self) -> None:
        """Task rows are remembered only while this instance holds the same partition numbers of
        both inputs and they are as many: then every command and status of its jobs comes here."""
        self.store.assigned(self.commands_owned, self.owned,
                            counts_agree=self.catalogue["job-commands"].partitions == self.status_partitions)

    def _mine(self, job_id: str) -> bool:
        return partition_for(job_id, self.status_partitions) in self.owned

    # -- checks between batches (upkeep.py) -----------------------------------------------------
    def tick(self, now: float) -> None:
        assert self.hosts is not None and self.expiry is not None  # bind made them
        self.capacities.update(self.hosts.poll())
        if now - self._last_deadlines >= self.settings.deadline_check_s:
            self._last_deadlines = now
            with self.store.transaction():
                self._deadlines()
        if now - self._last_drains >= DRAIN_CHECK_S:
            self._last_drains = now
            if self.daemon_ids:
                with self.store.transaction():
                    self._daemons()
            draining = {h for h, rec in self.hosts.values.items() if rec.get("state") == "DRAINING"}
            if draining:
                with self.store.transaction():
                    self._drains(draining)
        if self.expiry.due(now):
            self.expiry.done(now, self._expire_jobs())
        if now - self._last_sweep >= CLAIM_SWEEP_S:
            self._last_sweep = now
            if gone := self.store.forget_claims(now_ms()):
                log.info("forgot %d commands and deleted job ids older than %d days", gone,
                         CLAIMS_KEPT_MS // 86_400_000)

    def _expire_jobs(self) -> int:
        """Delete jobs that ended more than job_retention_s ago, as a DELETE would (their ids stay
        taken a while: store.CLAIMS_KEPT_MS), those whose commands this instance owns: a command of
        the job and its expiry never race. Returns how many went."""
        assert self.expiry is not None
        retention = self.settings.job_retention_s
        if retention <= 0 or not self.commands_owned:
            return 0
        now = now_ms()
        partitions = self.catalogue["job-commands"].partitions
        # Other instances' jobs come back too (they delete them): ask for more than a tick takes.
        ids = [j for j in self.store.ended_jobs(now - int(retention * 1000), self.expiry.batch * 8)
               if partition_for(j, partitions) in self.commands_owned][:self.expiry.batch]
        if ids:
            with self.store.transaction():
                for job_id in ids:
                    self.store.delete_job(job_id, now)
            log.info("deleted %d jobs that ended more than %gs ago (PELOTON_JOB_RETENTION_S): %s", len(ids),
                     retention, ", ".join(ids))
        return len(ids)

    def _deadlines(self) -> None:
        """Kill runs that never reached RUNNING within the launch timeout (they run again, as lost
        runs do) and runs beyond their job's sla.maxRunningTime (they fail). Each instance
        checks the jobs whose status partition it owns."""
        now = now_ms()
        launched_before = now - int(self.settings.launch_timeout_s * 1000)
        late = [t for t in self.store.tasks_in_states(["LAUNCHING", "LAUNCHED", "STARTING"], launched_before)
                if self._mine(t.job_id)]
        over: list[TaskRow] = []
        active = self.store.active_jobs()
        self.slas.keep_only({job.job_id for job in active})
        self.daemon_ids = {job.job_id for job in active if job.type == DAEMON}
        for job in active:
            limit_s = self.slas.of(job)[1] if self._mine(job.job_id) else 0
            if limit_s > 0:
                over.extend(ran_too_long(self.store.tasks_of_job(job.job_id), limit_s, now))
        self._count_tasks([job.job_id for job in active if self._mine(job.job_id)])
        box = Outbox()
        for tasks, reason, why in deadline_kills(late, over, self.settings.launch_timeout_s):
            self.writes.kill(tasks, reason, f"deadline exceeded: {why}", now, box)
            log.warning("%d runs killed: %s", len(tasks), why)
        self._send(box)

    def _drains(self, draining: set[str]) -> None:
        """Runs on hosts in maintenance move (killed with reason HOST_MAINTENANCE, they run again
        elsewhere) as far as each job's disruption budget lets them (stages/admit/drain.py); the
        others wait for the moved ones to run again. Each instance looks after the jobs whose
        status partition it owns."""
        on_hosts: dict[str, list[TaskRow]] = {}
        for t in self.store.tasks_on_hosts(sorted(draining), list(ON_HOST)):
            if self._mine(t.job_id):
                on_hosts.setdefault(t.job_id, []).append(t)
        if not on_hosts:
            return
        # A daemon's instance cannot move: Daemons stops it, within its budget, when its host drains.
        jobs = {j: job for j, job in self.store.get_jobs(sorted(on_hosts)).items() if job.type != DAEMON}
        now = now_ms()
        kills = drain_kills(plan_drain(job_id, self.store.tasks_of_job(job_id), draining, self.slas.of(job)[2])
                            for job_id, job in jobs.items())
        box = Outbox()
        for host_id, tasks in kills.items():
            self.writes.kill(tasks, HOST_MAINTENANCE, f"host {host_id} is drained for maintenance", now, box)
            log.info("host %s drains: %d runs moved", host_id, len(tasks))
        self._send(box)

    def _daemons(self) -> None:
        """DAEMON jobs' instances kept on every eligible host (daemons.py), those whose status
        partition this instance owns."""
        assert self.hosts is not None
        jobs = [j for j in self.store.get_jobs(sorted(self.daemon_ids)).values()
                if j.state not in JOB_TERMINAL and self._mine(j.job_id)]
        self.daemon_ids = {j.job_id for j in jobs} | {j for j in self.daemon_ids if not self._mine(j)}
        box = Outbox()
        self.daemons.keep(jobs, self.hosts.values, now_ms(), box)
        self._send(box)

    def _count_tasks(self, job_ids: list[str]) -> None:
        """peloton_tasks: the tasks of this instance's jobs not yet ended, by state (a sum over the
        admit instances is the cluster's)."""
        for state, n in task_totals(self.store.task_state_counts(job_ids)).items():
            metrics.TASKS.labels(state).set(n)

    def host_capacities(self) -> list[Resources]:
        assert self.hosts is not None
        self.capacities.update(self.hosts.poll())
        # Knowing no host lets an oversized task through to wait in place: an admit that has just
        # started reads host-state to its end first (at most once every 5 s while the cluster has none).
        if not self.hosts.values and time.monotonic() - self._hosts_caught_up >= 5.0:
            self.hosts.catch_up(timeout=2.0)
            self._hosts_caught_up = time.monotonic()
        return self.capacities.distinct(self.hosts.values)

    # -- job commands (creates.py, control.py) --------------------------------------------------
    def _commands(self, records: list[Record], box: Outbox) -> None:
        # The pools the batch names, each read once with the line above it (what a signer's rights
        # need), not the whole tree, whose every config parsed would cost a batch dearly at 1,000 pools.
        pools = PoolsAbove(self.store.get_pool)
        if self.settings.signed_commands:
            records = self._signed(records, pools, box)
        records = self._unlocked(records, box)
        creates = [r for r in records if r.value["kind"] == "CREATE"]
        control = [r for r in records if r.value["kind"] != "CREATE"]
        if creates:
            self._creates(creates, box, pools)
        if control:
            self.jobs.control(control, now_ms(), box)

    def _signed(self, records: list[Record], pools: PoolsAbove, box: Outbox) -> list[Record]:
        """The commands whose signer may do what they ask; the others go to the dead letters."""
        jobs = self.store.get_jobs([r.value["job_id"] for r in records if r.value["kind"] != "CREATE"])
        admins = self.settings.admin_group_set()
        kept = []
        for r in records:
            cmd = r.value
            job = jobs.get(cmd["job_id"])
            pool = cmd["pool"] if cmd["kind"] == "CREATE" else (job.pool if job else None)
            problem = sender_problem(cmd["kind"], pool, r.headers, r.raw_value or b"", self.store.get_token, pools,
                                     admins)
            if problem:
                self.writes.refuse(r, problem, box)
            else:
                kept.append(r)
        return kept

    def _unlocked(self, records: list[Record], box: Outbox) -> list[Record]:
        """The commands whose component (Write, or Kill for a stop) is not locked down; the others
        refused with who locked it (a producer's commands as the API's)."""
        locks = self.lockdown.current()
        if not locks:
            return records
        kept = []
        for r in records:
            locked = locked_out(component_of_command(r.value["kind"]), locks)
            if locked:
                self.writes.refuse(r, locked, box)
            else:
                kept.append(r)
        return kept

    def _creates(self, records: list[Record], box: Outbox, pools: PoolsAbove) -> None:
        now = now_ms()
        known = self.store.get_jobs([r.value["job_id"] for r in records])
        gone = self.store.deleted_jobs([r.value["job_id"] for r in records])
        plan = plan_creates(records, known, gone, _CreateFacts(self, pools), now)
        for r, reason in plan.refused:
            self.writes.refuse(r, reason, box)
        for job_id, spec in plan.specs.items():
            self.slas.put(job_id, spec)  # not parsed again
        created = self.store.create_jobs(plan.jobs, plan.tasks)
        # Each create acted on (or found its job made already) is applied: what its sender's
        # command status reads, as for the other commands.
        applied = [r.value for r in records if r.value["job_id"] in created or r.value["job_id"] in plan.repeats]
        self.store.claim_commands([c["command_id"] for c in applied], [c["job_id"] for c in applied], now)
        by_job: dict[str, list[TaskRow]] = {}
        for t in plan.tasks:
            by_job.setdefault(t.job_id, []).append(t)
        for job in plan.jobs:
            if job.job_id in created and job.type == DAEMON:
                self.daemon_ids.add(job.job_id)
            if job.job_id in created:
                metrics.JOBS_CREATED.labels(job.pool).inc()
                ready = [t for t in by_job[job.job_id] if t.state == "PENDING"]  # not those throttled
                box.later.extend(("task-demand", job.pool, "peloton.GangDemand", g)
                                 for g in gang_records(job, ready, now))
        # A repeated create (a redelivery after a crash, or a producer retry) must not lose demand
        # that was stored but never sent: send whatever is not launched yet again; entitle dedupes.
        if plan.repeats:
            pending = self.store.unlaunched_tasks_of_jobs(list(plan.repeats))
            for job_id in plan.repeats:
                job = known[job_id]
                mine = [t for t in pending if t.job_id == job_id]
                box.later.extend(("task-demand", job.pool, "peloton.GangDemand", g)
                                 for g in gang_records(job, mine, now))

    # -- task status (statuses.py) --------------------------------------------------------------
    def _statuses(self, records: list[Record], box: Outbox) -> None:
        now = now_ms()
        steps, keys = status_steps(records)
        # Specs are read only for the runs that need them (a new run, a gang sent back): most
        # statuses only move a run, and the spec is the largest column.
        tasks = self.store.tasks_by_instance(keys, spec=False)
        jobs = self.store.get_jobs(list({job_id for job_id, _ in tasks}))
        got = apply_statuses(steps, tasks, jobs, now, self._spec_reader(steps), self._parse,
                             self.settings.service_backoff_base_s, uuid.uuid4().hex[:8])
        box.take(got.out)
        if not got.changed:
            self.writes.record_events(got.events)  # late ends of runs given up: history only
            return
        self._save_moves(got)
        job_ids = list({t.job_id for t in got.changed.values()})
        counts = self.store.task_state_counts(job_ids)
        self._after_moves(jobs, job_ids, counts, now, box)
        box.later.extend(rerun_demand(jobs, got.reruns, got.delays, now))

    def _spec_reader(self, steps: list[Step]) -> Callable[[TaskRow], dict | None]:
        """A run's spec when it must run again, read once per batch for every run it may end."""
        specs_read: dict[Key, dict | None] = {}

        def spec_of(task: TaskRow) -> dict | None:
            if not specs_read:
                ending = [(e["job_id"], e["instance"]) for _, e, kind in steps
                          if kind != STEP and e["state"] in MESOS_TERMINAL]
                specs_read.update({k: t.spec for k, t in self.store.tasks_by_instance(ending).items()})
            key = (task.job_id, task.instance)
            return specs_read.get(key) or self.store.tasks_by_instance([key])[key].spec

        return spec_of

    def _save_moves(self, got: StatusOutcome) -> None:
        """Most moves change the run's state only: its spec, the largest column, is not written
        again, nor its ids (and their index) unless it runs again or goes back to its pool."""
        changed, respecced = got.changed, got.respecced
        rerun = {(t.job_id, t.instance) for t in got.reruns}
        self.store.save_tasks([t for key, t in changed.items() if key in respecced])
        self.store.update_task_runs([t for key, t in changed.items() if key in rerun and key not in respecced])
        self.store.update_task_runs([t for key, t in changed.items() if key not in rerun], same_run=True)
        self.writes.record_events(got.events)

    def _after_moves(self, jobs: dict[str, JobRow], job_ids: list[str], counts: dict[str, dict[str, int]],
                     now: int, box: Outbox) -> None:
        """The jobs whose tasks moved: their states, their workflows moved on, their throttled
        tasks released."""
        updated = []
        for job_id in job_ids:
            job = jobs[job_id]
            state = self.writes.state_of(job, counts[job_id], job.state)
            if state != job.state:
                job.state, job.updated_ms = state, now
                if state in JOB_TERMINAL:
                    job.completed_ms = now
                updated.append(job)
        self.store.update_jobs(updated)
        for job_id in job_ids:
            job = jobs[job_id]
            if job.rollout and (job.state not in JOB_TERMINAL or job.rollout.get("kind") == STOP):
                self.rollouts.advance(job, now, box)  # (a rolling stop ends well with its job)
            elif job.rollout:  # every task ended: nothing left to roll out
                self.rollouts.end(job, f"the job ended {job.state}", now)
                self.store.update_jobs([job])
            if counts[job_id].get("INITIALIZED"):
                self.writes.release_throttled(job, self.slas.of(job)[0], now, box)

    def recover(self) -> None:
        """After the broker lost its log: send again the demand of every task not launched yet.
        Entitle dedupes what it queued, and admits again what it holds but was never placed."""
        jobs = {j.job_id: j for j in self.store.active_jobs()}
        pending = self.store.unlaunched_tasks_of_jobs(list(jobs))
        by_job: dict[str, list[TaskRow]] = {}
        for t in pending:
            by_job.setdefault(t.job_id, []).append(t)
        now = now_ms()
        for job_id, tasks in by_job.items():
            for g in gang_records(jobs[job_id], tasks, now):
                self.emit.emit("task-demand", jobs[job_id].pool, "peloton.GangDemand", g)
        log.info("recovery: %d pending tasks of %d jobs sent again", len(pending), len(by_job))

    def views(self) -> list:
        return [self.hosts]

    def close(self) -> None:
        if self.hosts is not None:
            self.hosts.close()


class _CreateFacts:
    """What creates.plan_creates asks of the store, the host view and the settings."""

    def __init__(self, stage: AdmitStage, pools: PoolsAbove):
        self.stage = stage
        self.store = stage.store
        self.pools = pools

    def applied(self, command_id: str) -> bool:
        return (self.store.command_outcome(command_id) or {}).get("state") == "applied"

    def created_with(self, job: JobRow) -> str | None:
        """The config a job was created with: an update keeps the versions before it."""
        return job.config_text if job.config_version <= 1 else self.store.job_config(job.job_id, 1)

    def leaf_pool(self, path: str) -> tuple[dict | None, str | None]:
        """A pool that exists with nothing below it is a leaf; only to say what is wrong is the
        tree read whole (the pools known, or that it has children)."""
        config = self.pools.get(path)
        if config is not None and not self.store.has_pools_below(path):
            return config, None
        tree = self.store.list_pools()
        return tree.get(path), leaf_pool_error(tree, path)

    def host_capacities(self) -> list[Resources]:
        return self.stage.host_capacities()

    def daemon_hosts(self, constraint: Constraint | None) -> list[str]:
        """The hosts a new daemon job starts on: UP, matching its constraint, in id order."""
        self.stage.host_capacities()  # the host view read (to its end, once, if it knew no host)
        assert self.stage.hosts is not None
        return sorted(h for h, rec in self.stage.hosts.values.items() if eligible(rec, constraint))

    def parse(self, text: str) -> JobSpec:
        return self.stage._parse(text)

    def size_problems(self, spec: JobSpec, job: JobRow, tasks: list[TaskRow]) -> list[str]:
        return size_problems(spec, job, tasks, self.stage.emit.serde, self.stage.settings.max_message_bytes)


def new_job_id() -> str:
    return str(uuid.uuid4())
