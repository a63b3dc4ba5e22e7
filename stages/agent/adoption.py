"""The runs a previous agent process on this state directory started, held again by this one.

Those it saw end are reported again as they ended (the report of it may not have been
delivered), alive ones are adopted (their process groups, verified by pid file) and watched
until they end, and ones that ended while no agent watched are reported as their executors saw
them end (peloton/host/executor.py), lost where none could say.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from peloton.host.cgroups import Hierarchy, agent_parent_leaf
from peloton.host.driver import AgentDriver, TaskUpdate, now_ms
from peloton.host.orphans import kill_orphan, surviving_groups
from peloton.model.mesos import MesosState, Reason
from stages.agent.commands import checked_request
from stages.agent.runbook import RunBook

log = logging.getLogger("peloton.agent")



def former_cgroups(isolation: Hierarchy | None, name: str, runs: dict[str, dict]) -> tuple[Hierarchy | None, set[str]]:
    """The cgroups named by the agent's name alone (not its state directory, which names them
    now), and those of its runs still there: each goes as its run ends, then the parent."""
    former = isolation.beside(agent_parent_leaf(name)) if isolation else None
    return former, (set(former.leftovers(set())) & set(runs) if former else set())


class Adoption:
    """`report` takes each update to send."""

    def __init__(self, driver: AgentDriver, sandbox_root: Path, former: tuple[Hierarchy | None, set[str]],
                 book: RunBook, report: Callable[[TaskUpdate], None]) -> None:
        self.driver = driver
        self.sandbox_root = sandbox_root
        self.former, self.former_runs = former
        self.book = book
        self.report = report
        self.adopted: dict[str, int] = {}  # task id -> process group, of runs started before our restart

    def adopt(self) -> None:
        """Every run in runs.json: its ending reported again, adopted, or reported ended."""
        runs, endings = self.book.runs, self.book.endings
        alive = surviving_groups(self.sandbox_root, list(runs))
        for task_id in list(runs):
            ending = endings.get(task_id)
            if ending is not None:
                runs[task_id]["ended"] = True  # forgotten once this report is delivered
                self.report(ending)
                log.info("run %s ended before the agent restarted (%s): reported again", task_id, ending.state)
                continue
            pgid = alive.get(task_id)
            if pgid is not None:
                self.adopted[task_id] = pgid
                log.info("adopted run %s (process group %d)", task_id, pgid)
            else:
                self.orphan_ended(task_id, "while its agent was away")
        # Runs handed over by a restart: this agent's lease fences them now, not their executors;
        # their GPUs stay theirs.
        self.driver.take_over(list(self.adopted))
        self.driver.hold_gpus({t: (self.book.host_of(t), tuple(map(str, runs[t].get("gpus") or ())))
                               for t in self.adopted})
        checked = (checked_request(t, runs.get(t, {}), self.book.host_of(t)) for t in self.adopted)
        self.driver.watch_adopted([r for r in checked if r is not None])
        self.clear_leftovers()

    def orphan_ended(self, task_id: str, when: str) -> None:
        """A run no agent of this process waited for has ended: reported as its executor saw it end
        (kept in the journal like any ending, until acknowledged), else lost."""
        ending = self.driver.orphan_ending(task_id, self.book.host_of(task_id))
        if ending is None:
            self._lost(task_id, f"it ended {when}, and left no word of how (its executor killed too)")
            return
        if self.book.runs.get(task_id, {}).get("kill_sent"):  # as the driver maps an end after its own kill
            ending = replace(ending, state=MesosState.TASK_KILLED, reason="",
                             message=f"killed by its agent before the agent restarted ({ending.message or 'exit 0'})")
        log.info("run %s ended %s: %s%s", task_id, when, ending.state,
                 f" ({ending.message})" if ending.message else "")
        self.report(ending)

    def watch(self) -> None:
        """The adopted runs that ended since the last look, reported."""
        if not self.adopted:
            return
        alive = surviving_groups(self.sandbox_root, list(self.adopted))
        ended = [t for t in self.adopted if t not in alive]
        self.driver.let_go(ended)
        for task_id in ended:
            del self.adopted[task_id]
            self.orphan_ended(task_id, "after its agent restarted")
        if ended:
            self.clear_leftovers()

    def _lost(self, task_id: str, message: str) -> None:
        log.warning("run %s lost: %s", task_id, message)
        self.report(TaskUpdate(task_id, self.book.host_of(task_id), MesosState.TASK_LOST, now_ms(),
                               Reason.AGENT_RESTARTED, message))
        self.book.forget(task_id)

    def gave_up(self, task_id: str) -> None:
        """The driver reported an adopted run ended (its health check gave up on it, and killed it)."""
        if self.adopted.pop(task_id, None) is not None:
            self.clear_leftovers()

    def kill(self, task_id: str, host_id: str) -> None:
        """A kill command: an adopted run is killed at once (its executor gone with the agent that
        started it), and reported killed."""
        if self.adopted.pop(task_id, None) is None:
            return
        self.driver.let_go([task_id])
        kill_orphan(self.sandbox_root, task_id)
        self.report(TaskUpdate(task_id, host_id, MesosState.TASK_KILLED, now_ms(),
                               message="killed (a run adopted after the agent restarted)"))
        self.clear_leftovers()

    def fence(self) -> None:
        """The lease ran out: every adopted run is killed with no grace, and reported lost."""
        self.driver.let_go(list(self.adopted))
        for task_id, _pgid in list(self.adopted.items()):
            kill_orphan(self.sandbox_root, task_id, grace_seconds=0)
            del self.adopted[task_id]
            self.report(TaskUpdate(task_id, self.book.host_of(task_id), MesosState.TASK_LOST, now_ms(),
                                   Reason.AGENT_FENCED, "killed by its agent, whose lease had run out"))
        self.clear_leftovers()

    def stop(self, handed: set[str]) -> None:
        """The agent stops: adopted runs not handed over to the next agent are killed (with their
        grace) and reported lost."""
        for task_id in [t for t in self.adopted if t not in handed]:
            kill_orphan(self.sandbox_root, task_id)
            self.report(TaskUpdate(task_id, self.book.host_of(task_id), MesosState.TASK_LOST, now_ms(),
                                   Reason.AGENT_SHUTDOWN, "its agent was stopped"))
        self.adopted = {}

    def clear_leftovers(self) -> None:
        """What runs that ended under no agent left here (cgroups, containers) goes, the runs
        adopted kept."""
        cleared = self.driver.clear_leftovers(set(self.adopted))
        if self.former is not None:
            for task_id in sorted(self.former_runs - set(self.adopted)):
                self.former.task(task_id).destroy(wait_s=0.2)
                self.former_runs.discard(task_id)
                cleared.append(task_id)
            if not self.former_runs:
                # Removed only if empty; another stack's agent that names its cgroups so, by this
                # name, would have to make it again (see docs/concepts/hosts-and-agents.md).
                self.former.close()
                self.former = None
        if cleared:
            log.info("removed the cgroups of %d runs no agent holds any more", len(cleared))
