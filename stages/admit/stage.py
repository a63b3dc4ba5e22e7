"""admit stage: job commands and task status events in; task demand and releases out.

Per batch: one store transaction holds every job, task and state change; only after it commits
does anything go out (so a crash replays the batch and finds the store already right).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import Counter

from peloton import metrics
from peloton.auth.permissions import PoolsAbove
from peloton.model.events import statuses_of_runs, task_id_of, task_kill
from peloton.model.health import DISABLED
from peloton.model.host_capacities import HOST_CAPACITY, HostCapacities
from peloton.model.jobconfig import parse_job_config
from peloton.model.jobspec import JobConfigError
from peloton.model.pool import leaf_pool_error
from peloton.model.resources import Resources
from peloton.model.states import (
    JOB_TERMINAL,
    LATE_END_REASONS,
    MESOS_TERMINAL,
    MESOS_TO_TASK,
    TASK_ORDER,
    TASK_TERMINAL,
)
from peloton.runtime import CompactedView, Record, Stage, Sweep, now_ms
from peloton.store import CLAIMS_KEPT_MS, JobRow, JobStore, TaskRow
from peloton.topics import partition_for
from stages.admit.checks import deleted_id_problem, fit_problems, job_id_problem, size_problems
from stages.admit.commands import (
    ORPHAN,
    REMOVED,
    STOPPED,
    CommandError,
    changed_instances,
    command_options,
    command_problem,
    instance_ranges,
    to_restart,
    to_start,
    to_stop,
    update_fields,
    update_problems,
)
from stages.admit.drain import ON_HOST, plan_drain
from stages.admit.owned_tasks import OwnedTasks
from stages.admit.senders import sender_problem
from stages.admit.weight import record_weight
from stages.admit.workflow import (
    ACTIONS,
    ACTIVE,
    FAILED,
    RESTART,
    START,
    STOP,
    UPDATE,
    abort,
    advance,
    begin_rollback,
    legacy_workflow,
    new_workflow,
    options_problem,
    steer,
)
from stages.admit.expand import expand_job, gang_records, launch_spec, next_run, requeued_gang_id
from stages.admit.lifecycle import (
    DEADLINE_EXCEEDED,
    HOST_MAINTENANCE,
    LAUNCH_TIMEOUT,
    RESTARTED,
    Transition,
    job_state,
    progress_transition,
    service_backoff_s,
    status_problem,
    task_transition,
)

log = logging.getLogger("peloton.admit")

LIVE = frozenset({"TASK_STAGING", "TASK_STARTING", "TASK_RUNNING"})  # a run reporting itself alive
STEP, STATUS, MADE = "step", "status", "made"  # what a status handled is (AdmitStage._statuses)
DRAIN_CHECK_S = 1.0  # how often the job manager looks for runs to move off hosts in maintenance
CLAIM_SWEEP_S = 3600.0  # how often it forgets commands and deleted job ids past store.CLAIMS_KEPT_MS
# How often it looks for jobs that ended longer ago than settings.job_retention_s (a quarter of
# that when shorter, down to a second), and how many of them one tick deletes, each with its
# tasks and events: through a backlog the loop polls on.
EXPIRY_CHECK_S = 60.0
EXPIRED_PER_TICK = 20
KILLS_RESENT_MAX = 100_000  # KILLING runs killed again at a takeover (the oldest first)


class AdmitStage(Stage):
    name = "admit"
    inputs = ("job-commands", "task-status")
    assignment = "range"  # a job's commands and statuses (both keyed by job id) to one instance: OwnedTasks

    def __init__(self, store: JobStore, hosts: CompactedView | None = None):
        self.store = OwnedTasks(store)
        self.hosts = hosts  # host-state, for refusing tasks larger than every host
        self.capacities = HostCapacities()  # the distinct capacities among them
        self.owned: set[int] = set()  # task-status partitions: the jobs whose deadlines this instance checks
        self.commands_owned: set[int] = set()  # job-commands partitions
        self._slas: dict[str, tuple[int, int, int]] = {}
        self._last_deadlines = 0.0
        self._last_drains = 0.0
        self._last_sweep = float("-inf")  # the first tick sweeps
        self.expiry: Sweep | None = None  # of jobs past their retention (bind: it needs the settings)
        self._hosts_caught_up = 0.0  # when the host view, empty, last read host-state to its end

    def bind(self, emitter, settings, catalogue) -> None:
        super().bind(emitter, settings, catalogue)
        if self.hosts is None:
            self.hosts = CompactedView(settings, "host-state", catalogue, head=HOST_CAPACITY)
        self.status_partitions = catalogue["task-status"].partitions
        self.expiry = Sweep(min(EXPIRY_CHECK_S, max(1.0, settings.job_retention_s / 4)), EXPIRED_PER_TICK)

    def weight(self, record: Record) -> int:
        return record_weight(record)

    def handle(self, records: list[Record]) -> None:
        commands = [r for r in records if r.topic == "job-commands"]
        statuses = [r for r in records if r.topic == "task-status"]
        out: list[tuple[str, str, str, dict]] = []  # (topic, key, schema, value)
        # One transaction for the batch, and what it sends is emitted inside it: if anything
        # raises, the store rolls back and the runtime discards the output, so neither is half done.
        with self.store.transaction():
            if commands:
                self._commands(commands, out)
            if statuses:
                self._statuses(statuses, out)
            for topic, key, schema, value in out:
                self.emit.emit(topic, key, schema, value)

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
        for t in stuck:
            self._send_kill(t.job_id, t.instance, t.run_id, t.task_id, t.reason, t.message, now)
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

    def tick(self, now: float) -> None:
        self.capacities.update(self.hosts.poll())
        if now - self._last_deadlines >= self.settings.deadline_check_s:
            self._last_deadlines = now
            with self.store.transaction():
                self._deadlines()
        if now - self._last_drains >= DRAIN_CHECK_S:
            self._last_drains = now
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

    # -- deadlines and throttling -------------------------------------------------------------
    def _sla(self, job: JobRow) -> tuple[int, int, int]:
        """(sla.maximumRunningInstances, sla.maxRunningTime in s, sla.maximumUnavailableInstances)
        of a job, 0 when unlimited."""
        if job.job_id not in self._slas:
            try:
                spec = parse_job_config(job.config_text, self.settings.job_limits(), self.settings.yaml_limits())
                self._slas[job.job_id] = sla_of(spec)
            except JobConfigError:
                self._slas[job.job_id] = (0, 0, 0)
        return self._slas[job.job_id]

    def _mine(self, job_id: str) -> bool:
        return partition_for(job_id, self.status_partitions) in self.owned

    def _deadlines(self) -> None:
        """Kill runs that never reached RUNNING within the launch timeout (they run again, as lost
        runs do) and runs beyond their job's sla.maxRunningTime (they fail). Each instance
        checks the jobs whose status partition it owns."""
        now = now_ms()
        late = [t for t in self.store.tasks_in_states(
            ["LAUNCHING", "LAUNCHED", "STARTING"], now - int(self.settings.launch_timeout_s * 1000)) if self._mine(t.job_id)]
        over = []
        active = self.store.active_jobs()
        live = {job.job_id for job in active}
        self._slas = {j: v for j, v in self._slas.items() if j in live}  # forget jobs that ended
        for job in active:
            limit_s = self._sla(job)[1] if self._mine(job.job_id) else 0
            if limit_s > 0:
                over.extend(t for t in self.store.tasks_of_job(job.job_id)
                            if t.state == "RUNNING" and t.updated_ms < now - limit_s * 1000)
        self._count_tasks([job.job_id for job in active if self._mine(job.job_id)])
        for tasks, reason, why in ((late, LAUNCH_TIMEOUT, f"not running {self.settings.launch_timeout_s:g}s after "
                                    "its launch"), (over, DEADLINE_EXCEEDED, "ran longer than its job's "
                                                   "sla.maxRunningTime")):
            if tasks:
                self._kill_tasks(tasks, reason, f"deadline exceeded: {why}", now)
                log.warning("%d runs killed: %s", len(tasks), why)

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
        jobs = self.store.get_jobs(sorted(on_hosts))
        now = now_ms()
        kills: dict[str, list[TaskRow]] = {}
        for job_id, job in jobs.items():
            plan = plan_drain(job_id, self.store.tasks_of_job(job_id), draining, self._sla(job)[2])
            for t in plan.kill:
                kills.setdefault(t.host_id, []).append(t)
        for host_id, tasks in kills.items():
            self._kill_tasks(tasks, HOST_MAINTENANCE, f"host {host_id} is drained for maintenance", now)
            log.info("host %s drains: %d runs moved", host_id, len(tasks))

    def _count_tasks(self, job_ids: list[str]) -> None:
        """peloton_tasks: the tasks of this instance's jobs not yet ended, by state (a sum over the
        admit instances is the cluster's)."""
        totals: dict[str, int] = dict.fromkeys(TASK_ORDER, 0)
        for counts in self.store.task_state_counts(job_ids).values():
            for state, n in counts.items():
                totals[state] = totals.get(state, 0) + n
        for state, n in totals.items():
            metrics.TASKS.labels(state).set(n)

    def _record_events(self, events: list[tuple]) -> None:
        self.store.record_task_events(events)
        for state, n in Counter(e[4] for e in events).items():
            metrics.TASK_TRANSITIONS.labels(state).inc(n)

    def _release_throttled(self, job: JobRow, now: int, out: list) -> None:
        """sla.maximumRunningInstances: tasks wait INITIALIZED until fewer than the maximum are
        scheduled (not ended), then go PENDING in instance order."""
        maximum = self._sla(job)[0]
        if maximum <= 0:
            return
        tasks = self.store.tasks_of_job(job.job_id)
        waiting = [t for t in tasks if t.state == "INITIALIZED"]
        live = sum(1 for t in tasks if t.state not in TASK_TERMINAL and t.state != "INITIALIZED")
        go = waiting[:max(0, maximum - live)]
        if not go:
            return
        for t in go:
            t.state, t.updated_ms = "PENDING", now
        self.store.save_tasks(go)
        out.extend(("task-demand", job.pool, "peloton.GangDemand", g) for g in gang_records(job, go, now))

    def host_capacities(self) -> list[Resources]:
        self.capacities.update(self.hosts.poll())
        # Knowing no host lets an oversized task through to wait in place: an admit that has just
        # started reads host-state to its end first (at most once every 5 s while the cluster has none).
        if not self.hosts.values and time.monotonic() - self._hosts_caught_up >= 5.0:
            self.hosts.catch_up(timeout=2.0)
            self._hosts_caught_up = time.monotonic()
        return self.capacities.distinct(self.hosts.values)

    # -- job commands -----------------------------------------------------------------------
    def _commands(self, records: list[Record], out: list) -> None:
        # The pools the batch names, each read once with the line above it (what a signer's rights
        # need), not the whole tree: every pool's config parsed cost 4.8 ms a batch at 1,000 pools.
        pools = PoolsAbove(self.store.get_pool)
        if self.settings.signed_commands:
            records = self._signed(records, pools)
        creates = [r for r in records if r.value["kind"] == "CREATE"]
        control = [r for r in records if r.value["kind"] != "CREATE"]
        if creates:
            self._creates(creates, out, pools)
        if control:
            self._control(control, out)

    def _refuse(self, r: Record, reason: str) -> None:
        """A command the job manager will not act on: a dead letter for operators, and a row the
        sender's command status reads (the API answers with the reason)."""
        self.emit.dead_letter(r, reason)
        cmd = r.value
        self.store.refuse_command(cmd["command_id"], cmd["job_id"], cmd["pool"] or "", cmd["kind"], reason, now_ms())

    def _signed(self, records: list[Record], pools: PoolsAbove) -> list[Record]:
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
                self._refuse(r, problem)
            else:
                kept.append(r)
        return kept

    def _leaf_pool(self, pools: PoolsAbove, path: str) -> tuple[dict | None, str | None]:
        """A create's pool: its config, and why a job cannot go there (None: it can). A pool that
        exists with nothing below it is a leaf; only to say what is wrong is the tree read whole
        (the pools known, or that it has children)."""
        config = pools.get(path)
        if config is not None and not self.store.has_pools_below(path):
            return config, None
        tree = self.store.list_pools()
        return tree.get(path), leaf_pool_error(tree, path)

    def _creates(self, records: list[Record], out: list, pools: PoolsAbove) -> None:
        now = now_ms()
        known = self.store.get_jobs([r.value["job_id"] for r in records])
        gone = self.store.deleted_jobs([r.value["job_id"] for r in records])
        hosts: list[Resources] | None = None
        jobs: list[JobRow] = []
        tasks: list[TaskRow] = []
        seen: set[str] = set()
        repeats: set[str] = set()
        leaves: dict[str, tuple[dict | None, str | None]] = {}  # pool -> _leaf_pool's answer
        for r in records:
            cmd = r.value
            if not cmd["config"]:
                self._refuse(r, "CREATE command without a job config")
                continue
            problem = job_id_problem(cmd["job_id"])
            if problem:
                self._refuse(r, problem)
                continue
            if cmd["job_id"] in gone:
                # The deleted job's own CREATE, read again, was applied once: it has nothing to do.
                if (self.store.command_outcome(cmd["command_id"]) or {}).get("state") != "applied":
                    self._refuse(r, deleted_id_problem(cmd["job_id"], gone[cmd["job_id"]]))
                continue
            if cmd["job_id"] in known:
                job = known[cmd["job_id"]]
                if (cmd["pool"], cmd["config"]) != (job.pool, self._created_with(job)):
                    # Another job under an id taken (two creates with one chosen id raced past the
                    # sender's check): refused, where a repeat of the same create is applied.
                    self._refuse(r, f"job {cmd['job_id']} exists already with another config or pool: "
                                    "a job id names one job")
                    continue
                repeats.add(cmd["job_id"])  # handled below, without judging the config again
                continue
            if cmd["job_id"] in seen:
                continue  # created earlier in this batch: a repeat
            if cmd["pool"] not in leaves:
                leaves[cmd["pool"]] = self._leaf_pool(pools, cmd["pool"])
            pool_config, problem = leaves[cmd["pool"]]
            if problem:
                self._refuse(r, problem)
                continue
            try:
                spec = parse_job_config(cmd["config"], self.settings.job_limits(), self.settings.yaml_limits())
            except JobConfigError as exc:
                self._refuse(r, str(exc))
                continue
            if hosts is None:
                hosts = self.host_capacities()
            job, job_tasks = expand_job(cmd["job_id"], cmd["pool"], spec, cmd["config"], now)
            problems = fit_problems(spec, cmd["pool"], pool_config, hosts) or size_problems(
                spec, job, job_tasks, self.emit.serde, self.settings.max_message_bytes)
            if problems:
                self._refuse(r, "job refused: " + "; ".join(problems))
                continue
            seen.add(job.job_id)
            jobs.append(job)
            tasks.extend(job_tasks)
            self._slas[job.job_id] = sla_of(spec)  # not parsed again
        created = self.store.create_jobs(jobs, tasks)
        # Each create acted on (or found its job made already) is applied: what its sender's
        # command status reads, as for the other commands.
        applied = [r.value for r in records if r.value["job_id"] in created or r.value["job_id"] in repeats]
        self.store.claim_commands([c["command_id"] for c in applied], [c["job_id"] for c in applied], now)
        by_job: dict[str, list[TaskRow]] = {}
        for t in tasks:
            by_job.setdefault(t.job_id, []).append(t)
        for job in jobs:
            if job.job_id in created:
                metrics.JOBS_CREATED.labels(job.pool).inc()
                ready = [t for t in by_job[job.job_id] if t.state == "PENDING"]  # not those throttled
                out.extend(("task-demand", job.pool, "peloton.GangDemand", g) for g in gang_records(job, ready, now))
        # A repeated create (a redelivery after a crash, or a producer retry) must not lose demand
        # that was stored but never sent: send whatever is not launched yet again; entitle dedupes.
        if repeats:
            pending = self.store.unlaunched_tasks_of_jobs(list(repeats))
            for job_id in repeats:
                job = known[job_id]
                mine = [t for t in pending if t.job_id == job_id]
                out.extend(("task-demand", job.pool, "peloton.GangDemand", g) for g in gang_records(job, mine, now))

    def _created_with(self, job: JobRow) -> str | None:
        """The config a job was created with: an update keeps the versions before it."""
        return job.config_text if job.config_version <= 1 else self.store.job_config(job.job_id, 1)

    def _control(self, records: list[Record], out: list) -> None:
        """STOP, START and DELETE, in the order they came. Each acts once: its command id is
        claimed in the store in the batch's transaction, so a redelivery finds it claimed."""
        now = now_ms()
        fresh = self.store.claim_commands([r.value["command_id"] for r in records],
                                          [r.value["job_id"] for r in records], now)
        jobs = self.store.get_jobs(list({r.value["job_id"] for r in records}))
        for r in records:
            cmd = r.value
            if cmd["command_id"] not in fresh:
                continue  # delivered twice: it acted the first time
            job = jobs.get(cmd["job_id"])
            problem = command_problem(cmd["kind"], job, cmd["job_id"])
            if problem is None and cmd["kind"] != "DELETE":
                try:
                    instances = instance_ranges(cmd["instances"], job.instance_count)
                except CommandError as exc:
                    problem = str(exc)
            if problem is None and cmd["kind"] in (RESTART, UPDATE, START, STOP):
                problem = options_problem(command_options(cmd))
            if problem:
                self._refuse(r, problem)
                continue
            who = cmd["requested_by"] or "a user"
            if cmd["kind"] in ACTIONS:
                problem = self._steer(job, cmd, who, now)
                if problem:
                    self._refuse(r, problem)
                continue
            if cmd["kind"] == "DELETE":
                self.store.delete_job(job.job_id, now)
                jobs.pop(job.job_id, None)
                log.info("job %s deleted", job.job_id)
                continue
            tasks = self.store.tasks_of_job(job.job_id)
            rolling = cmd["kind"] in (START, STOP) and command_options(cmd).batch_size > 0
            if rolling:  # a batch at a time, as a workflow with an id
                chosen = (to_stop if cmd["kind"] == STOP else to_start)(tasks, instances)
                self._begin(job, new_workflow(cmd["command_id"], job.job_id, cmd["kind"], [t.instance for t in chosen],
                                              command_options(cmd), job.config_version, job.config_version, who, now),
                            tasks, now)
            elif cmd["kind"] == "STOP":
                self._stop(job, tasks, instances, who, now)
            elif cmd["kind"] == "START":
                self._start(job, tasks, instances, now, out)
            elif cmd["kind"] == "RESTART":
                targets = [t.instance for t in to_restart(tasks, instances)]
                self._begin(job, new_workflow(cmd["command_id"], job.job_id, RESTART, targets, command_options(cmd),
                                              job.config_version, job.config_version, who, now), tasks, now)
            else:
                problem = self._update(job, tasks, cmd, who, now, out)
                if problem:
                    self._refuse(r, problem)

    def _stop(self, job: JobRow, tasks: list[TaskRow], instances: list[int] | None, who: str, now: int) -> None:
        """Every run not ended yet goes KILLING and is killed wherever it is, through the same
        path as a preemption: a TaskKill on every partition of the placements topic. Its
        TASK_KILLED ends it (and releases its allocation); the job is KILLED when all have ended."""
        victims = to_stop(tasks, instances)
        message = f"stopped by {who}" + (f" (instances {instances[0]}-{instances[-1]})" if instances else "")
        self._kill_tasks(victims, STOPPED, message, now)
        if instances is None:
            job.state = "KILLING"
            self._end_workflow(job, f"the job was stopped by {who}", now)  # a stopped job rolls nothing out
        self._settle(job, now)
        log.info("job %s: stopping %d runs", job.job_id, len(victims))

    # -- update workflows (stages/admit/workflow.py) --------------------------------------------
    def _workflow(self, job: JobRow) -> dict | None:
        return legacy_workflow(job.rollout, job.job_id, job.config_version) if job.rollout else None

    def _end_workflow(self, job: JobRow, why: str, now: int) -> None:
        """The job's workflow in progress, if any, ends ABORTED with the reason."""
        active = self._workflow(job)
        if active is not None:
            self.store.save_updates([abort(active, why, now)])
            job.rollout = None

    def _begin(self, job: JobRow, wf: dict, tasks: list[TaskRow], now: int) -> None:
        """A new workflow: the one in progress ends (as Peloton's new update aborts the old)."""
        self._end_workflow(job, f"superseded by update {wf['update_id']}", now)
        self._step(job, wf, tasks, now)
        log.info("job %s: %s %s over %d instances", job.job_id, wf["kind"].lower(), wf["update_id"],
                 len(wf["instances"]))

    def _step(self, job: JobRow, wf: dict, tasks: list[TaskRow], now: int, stored: dict | None = None) -> None:
        """Move a workflow on by its instances' tasks: the next batch's runs go KILLING with reason
        RESTARTED (their TASK_KILLED reruns them with the job's config as it is now); the job row
        keeps the workflow while it is active, the updates table always."""
        step = advance(wf, {t.instance: t for t in tasks}, now, self._sla(job)[2])
        if step.roll_back:
            self._roll_back(job, step.workflow, tasks, now)
            return
        wf = step.workflow
        if step.replace:
            by_instance = {t.instance: t for t in tasks}
            batch = [by_instance[i] for i in step.replace]
            if wf["kind"] == STOP:
                self._kill_tasks(batch, STOPPED, f"stopped by {wf['requested_by']} (rolling stop {wf['update_id']})",
                                 now)
            elif wf["kind"] == START:
                self._start(job, batch, None, now)
            else:
                name = f"{'a restart' if wf['kind'] == RESTART else 'an update'} ({wf['update_id']}, " \
                       f"{wf['requested_by']})"
                self._kill_tasks(batch, RESTARTED, f"replaced by {name}", now)
        if stored is not None and _same(stored, wf):
            return  # nothing moved: no write
        job.rollout = wf if wf["state"] in ACTIVE else None
        job.updated_ms = now
        self.store.update_jobs([job])
        self.store.save_updates([wf])

    def _advance_rollout(self, job: JobRow, now: int) -> None:
        """After status changes of a job with a workflow in progress."""
        wf = self._workflow(job)
        self._step(job, wf, self.store.tasks_of_job(job.job_id), now, stored=wf)

    def _roll_back(self, job: JobRow, wf: dict, tasks: list[TaskRow], now: int) -> None:
        """The previous config again, as a new version, then every instance the update touched
        replaced once more."""
        text = self.store.job_config(job.job_id, wf["from_version"])
        if text is None:
            wf = {**wf, "state": FAILED, "message": f"{wf['message']}; config version {wf['from_version']} is not "
                                                     "kept, so nothing to roll back to", "completed_ms": now}
            self._step(job, wf, tasks, now)
            return
        version = job.config_version + 1
        job.config_text, job.config_version = text, version
        self.store.save_job_configs([(job.job_id, version, text, now)])
        self._slas.pop(job.job_id, None)  # the restored config's limits, read again
        self._step(job, begin_rollback(wf, version, now), tasks, now)
        log.warning("job %s: update %s rolls back to the config of version %d (now version %d): %s", job.job_id,
                    wf["update_id"], wf["from_version"], version, wf["message"])

    def _steer(self, job: JobRow, cmd: dict, who: str, now: int) -> str | None:
        """PAUSE, RESUME, ABORT or ROLLBACK of one of the job's updates; why not, or None."""
        update_id = cmd["update_id"] or ""
        if not update_id:
            return f"{cmd['kind']} names no update (update_id: the id `pelotonctl update list JOB` shows)"
        active = self._workflow(job)
        wf = active if active is not None and active["update_id"] == update_id else self.store.get_update(update_id)
        if wf is None or wf["job_id"] != job.job_id:
            return f"job {job.job_id} has no update {update_id!r}"
        steered, problem = steer(wf, cmd["kind"], who, now)
        if problem:
            return problem
        tasks = self.store.tasks_of_job(job.job_id)
        if cmd["kind"] == "ROLLBACK":
            self._roll_back(job, steered, tasks, now)
        else:
            self._step(job, steered, tasks, now)
        log.info("job %s: update %s %s by %s", job.job_id, update_id, cmd["kind"].lower(), who)
        return None

    def _update(self, job: JobRow, tasks: list[TaskRow], cmd: dict, who: str, now: int, out: list) -> str | None:
        """A new config version: immutable fields kept, new instances started, instances whose
        config changed replaced in batches (updateConfig.batchSize, or the command's)."""
        limits, yaml_limits = self.settings.job_limits(), self.settings.yaml_limits()
        if not cmd["config"]:
            return "UPDATE command without a job config"
        try:
            new = parse_job_config(cmd["config"], limits, yaml_limits)
        except JobConfigError as exc:
            return str(exc)
        old = parse_job_config(job.config_text, limits, yaml_limits)
        version, from_file = update_fields(cmd["config"])
        problems = update_problems(old, new, job.pool, job.config_version, version)
        if problems:
            return "update refused: " + "; ".join(problems)
        changed = changed_instances(old, new)
        grown, new_tasks = expand_job(job.job_id, job.pool, new, cmd["config"], now)
        added = [t for t in new_tasks if t.instance >= old.instance_count]
        before = {t.instance: t for t in tasks}
        for t in added:
            if t.instance in before:  # removed by an earlier shrink, back now: its runs go on numbering
                t.run_id = before[t.instance].run_id + 1
                t.task_id = t.gang_id = task_id_of(t.job_id, t.instance, t.run_id)
                t.spec = {**t.spec, "task_id": t.task_id, "run_id": t.run_id}
        old_version = job.config_version
        # Both versions kept: the old one is what a rollback restores.
        self.store.save_job_configs([(job.job_id, old_version, job.config_text, job.updated_ms),
                                     (job.job_id, old_version + 1, cmd["config"], now)])
        job.config_text, job.config_version, job.instance_count = cmd["config"], old_version + 1, new.instance_count
        self._slas[job.job_id] = sla_of(new)
        if added:
            self.store.save_tasks(added)
            ready = [t for t in added if t.state == "PENDING"]
            out.extend(("task-demand", job.pool, "peloton.GangDemand", g) for g in gang_records(job, ready, now))
        removed = self._remove(job, tasks, new.instance_count, cmd["command_id"], old.instance_count, now)
        tasks = [t for t in tasks if t.instance < new.instance_count]
        targets = [t.instance for t in to_restart(tasks, changed)] if changed else []
        self._begin(job, new_workflow(cmd["command_id"], job.job_id, UPDATE, targets, command_options(cmd, from_file),
                                      old_version, job.config_version, who, now, [t.instance for t in added],
                                      removed), tasks, now)
        log.info("job %s: config version %d, %d new instances, %d removed, %d to replace", job.job_id,
                 job.config_version, len(added), len(removed), len(targets))
        return None

    def _remove(self, job: JobRow, tasks: list[TaskRow], count: int, update_id: str, old_count: int,
                now: int) -> list[int]:
        """A shrink's extra instances (count and up) are stopped, highest first; each ends DELETED
        (not KILLED: it is no instance of the job any more, and counts for nothing in its state)."""
        extra = sorted((t for t in tasks if t.instance >= count), key=lambda t: -t.instance)
        if not extra:
            return []
        why = f"removed by update {update_id} (instanceCount {old_count} -> {count})"
        ended = [t for t in extra if t.state in TASK_TERMINAL and t.state != "DELETED"]
        for t in ended:
            t.state, t.reason, t.message, t.updated_ms = "DELETED", REMOVED, why, now
        if ended:
            self.store.update_task_runs(ended, same_run=True)
            self._record_events([(t.task_id, t.job_id, t.instance, t.run_id, "DELETED", REMOVED, None, now, t.host_id,
                                  why) for t in ended])
        self._kill_tasks(to_stop(extra, None), STOPPED, why, now)
        return sorted(t.instance for t in extra)

    def _respec(self, job: JobRow, task: TaskRow, specs: dict) -> None:
        if job.job_id not in specs:
            specs[job.job_id] = parse_job_config(job.config_text, self.settings.job_limits(), self.settings.yaml_limits())
        spec = specs[job.job_id]
        task.spec = launch_spec(job.job_id, spec, spec.tasks[task.instance], task.run_id)
        task.max_failures = spec.tasks[task.instance].max_failures

    def _controller_state(self, job: JobRow) -> str | None:
        """The state of the job's controller task (only instance 0 may be one), or None."""
        task = self.store.tasks_by_instance([(job.job_id, 0)]).get((job.job_id, 0))
        return task.state if task is not None and task.spec.get("controller") else None

    def _kill_tasks(self, tasks: list[TaskRow], reason: str, message: str, now: int) -> None:
        """The tasks' current runs go KILLING with the reason, recorded, and are killed wherever
        they are: the TASK_KILLED that follows decides what comes next (by the reason)."""
        for t in tasks:
            t.state, t.reason, t.message, t.updated_ms = "KILLING", reason, message, now
            self._send_kill(t.job_id, t.instance, t.run_id, t.task_id, reason, message, now)
        self.store.save_tasks(tasks)
        self._record_events([(t.task_id, t.job_id, t.instance, t.run_id, "KILLING", reason, None, now,
                                        t.host_id, message) for t in tasks])

    def _send_kill(self, job_id: str, instance: int, run_id: int, task_id: str, reason: str, message: str,
                   now: int) -> None:
        """A TaskKill on every host shard's partition: whichever has the run stops it."""
        self.emit.emit_to_every_partition("placements", task_id, "peloton.TaskKill",
                                          task_kill(job_id, instance, run_id, task_id, reason, message, now))

    def _start(self, job: JobRow, tasks: list[TaskRow], instances: list[int] | None, now: int,
               out: list | None = None) -> None:
        """Stopped (KILLED) tasks run again, each as a new run in a gang of its own (their demand
        goes to `out`, or straight to the emitter)."""
        again = to_start(tasks, instances)
        if not again:
            return
        for t in again:
            next_run(t, now)
            t.reason, t.message = "", ""
        self.store.save_tasks(again)
        self._record_events([(t.task_id, t.job_id, t.instance, t.run_id, "PENDING", "STARTED", None, now,
                                        "", "started again") for t in again])
        job.state, job.completed_ms = "PENDING", None
        self._settle(job, now)
        demand = [("task-demand", job.pool, "peloton.GangDemand", g) for g in gang_records(job, again, now)]
        if out is not None:
            out.extend(demand)
        else:
            for topic, key, schema, value in demand:
                self.emit.emit(topic, key, schema, value)

    def _settle(self, job: JobRow, now: int) -> None:
        """The job's state from its tasks' counts now (the current state may be set for the rules)."""
        counts = self.store.task_state_counts([job.job_id])[job.job_id]
        current = job.state if job.state not in JOB_TERMINAL else "PENDING"
        state = job_state(counts, job.instance_count, current)
        if state in JOB_TERMINAL:
            state = job_state(counts, job.instance_count, current, self._controller_state(job))
        job.state, job.updated_ms = state, now
        if state in JOB_TERMINAL:
            job.completed_ms = job.completed_ms or now
        self.store.update_jobs([job])

    # -- task status ------------------------------------------------------------------------
    def _statuses(self, records: list[Record], out: list) -> None:
        now = now_ms()
        # (record, event, kind): a run of a TaskProgress record as it is there (STEP), a TaskStatus
        # (STATUS), or the TaskStatus a run of a TaskStatusRuns record stands for (MADE)
        steps = []
        keys = set()
        for r in records:
            if r.schema == "peloton.TaskProgress":
                job_id = r.value["job_id"]
                for run in r.value["runs"]:
                    steps.append((r, run, STEP))
                    keys.add((job_id, run["instance"]))
                continue
            if r.schema == "peloton.TaskStatusRuns":
                of_record, kind = statuses_of_runs(r.value), MADE
            else:
                of_record, kind = [r.value], STATUS
            for ev in of_record:
                steps.append((r, ev, kind))
                keys.add((ev["job_id"], ev["instance"]))
        keys = list(keys)
        # Specs are read only for the runs that need them (a new run, a gang sent back): most
        # statuses only move a run, and the spec is the largest column.
        tasks = self.store.tasks_by_instance(keys, spec=False)
        jobs = self.store.get_jobs(list({job_id for job_id, _ in tasks}))
        specs: dict[str, object] = {}  # job id -> its parsed config, for replacements
        delays: dict[str, int] = {}  # task id of a SERVICE task's next run -> its restart backoff (ms)
        changed: dict[tuple[str, int], TaskRow] = {}
        respecced: set[tuple[str, int]] = set()  # a new run: its spec changed too
        specs_read: dict[tuple[str, int], dict] = {}
        reruns: list[TaskRow] = []
        requeue_batch = uuid.uuid4().hex[:8]
        events = []
        for r, ev, kind in steps:
            if kind == STEP:
                # A step before launch of a run that has moved on, or of a job deleted meanwhile,
                # says nothing any more: it is dropped, not dead-lettered.
                step = r.value
                task = tasks.get((step["job_id"], ev["instance"]))
                move = progress_transition(task.state, task.run_id, ev["run_id"], step["state"]) if task else None
                if move is not None:  # of the task's current run: its task id is the run's
                    if move.state != step["state"] and TASK_ORDER[step["state"]] > TASK_ORDER[task.state]:
                        # the step itself, then where it leaves the run (LAUNCHING: launched)
                        events.append((task.task_id, task.job_id, task.instance, task.run_id, step["state"], "",
                                       None, step["timestamp_ms"], ev["host_id"], ""))
                    events.append((task.task_id, task.job_id, task.instance, task.run_id, move.state, "", None,
                                   step["timestamp_ms"], ev["host_id"], ""))
                    task.state = move.state
                    task.host_id = ev["host_id"] or task.host_id
                    task.updated_ms = now
                    if move.state in ("PLACED", "LAUNCHED"):  # why it waited is over
                        task.reason, task.message = "", ""
                    changed[(task.job_id, task.instance)] = task
                continue
            task = tasks.get((ev["job_id"], ev["instance"]))
            problem = status_problem(task is not None, ev, id_made=kind == MADE)
            if problem:
                if (task is None and ev["state"] in LIVE and ev["host_id"]
                        and ev["task_id"] == task_id_of(ev["job_id"], ev["instance"], ev["run_id"])):
                    # a run on a host of a task no longer known (its job deleted): stop it
                    self._send_kill(ev["job_id"], ev["instance"], ev["run_id"], ev["task_id"], ORPHAN,
                                    f"orphan: {problem}", now)
                self.emit.dead_letter(_one_status(r, ev), problem)
                continue
            if ev["run_id"] < task.run_id and ev["state"] in LIVE:
                # An older run still reports itself alive (its host came back): only the current
                # run may hold the task's place, so the old one is stopped on its host.
                self._send_kill(ev["job_id"], ev["instance"], ev["run_id"], ev["task_id"], ORPHAN,
                                f"orphan: run {ev['run_id']} of a task now at run {task.run_id}", now)
            service = jobs[task.job_id].type == "SERVICE" if task.job_id in jobs else False
            # A stop wins over the reason of an earlier kill of the same run (a restart's, say),
            # which the host manager reports since it came first.
            reason = STOPPED if task.state == "KILLING" and task.reason == STOPPED else ev["reason"]
            # A run being replaced that ended on its own before the kill reached it: its next run
            # is still the replacement.
            replaced = ev["reason"] == RESTARTED or (task.state == "KILLING" and task.reason == RESTARTED)
            move = task_transition(task.state, task.run_id, ev["run_id"], ev["state"], task.failures, task.max_failures,
                                   reason, service)
            if move is not None and move.state in TASK_TERMINAL and task.job_id in jobs \
                    and task.instance >= jobs[task.job_id].instance_count:
                move = Transition("DELETED", release=move.release)  # removed by a shrink: it ends for good
            if move is None and _health_news(task, ev):
                # A health check changed how the running run is (the state stays RUNNING).
                events.append((ev["task_id"], ev["job_id"], ev["instance"], ev["run_id"], "RUNNING", ev["reason"],
                               None, ev["timestamp_ms"], ev["host_id"], f"{ev['health']}: {ev['message']}".rstrip(": ")))
                task.health, task.updated_ms = ev["health"], now
                changed[(task.job_id, task.instance)] = task
                continue
            if move is None:
                if ev["state"] in MESOS_TERMINAL and ev["reason"] in LATE_END_REASONS and ev["host_id"]:
                    # How a run given up earlier ended on its host after all: its history says so.
                    events.append((ev["task_id"], ev["job_id"], ev["instance"], ev["run_id"],
                                   MESOS_TO_TASK.get(ev["state"], ev["state"]), ev["reason"], ev["exit_code"],
                                   ev["timestamp_ms"], ev["host_id"], ev["message"]))
                if ev["state"] in MESOS_TERMINAL and (ev["run_id"] < task.run_id or task.state in TASK_TERMINAL):
                    # The end of a run this store already has: read again because the batch that
                    # stored it died before its output committed, its release with it. Sent
                    # again, so the run's allocation is not held for ever; entitle dedupes it.
                    out.append(("task-demand", task.pool, "peloton.TaskRelease", {
                        "task_id": ev["task_id"], "job_id": task.job_id, "pool": task.pool,
                        "reason": ev["state"], "timestamp_ms": now}))
                continue
            events.append((ev["task_id"], ev["job_id"], ev["instance"], ev["run_id"], move.state,
                           ev["reason"], ev["exit_code"], ev["timestamp_ms"], ev["host_id"], ev["message"]))
            if move.release:
                release = {"task_id": task.task_id, "job_id": task.job_id, "pool": task.pool,
                           "reason": ev["state"], "timestamp_ms": now}
                out.append(("task-demand", task.pool, "peloton.TaskRelease", release))
            task.state = move.state
            if move.state == "RUNNING":
                task.health = ev.get("health") or DISABLED
            task.host_id = ev["host_id"] or task.host_id
            task.reason, task.message = ev["reason"], ev["message"]
            task.exit_code, task.signal = ev["exit_code"], ev["signal"]
            task.updated_ms = now
            if move.count_failure:
                task.failures += 1
            if (move.retry or move.requeue) and task.spec is None:
                if not specs_read:  # once per batch, for every run this batch may end
                    ending = [(e["job_id"], e["instance"]) for _, e, p in steps if not p and e["state"] in MESOS_TERMINAL]
                    specs_read.update({k: t.spec for k, t in self.store.tasks_by_instance(ending).items()})
                task.spec = specs_read.get((task.job_id, task.instance)) or \
                    self.store.tasks_by_instance([(task.job_id, task.instance)])[(task.job_id, task.instance)].spec
            if move.retry:
                next_run(task, now)
                respecced.add((task.job_id, task.instance))
                if replaced:  # a replacement runs the job's config as it is now
                    self._respec(jobs[task.job_id], task, specs)
                    rollout = jobs[task.job_id].rollout or {}
                    if rollout.get("options", {}).get("in_place") and task.host_id:
                        task.spec["prefer_host"] = task.host_id  # back where it ran, where it fits
                if service and move.count_failure:
                    delays[task.task_id] = int(service_backoff_s(task.failures, self.settings.service_backoff_base_s)
                                               * 1000)
            elif move.requeue:
                task.gang_id = requeued_gang_id(task.gang_id, requeue_batch)
            if move.retry or move.requeue:
                reruns.append(task)
            changed[(task.job_id, task.instance)] = task
        if not changed:
            self._record_events(events)  # late ends of runs given up: history only
            return
        # Most moves change the run's state only: its spec, the largest column, is not written
        # again, nor its ids (and their index) unless it runs again or goes back to its pool.
        rerun = {(t.job_id, t.instance) for t in reruns}
        self.store.save_tasks([t for key, t in changed.items() if key in respecced])
        self.store.update_task_runs([t for key, t in changed.items() if key in rerun and key not in respecced])
        self.store.update_task_runs([t for key, t in changed.items() if key not in rerun], same_run=True)
        self._record_events(events)
        job_ids = list({t.job_id for t in changed.values()})
        counts = self.store.task_state_counts(job_ids)
        updated = []
        for job_id in job_ids:
            job = jobs[job_id]
            state = job_state(counts[job_id], job.instance_count, job.state)
            if state in JOB_TERMINAL:
                state = job_state(counts[job_id], job.instance_count, job.state, self._controller_state(job))
            if state != job.state:
                job.state, job.updated_ms = state, now
                if state in JOB_TERMINAL:
                    job.completed_ms = now
                updated.append(job)
        self.store.update_jobs(updated)
        for job_id in job_ids:
            job = jobs[job_id]
            if job.rollout and (job.state not in JOB_TERMINAL or job.rollout.get("kind") == STOP):
                self._advance_rollout(job, now)  # (a rolling stop ends well with its job)
            elif job.rollout:  # every task ended: nothing left to roll out
                self._end_workflow(job, f"the job ended {job.state}", now)
                self.store.update_jobs([job])
            if counts[job_id].get("INITIALIZED"):
                self._release_throttled(job, now, out)
        by_job: dict[str, list[TaskRow]] = {}
        for task in reruns:
            by_job.setdefault(task.job_id, []).append(task)
        for job_id, tasks_of_job in by_job.items():  # requeued tasks of one gang go back as one gang
            job = jobs[job_id]
            for g in gang_records(job, tasks_of_job, now):
                delay = max((delays.get(t["task_id"], 0) for t in g["tasks"]), default=0)
                if delay:
                    g["not_before_ms"] = now + delay  # entitle keeps it queued until then
                out.append(("task-demand", job.pool, "peloton.GangDemand", g))

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
        self.hosts.close()


def _one_status(r: Record, ev: dict) -> Record:
    """The record a status came in, or, for one run of a TaskStatusRuns, that run's TaskStatus
    alone (a dead letter holds it alone, to be replayed as it is)."""
    if r.schema != "peloton.TaskStatusRuns":
        return r
    at = next(i for i, run in enumerate(r.value["runs"]) if (run["instance"], run["run_id"], run["offset_ms"])
              == (ev["instance"], ev["run_id"], ev["timestamp_ms"] - r.value["timestamp_ms"]))
    return Record(r.topic, r.partition, r.offset, r.key, "peloton.TaskStatus", ev, r.raw_key, r.raw_value, at,
                  r.headers)


def _health_news(task: TaskRow, ev: dict) -> bool:
    """A TASK_RUNNING of the running current run that tells a health it did not have."""
    return (ev["state"] == "TASK_RUNNING" and task.state == "RUNNING" and ev["run_id"] == task.run_id
            and bool(ev.get("health")) and ev["health"] != task.health)


def sla_of(spec) -> tuple[int, int, int]:
    """What the job manager enforces of a job's sla (see AdmitStage._sla)."""
    return spec.max_running_instances, spec.max_running_time_s, spec.max_unavailable_instances


def _same(a: dict, b: dict) -> bool:
    """Two states of a workflow alike but for when they were written."""
    return {k: v for k, v in a.items() if k != "updated_ms"} == {k: v for k, v in b.items() if k != "updated_ms"}


def new_job_id() -> str:
    return str(uuid.uuid4())
