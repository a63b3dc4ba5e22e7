"""What an agent remembers of its runs across a restart: runs.json (task id -> its launch and
host, while it runs, and whether it ended or was sent a kill), the endings journal (how each run
that ended did, until a report of that is acknowledged: stages/agent/endings.py), and the ids of
the runs that ended lately, so that a launch read again starts nothing."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

from peloton.host.driver import TaskUpdate
from stages.agent.endings import EndingsJournal
from stages.agent.state import StateFiles

ENDED_KEPT = 100_000  # ended runs remembered (ids only), for launches read again


class RunBook:
    def __init__(self, files: StateFiles, name: str) -> None:
        self.files = files
        self.name = name  # the host of a run that names none
        self.runs: dict[str, dict] = files.runs()
        self.journal = EndingsJournal(files.path / "endings.jsonl")
        # task id -> how its run ended, until a report of that is acknowledged (kept in the journal)
        self.endings: dict[str, TaskUpdate] = self.journal.load(self.runs)
        self.forgotten = False  # acknowledged endings forgotten in memory, not yet on disk
        # Runs that ended lately: a launch of one read again (a host manager that took over sends
        # the launches its predecessor may not have sent) starts nothing.
        self.ended: OrderedDict[str, None] = OrderedDict()

    def host_of(self, task_id: str) -> str:
        run = self.runs.get(task_id)
        return run.get("host", self.name) if isinstance(run, dict) else self.name

    def save(self) -> None:
        self.files.save_runs(self.runs)

    def forget(self, task_id: str) -> None:
        """A run reported lost: neither it nor its ending is kept."""
        self.runs.pop(task_id, None)
        self.endings.pop(task_id, None)
        self.save()

    def mark_killed(self, task_ids: Iterable[str]) -> None:
        """Kept, so that a next agent reports a run ending after this kill as killed."""
        marked = [t for t in task_ids if t in self.runs and not self.runs[t].get("kill_sent")]
        for task_id in marked:
            self.runs[task_id]["kill_sent"] = True
        if marked:
            self.save()

    def keep_endings(self, pending: list[TaskUpdate]) -> None:
        """Runs that ended keep their ending in the journal until a report of it is acknowledged:
        an agent restarted in between reports it again. Written once per step, before the report
        that carries them."""
        fresh = [u for u in pending if u.terminal and u.task_id in self.runs and u.task_id not in self.endings]
        for u in fresh:
            self.runs[u.task_id]["ended"] = True  # reported below, forgotten once delivered
            self.endings[u.task_id] = u
        self.journal.append(fresh)

    def delivered(self, updates: list[TaskUpdate]) -> None:
        """A report of these updates was acknowledged: the runs it reported ended are forgotten,
        in memory now, on disk at the end of the step (save_forgotten)."""
        done = [u.task_id for u in updates if u.terminal and self.runs.get(u.task_id, {}).get("ended")]
        if done:
            for task_id in done:
                del self.runs[task_id]
                self.endings.pop(task_id, None)
                self.ended[task_id] = None
            while len(self.ended) > ENDED_KEPT:
                self.ended.popitem(last=False)
            self.forgotten = True  # saved at the end of the step, once for all the step's rounds

    def save_forgotten(self) -> None:
        """Runs whose endings were acknowledged leave runs.json, then the journal (a line of a run
        no longer there is ignored). An agent killed before this reports those endings again:
        the host manager ignores an ending of a run it no longer holds."""
        if self.forgotten:
            self.forgotten = False
            self.save()
            self.journal.rewrite(list(self.endings.values()))

    def keep_for_next(self, handed: set[str]) -> None:
        """At a stop: endings not acknowledged by now are kept for the next agent to report, and
        the runs handed over for it to adopt; every other run was reported lost."""
        self.runs = {task_id: run for task_id, run in self.runs.items()
                     if task_id in self.endings or task_id in handed}
        self.save()
        self.journal.rewrite(list(self.endings.values()))
        self.journal.close()
