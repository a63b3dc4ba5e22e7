"""RemoteDriver: the host manager's side of host agents (separate processes, see stages/agent).

Launches and kills go out as AgentCommand records on the agent-commands topic (key = host id);
what the agents report comes back through the host manager's own input (AgentReport records on
the host shard's partition of the placements topic), which hands each report to receive(). Runs
on agents outlive the host manager: a new owner of the shard adopts them and waits for their
agents' reports instead of calling them lost.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Sequence

from peloton.host.driver import AgentDriver, LaunchRequest, TaskUpdate, now_ms
from peloton.model.mesos import MESOS_TERMINAL, MesosState, Reason

log = logging.getLogger("peloton.launch")

# Mesos' reason for the runs of an agent that stopped reporting.


class RemoteDriver(AgentDriver):
    def __init__(self, send: Callable[[str, dict], None], clock: Callable[[], float] = time.monotonic,
                 commands_end: Callable[[str], int | None] | None = None):
        self._send = send  # (host id, AgentCommand record) -> None
        self._clock = clock
        # (host id) -> the end (high-water mark) of the host's agent-commands partition now, or
        # None when the broker does not say. A launch written and committed before it was asked
        # lies before that end, so an agent that has read up to it has read the launch.
        self._commands_end = commands_end
        self.runs: dict[str, tuple[str, float]] = {}  # task id -> (host id, when its launch was sent)
        # Runs past their grace that their agent has not read yet: task id -> the end its agent
        # must read to before the run counts as lost.
        self.unread: dict[str, int] = {}
        self.unconfirmed: set[str] = set()  # adopted runs no report of their agent has listed yet
        # Ends of runs given up already (their host was DOWN, or they were unknown and killed):
        # not updates of a run any more, but still the news of how that run ended on its host.
        self.late: list[TaskUpdate] = []
        self._updates: list[TaskUpdate] = []

    # -- the driver contract --------------------------------------------------------------------
    def launch(self, requests: Sequence[LaunchRequest], again: bool = False) -> None:
        """Send launches; `again`: also for adopted runs whose launch may never have gone out."""
        by_host: dict[str, list[dict]] = {}
        now = self._clock()
        for r in requests:
            if r.task_id in self.runs and not (again and r.task_id in self.unconfirmed):
                continue
            self.unconfirmed.discard(r.task_id)
            self.runs[r.task_id] = (r.host_id, now)
            by_host.setdefault(r.host_id, []).append({
                "task_id": r.task_id, "job_id": r.job_id, "instance": r.instance, "run_id": r.run_id,
                "command": r.command, "shell": r.shell, "arguments": list(r.arguments),
                "environment": dict(r.environment), "resources": r.resources.to_record(),
                "kill_grace_seconds": r.kill_grace_seconds, "user": r.user, "image": r.image,
                "health_check_json": r.health_check,
                "volume": {"volume_id": r.volume[0], "container_path": r.volume[1], "size_mb": 0,
                           "host_id": r.host_id} if r.volume else None, "revocable": r.revocable})
        for host_id, launches in by_host.items():
            self._send(host_id, _command(host_id, launches=launches))

    def kill(self, task_ids: Sequence[str]) -> None:
        by_host: dict[str, list[str]] = {}
        for task_id in task_ids:
            if task_id in self.runs:
                by_host.setdefault(self.runs[task_id][0], []).append(task_id)
        for host_id, kills in by_host.items():
            self.kill_on(host_id, kills)

    def poll(self) -> list[TaskUpdate]:
        """The updates since the last poll; the runs they end were dropped as they were taken."""
        updates, self._updates = self._updates, []
        return updates

    def active(self) -> set[str]:
        return set(self.runs)

    def close(self) -> None:
        """Nothing to stop: the agents' runs go on, and the next owner of the shard adopts them."""

    # -- agents ---------------------------------------------------------------------------------
    def kill_on(self, host_id: str, task_ids: Sequence[str]) -> None:
        """Kill runs on a host whether this host manager knows them or not (reconciliation)."""
        self._send(host_id, _command(host_id, kills=list(task_ids)))

    def delete_volumes(self, host_id: str, volume_ids: Sequence[str]) -> None:
        self._send(host_id, _command(host_id, delete_volumes=list(volume_ids)))

    def adopt(self, task_id: str, host_id: str) -> None:
        """A run an earlier owner of the shard launched: ours now (its agent still runs it)."""
        if task_id not in self.runs:
            self.runs[task_id] = (host_id, self._clock())
            self.unconfirmed.add(task_id)

    def _drop(self, task_id: str) -> None:
        """The run is no longer this host manager's to watch (ended, lost or forgotten)."""
        self.runs.pop(task_id, None)
        self.unconfirmed.discard(task_id)
        self.unread.pop(task_id, None)

    def on_host(self, host_id: str) -> list[str]:
        return [t for t, (h, _) in self.runs.items() if h == host_id]

    def forget(self, host_id: str) -> list[str]:
        """Drop the host's runs (another host manager owns its shard now); returns their ids."""
        gone = self.on_host(host_id)
        for task_id in gone:
            self._drop(task_id)
        return gone

    def receive(self, report: dict, grace_s: float) -> list[str]:
        """Take an agent's report: its status updates, and what it runs now compared with what we
        think it runs. Returns the task ids it runs that we do not know (to be killed). Runs we
        sent it more than `grace_s` ago that it neither runs nor reported ended are lost, once the
        agent says it has read past their launch (an agent that does not say: at once).

        Why the agent's word: a launch its agent has not read yet is not lost but late (its command
        reader stalled, its host was cut off from the broker). Given up then and run again, it
        would still start when the agent reads it, and the task would run twice."""
        host_id = report["host_id"]
        for u in report["updates"]:
            update = TaskUpdate(u["task_id"], host_id, u["state"], u["timestamp_ms"], u["reason"], u["message"],
                                u["exit_code"], u["signal"], u.get("health", ""))
            if u["task_id"] in self.runs:
                self._updates.append(update)
                if u["state"] in MESOS_TERMINAL:
                    # Forgotten now, not at the next poll: a later report of the same host in the
                    # same batch (a host manager behind reads several) no longer lists the run,
                    # which must not make it lost after it ended.
                    self._drop(u["task_id"])
            elif u["state"] in MESOS_TERMINAL:
                self.late.append(update)
        running = set(report["running"])
        self.unconfirmed -= running
        now = self._clock()
        read = report.get("commands_read")
        end: int | None = None  # asked at most once per report
        waiting = 0
        for task_id, (h, sent) in list(self.runs.items()):
            if h != host_id or task_id in running or now - sent <= grace_s:
                continue
            if read is not None and self._commands_end is not None:
                if task_id not in self.unread:
                    end = self._commands_end(host_id) if end is None else end
                    if end is None:
                        continue  # the broker did not say: asked again with the next report
                    self.unread[task_id] = end
                if read < self.unread[task_id]:
                    waiting += 1
                    continue  # not read yet: it starts when the agent reads it
            self._drop(task_id)
            self._updates.append(TaskUpdate(task_id, host_id, MesosState.TASK_LOST, now_ms(), Reason.RECONCILIATION,
                                            "its agent does not run it"))
        if waiting:
            log.warning("agent of %s has not read %d launches sent more than %gs ago (it has read its commands "
                        "to offset %d): they wait for it, and are not run again elsewhere", host_id, waiting,
                        grace_s, read)
        return sorted(t for t in running if self.runs.get(t, (None,))[0] != host_id)

    def host_lost(self, host_id: str, message: str) -> None:
        """The host's agent stopped reporting: every run there is lost."""
        for task_id in self.on_host(host_id):
            self._drop(task_id)
            self._updates.append(TaskUpdate(task_id, host_id, MesosState.TASK_LOST, now_ms(), Reason.AGENT_DISCONNECTED,
                                            message))


def _command(host_id: str, launches: list[dict] | None = None, kills: list[str] | None = None,
             delete_volumes: list[str] | None = None) -> dict:
    return {"command_id": uuid.uuid4().hex, "host_id": host_id, "launches": launches or [], "kills": kills or [],
            "delete_volumes": delete_volumes or [], "sent_ms": now_ms()}
