"""The task rows an admit instance owns, remembered between batches.

Nearly every status moves a run one step, and reading its row back from the store was a fifth of
admit's CPU. Admit is the only writer of tasks, and its group assigns job-commands and task-status
by range (both keyed by job id, with the same partition count), so one instance owns every command
and every status of a job: while it holds those partitions, the rows it last wrote are the store's.

The store stays the truth: every write still goes to it, in the batch's transaction, and what is
remembered is what was written. Memory is forgotten when it could be wrong: a transaction that
fails (its writes rolled back), partitions that move, an assignment that does not pair the two
topics' partitions (then nothing is remembered until one does). Ended runs are not kept (few
statuses follow them), nor specs (the largest column; read from the store when a run needs it), and
at most `limit` rows are.

Each job's count of tasks by state is kept the same way, once read or made: every write of a task
through here moves it from the state its remembered row had to the one written. A write of a task
whose row is not remembered (its old state unknown) forgets its job's counts, which the store
counts again when next asked. Its GROUP BY read every row of each job a batch moved: 100 runs of
a 1,000-task job read 1,000 rows (admit alone, steps in batches of 100: 143 -> 112 us a task)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from peloton.model.states import TASK_TERMINAL
from peloton.store import JobRow, JobStore, TaskRow
from peloton.store.rows import RUN_COLS, STATE_COLS, STEP_COLS, moved_cols

LIMIT = 200_000  # rows: about 80 MB
COUNTS_LIMIT = 50_000  # jobs whose counts are kept (each a few hundred bytes)


def _copy(t: TaskRow) -> TaskRow:
    """A row of its own, without its spec (callers change what they read)."""
    return TaskRow(t.job_id, t.instance, t.run_id, t.task_id, t.pool, t.gang_id, t.state, None, t.max_failures,
                   t.failures, t.host_id, t.reason, t.message, t.exit_code, t.signal, t.updated_ms, t.health)


def _copier(cols: tuple[str, ...]) -> Callable[[TaskRow, TaskRow], None]:
    """copy(dst, src): dst.<col> = src.<col> for each of the columns, as straight-line code (our
    own column names), several times faster than getattr and setattr in a loop."""
    scope: dict[str, Any] = {}
    exec("def copy(dst, src):\n" + "".join(f"    dst.{c} = src.{c}\n" for c in cols), scope)  # noqa: S102
    return scope["copy"]


_COPY_COLS = {cols: _copier(cols) for cols in (RUN_COLS, STATE_COLS, STEP_COLS)}


class OwnedTasks:
    """The store as admit uses it, with the rows of the jobs it owns kept in memory. What it does not
    say here goes to the store unchanged."""

    def __init__(self, store: JobStore, limit: int = LIMIT):
        self.store = store
        self.limit = limit
        self.rows: dict[tuple[str, int], TaskRow] = {}
        self.counts: dict[str, dict[str, int]] = {}  # job id -> its tasks by state, as the store has them
        self.enabled = False  # only while the assignment pairs the two topics' partitions
        self.reads = 0  # rows read from the store for lack of memory (a test reads it)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    # -- when memory holds -----------------------------------------------------------------
    def assigned(self, commands: set[int], statuses: set[int], counts_agree: bool = True) -> None:
        """The instance's partitions now: remembered rows are kept only while the two topics have
        as many partitions and the job-commands and task-status ones it holds are the same numbers."""
        self.forget()
        self.enabled = counts_agree and commands == statuses

    def forget(self) -> None:
        self.rows.clear()
        self.counts.clear()

    @contextmanager
    def transaction(self) -> Iterator[OwnedTasks]:
        try:
            with self.store.transaction():
                yield self
        except BaseException:
            self.forget()  # what was written in it is rolled back: so is what was remembered
            raise

    def _keep(self, tasks: list[TaskRow]) -> None:
        if not self.enabled:
            return
        if len(self.rows) + len(tasks) > self.limit:
            self.forget()  # a flood of new tasks: start again rather than track which is oldest
        for t in tasks:
            key = (t.job_id, t.instance)
            if t.state in TASK_TERMINAL:
                self.rows.pop(key, None)
            else:
                self.rows[key] = _copy(t)

    # -- reads and writes ------------------------------------------------------------------
    def tasks_by_instance(self, keys: list[tuple[str, int]], spec: bool = True) -> dict[tuple[str, int], TaskRow]:
        if spec or not self.enabled:
            return self.store.tasks_by_instance(keys, spec=spec)
        rows = self.rows
        missing = [k for k in keys if k not in rows]
        found = self.store.tasks_by_instance(missing, spec=False) if missing else {}
        self.reads += len(missing)
        out = {k: _copy(rows[k]) for k in keys if k in rows}
        out.update(found)
        self._keep(list(found.values()))
        return out

    def create_jobs(self, jobs: list[JobRow], tasks: list[TaskRow]) -> set[str]:
        new = self.store.create_jobs(jobs, tasks)
        made = [t for t in tasks if t.job_id in new]
        if self.enabled:
            for job_id in new:
                self.counts[job_id] = {}
            for t in made:
                counts = self.counts[t.job_id]
                counts[t.state] = counts.get(t.state, 0) + 1
        self._keep(made)
        return new

    def save_tasks(self, tasks: list[TaskRow]) -> None:
        self.store.save_tasks(tasks)
        for t in tasks:  # one by one: a task given twice moves from the first to the second
            self._count(t, self.rows.get((t.job_id, t.instance)))
            self._keep([t])

    def _count(self, t: TaskRow, kept: TaskRow | None) -> None:
        """`t` was written over the row remembered as `kept` (None: not remembered)."""
        counts = self.counts.get(t.job_id)
        if counts is None:
            return
        if kept is None:
            del self.counts[t.job_id]  # from a state not known here: the store counts again
            return
        old, new = kept.state, t.state
        if old != new:
            counts[old] -= 1  # there: the remembered row was counted
            counts[new] = counts.get(new, 0) + 1

    def task_state_counts(self, job_ids: list[str]) -> dict[str, dict[str, int]]:
        if not self.enabled:
            return self.store.task_state_counts(job_ids)
        missing = [j for j in job_ids if j not in self.counts]
        if missing:
            if len(self.counts) + len(missing) > COUNTS_LIMIT:
                self.counts.clear()  # ended jobs wait here for their retention: start again
                missing = list(job_ids)
            for job_id, of_job in self.store.task_state_counts(missing).items():
                self.counts[job_id] = dict(of_job)
        return {j: {state: n for state, n in self.counts[j].items() if n} for j in job_ids}

    def update_task_runs(self, tasks: list[TaskRow], same_run: bool = False) -> None:
        rows = self.rows
        if same_run and rows:
            # Those whose remembered row (the store's) has the host they have now leave host_id,
            # and its index, alone.
            stayed: list[TaskRow] = []
            moved: list[TaskRow] = []
            for t in tasks:
                kept = rows.get((t.job_id, t.instance))
                (stayed if kept is not None and kept.host_id == t.host_id else moved).append(t)
            self.store.update_task_runs(stayed, same_run=True, same_host=True)
            self.store.update_task_runs(moved, same_run=True)
        else:
            self.store.update_task_runs(tasks, same_run=same_run)
        # Only the columns written change, and only on a row remembered whole before.
        copy = _COPY_COLS[moved_cols(same_run)]
        for t in tasks:
            key = (t.job_id, t.instance)
            kept = rows.get(key)
            self._count(t, kept)
            if kept is None:
                continue
            if t.state in TASK_TERMINAL:
                del rows[key]
                continue
            copy(kept, t)

    def delete_job(self, job_id: str, at_ms: int) -> bool:
        deleted = self.store.delete_job(job_id, at_ms)
        self.counts.pop(job_id, None)
        for key in [k for k in self.rows if k[0] == job_id]:
            del self.rows[key]
        return deleted
