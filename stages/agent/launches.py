"""What an agent does with its hosts' launches and kills: starts each launch through the driver
(its run recorded first), holds one read as the lease runs out until a report renews it
(stages/agent/lease.py), and answers one it will never start, so that one read again stays
unstarted."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

from peloton import metrics
from peloton.host.driver import AgentDriver, TaskUpdate, now_ms
from peloton.host.sandboxes import sandbox_path
from peloton.model.mesos import MesosState, Reason
from stages.agent.adoption import Adoption
from stages.agent.commands import launch_request, run_entry
from stages.agent.lease import Lease
from stages.agent.runbook import RunBook

log = logging.getLogger("peloton.agent")


class Launches:
    """`report` takes each update to send."""

    def __init__(self, driver: AgentDriver, sandbox_root: Path, book: RunBook, lease: Lease, adoption: Adoption,
                 report: Callable[[TaskUpdate], None]) -> None:
        self.driver = driver
        self.sandbox_root = sandbox_root
        self.book = book
        self.lease = lease
        self.adoption = adoption
        self.report = report
        metrics.at_zero(metrics.AGENT_HELD_LAUNCHES, ("started",), ("lost",), ("killed",), ("stopped",))

    def command(self, partition: int, offset: int, cmd: dict, killed: set[str]) -> None:
        """One AgentCommand, read at this offset; `killed`: the runs its batch kills."""
        host_id = cmd["host_id"]
        fresh = []
        now = time.monotonic()
        for launch in cmd["launches"]:
            task_id = launch["task_id"]
            try:
                started = task_id in self.book.runs or sandbox_path(self.sandbox_root, task_id).exists()
            except ValueError as exc:  # not a name a sandbox can have
                log.warning("launch of %r skipped: %s", task_id[:200], exc)
                continue
            if started or task_id in self.book.ended or task_id in self.lease.held:
                continue  # a command read again (after a restart or a takeover): it was taken already
            if task_id in killed:
                self.never_start(task_id, host_id, MesosState.TASK_KILLED,
                                 "killed before it started (its kill came with its launch)")
                metrics.AGENT_COMMANDS.labels("launch_killed").inc()
                continue
            if self.lease.admits(now):
                fresh.append((host_id, launch))
            elif self.lease.may_hold(now):
                # Started now, it would likely be killed by the fence a moment later and run again
                # elsewhere: it waits for a report to renew the lease (start_held).
                self.lease.hold(task_id, host_id, launch, partition, offset)
            else:  # the host manager may already run it elsewhere
                self.never_start(task_id, host_id, MesosState.TASK_LOST, "not started: its agent's lease had run out",
                                 Reason.AGENT_FENCED)
        if fresh:
            self.launch(fresh)
        kills = [t for t in cmd["kills"] if not self._drop_held(t)]
        if kills:
            self._kill(host_id, kills)
        if cmd.get("delete_volumes"):  # its host manager deleted them: no run of theirs is here
            self.driver.delete_volumes(host_id, cmd["delete_volumes"])

    def _kill(self, host_id: str, kills: list[str]) -> None:
        self.driver.kill(kills)
        metrics.AGENT_COMMANDS.labels("kill").inc(len(kills))
        self.book.mark_killed(kills)
        for task_id in kills:
            self.adoption.kill(task_id, host_id)

    def launch(self, launches: list[tuple[str, dict]]) -> None:
        """Starts these launches (host id, AgentLaunch record), their runs saved first."""
        fresh = []
        for host_id, launch in launches:
            self.book.runs[launch["task_id"]] = run_entry(host_id, launch, time.time())
            fresh.append(launch_request(host_id, launch))
        self.book.save()  # before they start: a crash now still finds them
        self.driver.launch(fresh)
        held = {r.task_id: list(self.driver.gpus_of(r.task_id)) for r in fresh if r.resources.gpu > 0}
        for task_id, gpus in held.items():  # a next agent holds them again while the run goes on
            self.book.runs[task_id]["gpus"] = gpus
        if any(held.values()):
            self.book.save()
        metrics.AGENT_COMMANDS.labels("launch").inc(len(fresh))

    def start_held(self, now: float) -> bool:
        """Held launches start once a report has renewed the lease in time (Lease.renewed moves
        their deadline), and are answered lost once their deadline passes without one: the host
        manager may then have given the host up and their runs with it. True when any went."""
        late = self.lease.overdue(now)
        for task_id, held in late:
            self.never_start(task_id, held.host_id, MesosState.TASK_LOST,
                             "not started: its agent read the launch as its "
                             f"lease ran out and no report got through within {self.lease.hold_s:g}s after",
                             Reason.AGENT_FENCED)
        if late:
            log.warning("%d launches held for a report were not started: none got through in time; they are "
                        "answered lost, and run again", len(late))
            metrics.AGENT_HELD_LAUNCHES.labels("lost").inc(len(late))
        if self.lease.held and self.lease.admits(now):
            log.info("a report renewed the lease: the %d launches held for it start", len(self.lease.held))
            metrics.AGENT_HELD_LAUNCHES.labels("started").inc(len(self.lease.held))
            self.launch([(h.host_id, h.launch) for h in self.lease.held.values()])
            self.lease.release()
            return True
        return bool(late)

    def never_start(self, task_id: str, host_id: str, state: str, message: str, reason: str = "") -> None:
        """A launch this agent will never start is answered so, and one read again stays unstarted."""
        self.report(TaskUpdate(task_id, host_id, state, now_ms(), reason, message))
        self.book.ended[task_id] = None

    def _drop_held(self, task_id: str) -> bool:
        """A kill of a launch still held: it never starts. False when none is held."""
        held = self.lease.drop(task_id)
        if held is None:
            return False
        self.never_start(task_id, held.host_id, MesosState.TASK_KILLED,
                         "killed before it started (its launch waited for the agent's lease)")
        metrics.AGENT_HELD_LAUNCHES.labels("killed").inc()
        return True

    def answer_held(self, handing_over: bool, save_offsets: Callable[[], None]) -> None:
        """At a stop, the launches held for a report: left for the next agent to read again after
        a restart (the offsets saved before them), else answered lost."""
        if self.lease.held and handing_over:
            save_offsets()  # before the held launches: the next agent reads them again
            self.lease.release()
        held = self.lease.release()
        for task_id, launch in held.items():
            self.never_start(task_id, launch.host_id, MesosState.TASK_LOST, "not started: its agent was stopped",
                             Reason.AGENT_SHUTDOWN)
        if held:
            metrics.AGENT_HELD_LAUNCHES.labels("stopped").inc(len(held))
            save_offsets()
