"""The host agent: one process per host, the only thing that runs tasks on it.

It reads its host's commands (launches and kills) from the agent-commands topic, runs each task
as a process group in its sandbox (the local driver), and reports to the host manager through an
AgentReport on its host shard's partition of the agent-reports topic, signed with its host's key
(peloton/auth/host_keys.py): its resources and labels, every run it has now, and the Mesos status
updates since its last report. Reports are sent at least every `agent_heartbeat_s`, and at once
when something changed. The host manager marks a host whose reports stop DOWN and its runs LOST.

Fencing: the agent's runs live by a lease that each report the broker acknowledges extends. An
agent cut off from the broker for its lease kills its runs (the host manager, which waits longer,
will run them elsewhere) and starts no launch until a report gets through (docs/concepts/delivery-and-fencing.md). A
launch read when the lease is about to run out, or just after, waits a moment for that report
instead of starting only to be killed, or being answered lost, and so running twice.

Tasks outlive the host manager (they are this process's children, not the launch stage's), and
they outlive this process too: its state directory keeps the offset of the last command handled
and the runs it started, with the ending of each it saw end until a report of that is delivered,
so that after a restart it reports those endings again, adopts the runs still alive (their
process groups, verified by pid file), and reports the others, and the adopted ones as they end,
as their executors saw them end (peloton/host/executor.py). SIGTERM ends the runs with
the agent; SIGHUP (a restart) leaves them to the next agent, each executor told to end its run
when the lease runs out unless an agent has taken it over by then.
"""

from __future__ import annotations

import logging
import signal
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from peloton import metrics
from peloton.config import Settings
from peloton.host.containers import RUNTIME_LABEL
from peloton.host.driver import TaskUpdate, now_ms
from peloton.host.lease_answer import ASK_TIMEOUT_S
from peloton.model.mesos import MesosState, Reason
from peloton.private import open_home, private_dir
from peloton.runtime.clients import kafka_access
from peloton.runtime.heap import settle_heap
from peloton.runtime.loop import STATUS_EVERY_S
from peloton.runtime.stall import EndsAside, ReaderWatch
from peloton.runtime.stuck import StuckWatch
from peloton.serde import registry
from peloton.topics import Catalogue, partition_for
from stages.agent.adoption import Adoption, former_cgroups
from stages.agent.commands import CommandMessage, addressed, opened
from stages.agent.host import describe, host_runtime, isolation_for
from stages.agent.launches import Launches
from stages.agent.lease import HOLD_SHARE, Lease
from stages.agent.lease import Held as _Held
from stages.agent.outage import ask_ahead, decide_ahead, reaching
from stages.agent.peers import Peers
from stages.agent.reading import start_position
from stages.agent.reports import report_keys, report_record, running_by_host, updates_by_host, usage_by_host
from stages.agent.rounds import Round as _Round
from stages.agent.rounds import Rounds
from stages.agent.runbook import ENDED_KEPT, RunBook
from stages.agent.sending import REPORT_ANSWER_GRACE_S, ReportSender
from stages.agent.spec import HOST_ID, AgentSpec, gpu_devices, parse_port_ranges, parse_resources
from stages.agent.state import StateFiles, agent_state_dir

if TYPE_CHECKING:
    from collections.abc import Iterator

    from confluent_kafka import Consumer, Producer

# Names pelotonctl and the tests import from here.
__all__ = ["ENDED_KEPT", "HOLD_SHARE", "HOST_ID",
           "REPORT_ANSWER_GRACE_S", "AgentSpec", "HostAgent", "_Held", "_Round", "agent_state_dir", "gpu_devices",
           "isolation_for", "parse_port_ranges", "parse_resources", "report_keys", "run_agent"]

log = logging.getLogger("peloton.agent")


def _through(part: str, name: str) -> property:
    """An attribute one of the agent's parts keeps, read and set as the agent's own."""
    return property(lambda self: getattr(getattr(self, part), name),
                    lambda self, value: setattr(getattr(self, part), name, value))


class HostAgent:
    """The agent of one host, or (simulate=True) of many simulated hosts in one process, which
    speak the same protocol: benchmarks run thousands of hosts without thousands of processes.

    It reads commands and its driver's updates, decides through its parts (the lease, the report
    rounds, the run book, the adoption of runs a previous agent started, the launches), writes its
    state directory through them, and sends AgentReports."""

    runs = _through("book", "runs")
    endings = _through("book", "endings")
    ended = _through("book", "ended")
    journal = _through("book", "journal")
    lease_until = _through("lease", "until")
    fenced_at = _through("lease", "fenced_at")
    held = _through("lease", "held")
    start_margin = _through("lease", "start_margin")
    adopted = _through("adoption", "adopted")
    producer = _through("sender", "producer")
    producer_renewals = _through("sender", "renewals")
    _refused_said_at = _through("sender", "_refused_said_at")
    _rounds = _through("rounds", "open")
    failed_rounds = _through("rounds", "failed")
    delivered_at = _through("rounds", "delivered_at")
    ever_delivered = _through("rounds", "ever_delivered")

    def __init__(self, settings: Settings, specs: list[AgentSpec], simulate: bool = False, name: str | None = None,
                 gpus: tuple[str, ...] = ()) -> None:
        self.settings = settings
        self.name = name or specs[0].name
        self.catalogue = Catalogue(settings.topic_prefix)
        self.serde = registry()
        self.agent_id = uuid.uuid4().hex[:12]
        self.state_dir = agent_state_dir(settings.home, self.name)
        self.files = StateFiles(self.state_dir)
        # Its runs' launches (their environments) and runc's state: the agent's alone; the home
        # above them lets runs through to their sandboxes and lists nothing.
        open_home(settings.home)
        private_dir(self.state_dir.parent)
        private_dir(self.state_dir)
        self.sandbox_root = Path(settings.home) / "sandboxes"
        self.host = host_runtime(settings, self.name, self.state_dir, self.sandbox_root, simulate, gpus)
        self.isolation, self.runtime, self.driver = self.host.isolation, self.host.runtime, self.host.driver
        if self.host.label:  # lets placement send it tasks that name an image
            specs = [replace(spec, labels={**spec.labels, RUNTIME_LABEL: self.host.label}) for spec in specs]
        self.hosts = {spec.name: spec for spec in specs}
        self.gpus = gpus
        self.book = RunBook(self.files, self.name)
        self.adoption = Adoption(self.driver, self.sandbox_root, former_cgroups(self.isolation, self.name, self.runs),
                                 self.book, self._to_report)
        self.pending: list[TaskUpdate] = []  # not yet delivered to the broker
        self._wire(settings, simulate)
        self._running = True
        self._handing_over = False  # stopping for a restart: the runs go on (restart())
        self.handed: set[str] = set()  # the runs handed over to the next agent, as this one stops
        self._next_report = 0.0
        self.fresh_since_ms = 0
        self.lease = Lease.restored(settings.agent_lease(), settings.lease_margin(), self.files.lease(),
                                    time.monotonic(), time.time())
        self.driver.extend_lease(self.lease.until)  # what its runs' executors hold
        self.launches = Launches(self.driver, self.sandbox_root, self.book, self.lease, self.adoption,
                                 self._to_report)
        self.fencing: set[str] = set()  # runs killed for it, whose ends are reported as lost
        self._outage_said = ""  # what the peers said at the lease's end, for the fence's log line
        self.executors_fenced = 0  # runs their executors ended as the lease ran out, for that line too
        self._status_at, self._steps, self._commands_read = time.monotonic(), 0, 0

    def _wire(self, settings: Settings, simulate: bool) -> None:
        """Its topics, Kafka clients and the server of its runs' output."""
        self.commands = self.catalogue["agent-commands"]
        self.reports = self.catalogue["agent-reports"]
        self.report_partition = {h: partition_for(h, self.reports.partitions) for h in self.hosts}
        self.report_keys = report_keys(settings, list(self.hosts))
        self.command_partition = {h: partition_for(h, self.commands.partitions) for h in self.hosts}
        self.reader = ReaderWatch(self.commands.name, sorted(set(self.command_partition.values())),
                                  EndsAside(kafka_access(settings)))
        self.offsets: dict[int, int | None] = {}  # partition -> the next command to handle (start() reads it)
        # A report is worth nothing once the lease it would have renewed ran out, so none waits
        # longer (the stages' producers wait for ever): a report that timed out fails its round,
        # whose updates go again in the next. Never waiting for ever also lets an idempotent
        # producer that lost its broker-side state (a whole cluster restarted) start afresh
        # instead of holding its queue, and the agent's reports, back.
        self.report_timeout_s = max(1.0, settings.agent_lease())
        self.rounds = Rounds(time.monotonic())  # reports not yet acknowledged, per heartbeat round
        self.sender = ReportSender(self.reports.name, self.report_partition, self.report_keys, self.report_timeout_s,
                                   self.rounds, lambda: self._new_producer(), lambda r, err: self._delivered(r, err))
        self.started_at = self.rounds.delivered_at = time.monotonic()  # the producer made: its time begins
        self.consumer: Any = self._new_consumer()  # replaced by the reader watch when it stalls
        # The sandboxes' files, served against the API's grant for each run: a user reads a run's
        # output through the API, which checks who may read the job, from wherever the run was.
        # The same server tells peers and host managers where the lease stands (GET /v1/lease), and
        # the peers, known from host-state, tell a control-plane outage from this host cut off alone.
        self.logs = None
        self.peers: Peers | None = None
        if not simulate:
            from peloton.auth.grants import public_key
            from stages.agent.logs import LogServer

            key = public_key(settings.agent_logs_public_key) if settings.agent_logs_public_key else None
            self.logs = LogServer(self.sandbox_root, key, set(self.hosts), settings.agent_logs_host,
                                  settings.agent_logs_port, settings.sandbox_keep_s, self._lease_answer).start()
            if settings.agent_outage_limit_s > 0:
                self.peers = Peers(lambda: host_view(settings, self.catalogue), set(self.hosts), self.logs.url,
                                   settings.agent_heartbeat_s).start()

    def _new_consumer(self) -> Consumer:
        from confluent_kafka import Consumer

        from peloton.runtime import CONSUMER_RECOVERY

        return Consumer({
            **kafka_access(self.settings), "group.id": f"{self.catalogue.prefix}peloton.agent.{self.name}",
            "enable.auto.commit": False, "auto.offset.reset": "latest", "fetch.wait.max.ms": 100,
            "allow.auto.create.topics": False, **CONSUMER_RECOVERY,
        })

    def _new_producer(self) -> Producer:
        from confluent_kafka import Producer

        from peloton.runtime import producer_config

        return Producer({**producer_config(self.settings), "message.timeout.ms": int(self.report_timeout_s * 1000)})

    # -- start ----------------------------------------------------------------------------------
    def start(self) -> None:
        from confluent_kafka import OFFSET_END

        partitions = self.reader.partitions
        saved = self.files.offsets()
        assignment = []
        for partition in partitions:
            at, fresh_since_ms = start_position(self.consumer, self.commands.name, partition, saved.get(str(partition)))
            if fresh_since_ms is not None:
                self.fresh_since_ms = fresh_since_ms
            assignment.append(at)
        self.offsets = {p: saved.get(str(p)) for p in partitions}
        self.consumer.assign(assignment)
        # Where a reader that starts at the end stands until it fetches: one that never fetches
        # is then judged by the first command after its start, not only by a later one.
        self.reader.begin([tp.partition for tp in assignment if tp.offset == OFFSET_END])
        self._adopt()
        first = next(iter(self.hosts.values()))
        log.info("agent %s (%s) up: %d host(s) like %s, %s, labels %s; commands from %s%s", self.name, self.agent_id,
                 len(self.hosts), first.name, first.capacity, first.labels, self.commands.name, partitions)
        for line in describe(self.host, self.gpus, self.logs.url if self.logs is not None else None):
            log.info("%s", line)

    def _adopt(self) -> None:
        """Runs the previous agent process started (stages/agent/adoption.py)."""
        self.adoption.adopt()

    def _watch_adopted(self) -> None:
        self.adoption.watch()

    def _to_report(self, u: TaskUpdate) -> None:
        self.pending.append(u)

    # -- the loop -------------------------------------------------------------------------------
    def run(self, max_seconds: float | None = None) -> None:
        self.start()
        deadline = time.monotonic() + max_seconds if max_seconds else None
        watch = StuckWatch()  # as the stages' loop: a stuck step writes every thread's stack to the log
        try:
            while self._running and (deadline is None or time.monotonic() < deadline):
                watch.turn()
                self.step()
                self._status()
        finally:
            watch.stop()
            self.close()

    def _status(self) -> None:
        """Every STATUS_EVERY_S one line: what the agent runs and whether its reports get through,
        so a silent agent is told apart from one whose reports go nowhere."""
        self._steps += 1
        now = time.monotonic()
        if now - self._status_at < STATUS_EVERY_S:
            return
        log.info("alive: %d runs, %d updates to report, %d report rounds unacknowledged, %d messages queued, %s; "
                 "%d steps and %d commands in %.0fs", len(self.driver.active()) + len(self.adopted),
                 len(self.pending), len(self.rounds), len(self.producer), self.lease.status(now), self._steps,
                 self._commands_read, now - self._status_at)
        self._status_at, self._steps, self._commands_read = now, 0, 0

    def step(self) -> None:
        self.producer.poll(0)  # acknowledgements of reports: they extend the lease
        self._check_unanswered()
        now = time.monotonic()
        self._outage_check(now)
        if self.lease.runs_out(now):
            self._fence()
        if self.lease.held and self._start_held(time.monotonic()):
            self._save_offsets()
        messages = self.consumer.consume(num_messages=500, timeout=0.1)
        self._commands_read += len(messages)
        if messages:
            self._commands(messages)
            self._save_offsets()  # once per batch: what was handled is not handled again after a restart
        self._check_reader()
        for u in self.driver.poll():
            self._driver_update(u)
        self._watch_adopted()
        self._keep_endings()
        now = time.monotonic()
        if self.pending or now >= self._next_report:
            self._report(everyone=now >= self._next_report)
            if now >= self._next_report:
                self._next_report = now + self.settings.agent_heartbeat_s
        self._save_forgotten()

    def _outage_check(self, now: float) -> None:
        """As the lease nears its end with no report acknowledged, the peers are asked; if most of
        the cluster is cut off from the brokers (outage.py) the runs are kept, a lease at a time,
        up to the outage limit; else the lease runs out and the agent fences."""
        if self.peers is None:
            return
        lease_s, beat = self.lease.lease_s, self.settings.agent_heartbeat_s
        first = self.lease.kept_from is None
        if first:
            if not self.lease.ends_within(now, ask_ahead(lease_s)):
                return
            self.peers.ask_until(self.lease.until)
            if not self.lease.ends_within(now, decide_ahead(lease_s)):
                return
        else:  # kept: asked every heartbeat, and extended while the outage lasts, as reports would
            self.peers.ask_until(now + lease_s)
            if not self.lease.ends_within(now, lease_s - beat):
                return
        outage, said = self.peers.outage(now, 2 * beat + ASK_TIMEOUT_S)
        self._outage_said = said
        if not outage or not self.lease.keep(now, self.settings.agent_outage_limit_s):
            return
        self.driver.extend_lease(self.lease.until)
        self.files.save_lease(self.lease.saved(now, time.time()))
        if first:
            log.warning("no report reached the broker for %.0fs, and %s: a control-plane outage, in which nothing "
                        "can run elsewhere, so the runs here go on, for at most %gs past the lease "
                        "(PELOTON_AGENT_OUTAGE_LIMIT_S); no launch starts until a report gets through",
                        now - (self.rounds.acked_at or self.started_at), said, self.settings.agent_outage_limit_s)

    def _lease_answer(self) -> dict:
        """What GET /v1/lease says: whether reports reach the brokers, how long the runs may go on."""
        lease = getattr(self, "lease", None)
        if lease is None:  # still starting
            return {"reaching": False, "holds_runs_s": 0.0, "hosts": len(self.hosts)}
        now = time.monotonic()
        acked = self.rounds.acked_at
        return {"reaching": acked is not None and reaching(now - acked, lease.lease_s),
                "holds_runs_s": round(lease.holds_for(now), 3), "hosts": len(self.hosts)}

    def _driver_update(self, u: TaskUpdate) -> None:
        """An update the driver gave, counted and queued for the next report."""
        if u.cpu_seconds is not None:
            metrics.AGENT_RUN_CPU.labels(self.name).inc(u.cpu_seconds)
            if u.peak_mem_mb is not None:
                metrics.AGENT_RUN_PEAK_MEMORY.labels(self.name).observe(u.peak_mem_mb)
            if u.reason.startswith("REASON_CONTAINER_LIMITATION"):
                metrics.AGENT_LIMIT_KILLS.labels(self.name, u.reason).inc()
        if u.terminal:
            self.adoption.gave_up(u.task_id)  # an adopted run its health check gave up on, killed
        if u.terminal and u.reason == Reason.AGENT_FENCED and u.task_id not in self.fencing:
            self.executors_fenced += 1  # its executor held the lease, and ended it at its end
        if u.terminal and u.task_id in self.fencing:
            self.fencing.discard(u.task_id)
            u = TaskUpdate(u.task_id, u.host_id, MesosState.TASK_LOST, u.timestamp_ms, Reason.AGENT_FENCED,
                           f"killed by its agent, which heard nothing from the broker for {self.lease.lease_s:g}s "
                           f"(its lease): the host manager runs it elsewhere ({u.message})")
        self.pending.append(u)

    def _save_forgotten(self) -> None:
        self.book.save_forgotten()

    def _keep_endings(self) -> None:
        self.book.keep_endings(self.pending)

    def _check_reader(self) -> None:
        """A consumer that stopped fetching while commands waited is replaced (peloton/runtime/
        stall.py): the new one goes on from where the old one was."""
        if self.rounds or self.lease.fenced:
            return  # the broker is slow or away (reports unanswered): its answer would hold the loop
        # Where the reader is, else the next command to handle (a reader assigned at a saved
        # offset has no position until it fetches), else the first end the watch saw.
        stalled = self.reader.stalled(self.consumer, self.offsets)
        if not stalled:
            return
        self.consumer, at = self.reader.renew(self.consumer, self._new_consumer, self.offsets)
        log.warning("the command reader fetched nothing for %gs while commands waited on %s%s: a new consumer "
                    "goes on from offsets %s", self.reader.rule.after_s, self.commands.name, stalled, at)
        metrics.AGENT_READER_RENEWALS.inc()

    def _commands(self, messages: list[CommandMessage]) -> None:
        """One batch of commands, in order. A launch whose kill is in the same batch (an agent
        behind on its commands reads both at once: the job manager gave the run up meanwhile, and
        may run it elsewhere already) is never started, not started and killed a moment later."""
        batch = []
        for msg in messages:
            if msg.error():
                continue  # a partition EOF or a broker hiccup: librdkafka retries by itself
            batch.append((msg, self._decode(msg)))
        killed = {task_id for _, cmd in batch if cmd is not None for task_id in cmd["kills"]}
        for msg, cmd in batch:
            if cmd is not None:
                try:
                    self.launches.command(msg.partition(), msg.offset(), cmd, killed)
                except Exception:  # no command may end the agent (and with it every task it watches)
                    log.exception("command at offset %d could not be carried out; skipped", msg.offset())
            self.offsets[msg.partition()] = msg.offset() + 1

    def _decode(self, msg: CommandMessage) -> dict | None:
        """The AgentCommand in msg when it is for one of this agent's hosts; else None. A sealed
        one (peloton/auth/host_keys.py) is opened with the host's key: another host's is not."""
        try:
            name, cmd = opened(self.serde, msg.value(), self.hosts, self.report_keys)
        except Exception as exc:  # undecodable, or not what the schema promised: skipped, and said
            log.warning("command at offset %d skipped: %s", msg.offset(), exc)
            return None
        return addressed(name, cmd, self.hosts, self.fresh_since_ms)

    def _start_held(self, now: float) -> bool:
        return self.launches.start_held(now)

    def _save_offsets(self) -> None:
        """Where a restarted agent goes on reading (Lease.before_held)."""
        self.files.save_offsets(self.lease.before_held(self.offsets))

    def _fence(self) -> None:
        """The lease ran out: every run here is killed at once (no grace: the host manager's
        timeout is only a little longer than the lease), and reported lost when a report can go."""
        self.lease.fence(time.monotonic())
        active = sorted(self.driver.active())
        # An agent that starts with a broker slow to answer (a loaded machine, a broker just up)
        # has nothing to kill yet; it still takes no launch until it is heard.
        since = "" if self.rounds.ever_delivered else " since the agent started"
        killed = len(active) + len(self.adopted)
        what = (f"killing the {killed} runs here, as the host manager will run them elsewhere" if killed
                else f"their executors ended the {self.executors_fenced} runs here at its end" if self.executors_fenced
                else "no run here to kill")
        self.executors_fenced = 0
        log.warning("no report reached the broker for %gs (the lease)%s: %s; no launch starts until a report "
                    "gets through (those read in the next %.1fs wait for it)%s", self.lease.lease_s, since, what,
                    self.lease.hold_s, f"; {self._outage_said}" if self._outage_said else "")
        self.fencing.update(active)
        self.driver.kill_now(active)
        self.adoption.fence()

    # -- reports --------------------------------------------------------------------------------
    def _report(self, everyone: bool = True) -> None:
        """One AgentReport per host with news (every host at a heartbeat), each on its shard."""
        updates = updates_by_host(self.pending)
        running = running_by_host(self.driver.active() | set(self.adopted) | self.handed, self.book.host_of)
        # Where the reader stands in each commands partition (every command before it handled,
        # in this step or earlier): the host manager gives up a launch this agent does not run only
        # once the agent has read past it, so a reader that stalls delays a launch but never runs
        # it beside the copy that replaced it.
        read_to = self.lease.before_held(self.reader.standing(self.consumer, self.offsets))
        hosts = [h for h in (self.hosts if everyone else updates) if h in self.hosts]
        usage = usage_by_host(self.driver.usage(), self.book.host_of) if everyone else {}

        def encoded() -> Iterator[tuple[str, bytes]]:  # each made as it goes, stamped when sent
            for host_id in hosts:
                record = report_record(self.hosts[host_id], self.agent_id, running.get(host_id, ()),
                                       updates.get(host_id, []), read_to.get(self.command_partition[host_id]),
                                       self.logs.url if self.logs else "", now_ms(), usage.get(host_id))
                yield host_id, self.serde.encode("peloton.AgentReport", record)

        # The updates travel with this round; they are sent again if any of its reports fails.
        sending, self.pending = self.pending, []
        again = self.sender.send(sending, encoded())
        metrics.AGENT_RUNS.labels(self.name).set(sum(len(r) for r in running.values()))
        self.pending = again + self.pending
        self.producer.poll(0)

    def _check_unanswered(self) -> None:
        """A Kafka client that will not deliver is replaced (ReportSender.check)."""
        again = self.sender.check()
        if again:
            self.pending = again + self.pending

    def _delivered(self, round_id: int, err: object) -> None:
        """A report's acknowledgement (or failure). A round whose reports all got through extends
        the lease and forgets the runs it reported ended; a failed one sends its updates again."""
        finished = self.rounds.answered(round_id, err, time.monotonic())
        if finished is None:
            return
        if finished.failed:
            self.pending = finished.updates + self.pending
            return
        if finished.first:
            log.info("reports reach the broker: the first was acknowledged %.1fs after the agent started",
                     self.rounds.delivered_at - self.started_at)
        unfenced = self.lease.renewed(finished.sent, time.monotonic())
        self.driver.extend_lease(self.lease.until)
        self.files.save_lease(self.lease.saved(time.monotonic(), time.time()))
        if unfenced:
            log.info("a report got through again: the lease is renewed, launches are taken again")
        self.book.delivered(finished.updates)

    # -- stop -----------------------------------------------------------------------------------
    def stop(self, *_args: object) -> None:
        self._running = False

    def restart(self, *_args: object) -> None:
        """SIGHUP: stop, handing the runs over to the next agent started on this state directory
        (an upgrade, `pelotonctl dev restart agent-N`), as Mesos' agent leaves its executors."""
        self._handing_over = True
        self._running = False

    def _hand_over(self) -> set[str]:
        """The runs left going for the next agent: each executor is told the lease's end, when it
        kills its run unless an agent has taken it over (peloton/host/executor.py). None
        while fenced: its runs were killed already."""
        if self.lease.fenced:
            return set()
        until = self.lease.wall_until(time.monotonic(), time.time())
        self.driver.extend_lease(self.lease.until)  # the executors hold it as it stands, for the next agent
        handed = set(self.driver.hand_over(until, list(self.adopted)))
        log.info("handing %d runs over to the next agent of this host: they go on until the lease runs out in "
                 "%.0fs unless it takes them over first", len(handed), until - time.time())
        return handed

    def close(self) -> None:
        """A clean stop (SIGTERM) ends the runs here: they are reported lost, and run elsewhere;
        a restart (SIGHUP) hands them over instead (_hand_over), and ends only those it cannot.
        Adopted runs go first, with their grace: the driver's close removes every cgroup left."""
        self.handed = self._hand_over() if self._handing_over else set()
        self.adoption.stop(self.handed)
        self.launches.answer_held(self._handing_over, self._save_offsets)
        self.driver.close()
        for u in self.driver.poll():
            self.pending.append(TaskUpdate(u.task_id, u.host_id, MesosState.TASK_LOST, u.timestamp_ms,
                                           Reason.AGENT_SHUTDOWN, "its agent was stopped"))
        try:
            self._report()
            self.producer.flush(5.0)
        finally:
            self.book.keep_for_next(self.handed)
            self.consumer.close()
            if self.logs is not None:
                self.logs.close()
            if self.peers is not None:
                self.peers.close()


def host_view(settings: Settings, catalogue: Catalogue) -> Any:
    """host-state as the agent's peers are known from it."""
    from peloton.runtime.views import CompactedView

    return CompactedView(settings, "host-state", catalogue, quiet=True)


def run_agent(settings: Settings, specs: list[AgentSpec], simulate: bool = False, name: str | None = None,
              max_seconds: float | None = None, gpus: tuple[str, ...] = ()) -> None:
    name = name or specs[0].name
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s agent {name} %(levelname)s %(name)s: %(message)s")
    agent = HostAgent(settings, specs, simulate, name, gpus)
    signal.signal(signal.SIGTERM, agent.stop)
    signal.signal(signal.SIGINT, agent.stop)
    signal.signal(signal.SIGHUP, agent.restart)
    from peloton.registry import join  # kazoo is loaded only where a registry is used

    address = metrics.serve(settings)
    registry = join(settings.zookeeper, "agent", name, {"hosts": sorted(agent.hosts)[:100],
                                                         "host_count": len(agent.hosts), "metrics": address},
                    auth=settings.zookeeper_auth)
    settle_heap()
    try:
        agent.run(max_seconds)
    finally:
        if registry is not None:
            registry.close()
