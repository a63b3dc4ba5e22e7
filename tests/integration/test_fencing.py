"""No instance runs twice at once when a host is cut off or frozen, and no run is killed when the
whole control plane is: every run's executor holds its agent's lease and kills the run when it
runs out (a dead man's switch that works while the agent is frozen), before the host manager
(which waits the lease and a margin) calls the host lost and runs its tasks elsewhere. A real
partition: the agent reaches the broker only through a TCP proxy the test cuts (the broker
advertises the proxy to it). With every broker stopped, the agents see most of the cluster cut off
at once (they ask each other) and keep their runs, as the host manager keeps their hosts UP. Runs
alive are read from the host's processes, not from our records."""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from pathlib import Path

import pytest

from tests.integration.conftest import Pipeline
from tests.integration.helpers import sleepers
from tests.integration.tcp_proxy import TcpProxy

pytestmark = pytest.mark.integration

# lease = timeout - max(2 s, 2 heartbeats) = 4 s: the agent kills at 4 s, the host manager waits 6 s
TIMEOUTS = {"agent_heartbeat_s": 0.5, "agent_timeout_s": 6.0}
# the shortest the settings check allows: lease 3 s (MIN_AGENT_LEASE_S), DOWN after 5 s
SHORTEST = {"agent_heartbeat_s": 0.5, "agent_timeout_s": 5.0}
AGENTS = ("agent-0", "agent-1", "agent-2")
PARTITION_S = 60.0
# lease 5 s, margin 3 s: a launch read with less than 3 s of lease left waits up to 2.25 s past the
# lease for a report (the Kafka client takes up to a second to write again once allowed to). The
# agent is alone in its cluster, where its reports refused look like an outage: no outage limit.
HOLDING = {"agent_heartbeat_s": 1.5, "agent_timeout_s": 8.0, "agent_outage_limit_s": 0.0}


def runs_alive(job_id: str) -> dict[int, set[str]]:
    """Instance -> the runs (task ids) that have a live process now, from every process's
    environment (each run's processes carry PELOTON_INSTANCE_ID and PELOTON_TASK_ID)."""
    alive: dict[int, set[str]] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            env = dict(e.split(b"=", 1) for e in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if b"=" in e)
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, ValueError):
            continue
        if env.get(b"PELOTON_JOB_ID") == job_id.encode() and stat[0] != "Z":
            alive.setdefault(int(env[b"PELOTON_INSTANCE_ID"]), set()).add(env[b"PELOTON_TASK_ID"].decode())
    return alive


class Watch:
    """Samples the job's live runs ten times a second: any instance with two runs alive at once."""

    def __init__(self, job_id: str):
        self.job_id = job_id
        self.twice: list[tuple[float, int, set[str]]] = []
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for instance, runs in runs_alive(self.job_id).items():
                if len(runs) > 1:
                    self.twice.append((time.time(), instance, runs))
            self.samples += 1
            self._stop.wait(0.1)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def start(p: Pipeline, first_agent_env: dict[str, str] | None = None) -> str:
    """The stages and agent-0, a job filling agent-0, then the two other agents (room for its reruns)."""
    for stage in ("admit", "entitle", "place", "launch"):
        p.start(stage, wait=False)
    p.start_agent("agent-0", extra_env=first_agent_env)
    for stage in ("admit", "entitle", "place", "launch"):
        p.wait_for(f"{stage} assigned", lambda s=stage: "assigned" in p.log(f"{s}-0").read_text(), 60)
    job = p.submit(sleepers(2, 25, cpu=1))
    p.wait_for("both tasks RUNNING on agent-0", lambda: p.counts(job).get("RUNNING", 0) == 2, 60)
    assert {t.host_id for t in p.store.tasks_of_job(job)} == {"agent-0"}
    p.start_agent("agent-1")
    p.start_agent("agent-2")
    return job


def history_checks(p: Pipeline, job: str) -> None:
    """Every instance: run 1 lost on agent-0, its stale copy's end recorded, run 2 succeeded elsewhere."""
    assert p.wait_job(job, timeout=90) == "SUCCEEDED"
    # The stale copies' ends come with agent-0's first reports after it wakes or reconnects.
    p.wait_for("the stale copies' ends recorded", lambda: len({
        e["instance"] for e in p.store.task_events(job) if e["reason"] == "REASON_AGENT_FENCED"}) == 2, 30)
    events = p.store.task_events(job)
    for instance in (0, 1):
        mine = [(e["run_id"], e["state"], e["reason"], e["host_id"]) for e in events if e["instance"] == instance]
        assert (1, "LOST", "REASON_AGENT_DISCONNECTED", "agent-0") in mine, mine
        assert [e for e in mine if e[0] == 1 and e[2] == "REASON_AGENT_FENCED"], \
            f"instance {instance}: the stale copy's end is not in its history: {mine}"
        assert [e for e in mine if e[0] == 2 and e[1] == "SUCCEEDED" and e[3] != "agent-0"], mine


@pytest.mark.long
def test_a_partitioned_agent_kills_its_runs_before_they_run_elsewhere(kafka_cluster, tmp_path) -> None:
    cluster = kafka_cluster(1, proxied=True)
    node = cluster.nodes[0]
    proxy = TcpProxy(node.proxy_port, node.proxied_port)
    p = Pipeline(cluster.bootstrap, tmp_path / "p", "agent:3:cpu=2,mem_mb=1024,disk_mb=1000", **TIMEOUTS)
    watch = None
    try:
        job = start(p, {"PELOTON_KAFKA_BOOTSTRAP": f"127.0.0.1:{node.proxy_port}"})
        watch = Watch(job)
        proxy.cut()  # agent-0 runs on, but nothing it sends or fetches crosses any more
        cut_at = time.monotonic()
        p.wait_for("agent-0 fenced", lambda: "(the lease)" in p.log("agent-0").read_text(), 20)
        fenced_after = time.monotonic() - cut_at
        p.wait_for("the fenced runs gone", lambda: runs_alive(job) == {}, 1.0)  # SIGKILL: at once
        p.wait_for("the host manager calls agent-0 DOWN", lambda: "agent agent-0 sent no report" in
                   p.log("launch-0").read_text(), 20)
        down_after = time.monotonic() - cut_at
        p.wait_for("both instances running again elsewhere", lambda: p.counts(job).get("RUNNING", 0) == 2, 30)
        time.sleep(max(0.0, PARTITION_S - (time.monotonic() - cut_at)))
        proxy.heal()  # agent-0 reports again: its fenced runs' ends, and it takes launches again
        p.wait_for("agent-0 renews its lease", lambda: "the lease is renewed" in p.log("agent-0").read_text(), 30)
        history_checks(p, job)
        watch.stop()
        assert watch.samples > 100 and not watch.twice, f"runs alive twice at once: {watch.twice[:3]}"
        print(f"partition of {PARTITION_S:g}s: agent fenced {fenced_after:.1f}s after the cut, host DOWN "
              f"{down_after:.1f}s after; "
              f"{watch.samples} samples, no instance alive twice")
    finally:
        if watch:
            watch.stop()
        proxy.close()
        p.stop()


@pytest.mark.long
@pytest.mark.timeout(420)
@pytest.mark.parametrize("frozen_s", [30.0, pytest.param(120.0, marks=pytest.mark.slow)])  # 120 s: make soak
def test_a_frozen_agents_runs_end_with_its_lease_before_any_runs_elsewhere(pipeline_factory, frozen_s) -> None:
    """The agent frozen (SIGSTOP) can do nothing: its runs' executors end them when its lease runs
    out, before the host manager calls the host DOWN and runs them elsewhere; on waking it reports
    how they ended."""
    p = pipeline_factory(hosts="agent:3:cpu=2,mem_mb=1024,disk_mb=1000", **TIMEOUTS)
    job = start(p)
    watch = Watch(job)
    frozen = p.procs["agent-0"]
    frozen.send_signal(signal.SIGSTOP)
    frozen_at = time.monotonic()
    try:
        p.wait_for("agent-0's runs ended by their executors", lambda: not any(
            r for r in runs_alive(job).values() if any(t.endswith("-1") for t in r)), 15)
        ended_after = time.monotonic() - frozen_at
        p.wait_for("agent-0 DOWN", lambda: "agent agent-0 sent no report" in p.log("launch-0").read_text(), 30)
        down_after = time.monotonic() - frozen_at
        listed = p.ctl("host", "list", "--json")
        [row] = [h for h in json.loads(listed.stdout)["hosts"] if h["host_id"] == "agent-0"]
        assert (row["state"], row["tasks"], row["free"], row["runs_known"]) == ("DOWN", None, None, False), row
        p.wait_for("both instances running again elsewhere", lambda: p.counts(job).get("RUNNING", 0) == 2, 30)
        time.sleep(max(0.0, frozen_s - (time.monotonic() - frozen_at)))
    finally:
        frozen.send_signal(signal.SIGCONT)
    # Awake, it reports how its runs ended (its executors fenced them), and takes launches again
    # once a report sent since gets through.
    history_checks(p, job)
    watch.stop()
    assert watch.samples > 100 and not watch.twice, f"runs alive twice at once: {watch.twice[:3]}"
    assert ended_after < down_after
    print(f"frozen {frozen_s:g}s: its runs ended {ended_after:.1f}s in, the host DOWN {down_after:.1f}s in; "
          f"{watch.samples} samples of the host's processes, no instance alive twice")


# With the default timeouts (a 12 s stall) in `make soak`, to keep the suite under 25 minutes: the
# shortest timeouts run the same scenario in `make test`.
@pytest.mark.parametrize("timeouts,stall_s", [pytest.param({}, 12.0, marks=pytest.mark.slow), (SHORTEST, 2.0)],
                         ids=["defaults", "shortest"])
def test_a_broker_stall_shorter_than_the_lease_kills_nothing_and_runs_nothing_twice(kafka_cluster, tmp_path,
                                                                                     timeouts, stall_s) -> None:
    """The broker frozen (SIGSTOP) for most of the agents' lease: every process waits, nobody is
    judged silent (the host manager cannot read to the end meanwhile), no agent fences itself."""
    cluster = kafka_cluster(1)
    p = Pipeline(cluster.bootstrap, tmp_path / "p", "agent:3:cpu=2,mem_mb=1024,disk_mb=1000", **timeouts)
    try:
        p.start_all()
        job = p.submit(sleepers(6, stall_s + 10, cpu=1))
        p.wait_for("6 tasks RUNNING", lambda: p.counts(job).get("RUNNING", 0) == 6, 60)
        watch = Watch(job)
        # An agent may have waited past its lease for its first report's answer (a broker just up on
        # a loaded machine: nothing to kill then); what counts is what the stall does.
        before = {host: len(p.log(host).read_text()) for host in AGENTS}
        broker = cluster.pid(1)
        os.killpg(broker, signal.SIGSTOP)
        time.sleep(stall_s)
        os.killpg(broker, signal.SIGCONT)
        assert p.wait_job(job, timeout=120) == "SUCCEEDED"
        watch.stop()
        tasks = p.store.tasks_of_job(job)
        assert [t.run_id for t in tasks] == [1] * 6, "a healthy task was killed and run again"
        ends = {(e["state"], e["reason"]) for e in p.store.task_events(job) if e["state"] in ("LOST", "KILLED")}
        assert not ends, ends
        for host in AGENTS:
            since_stall = p.log(host).read_text()[before[host]:]
            assert "(the lease)" not in since_stall, since_stall
        assert "sent no report" not in p.log("launch-0").read_text()
        assert not watch.twice
    finally:
        p.stop()


# Three minutes in `make soak`; `make test` stops the broker for 40 s (ten leases) to keep the suite
# within its time.
@pytest.mark.long
@pytest.mark.timeout(480)
@pytest.mark.parametrize("outage_s", [pytest.param(180.0, marks=pytest.mark.slow), 40.0], ids=["3min", "40s"])
def test_every_broker_stopped_kills_no_run_and_runs_none_again(kafka_cluster, tmp_path, outage_s) -> None:
    """A control-plane outage far longer than the lease (3 minutes against 4 s): every agent asks
    its peers, finds them cut off too, and keeps its runs; the host manager, which hears nobody,
    calls no host DOWN; once the broker is back the job ends with every instance on its first run."""
    cluster = kafka_cluster(1)
    p = Pipeline(cluster.bootstrap, tmp_path / "p", "agent:3:cpu=2,mem_mb=1024,disk_mb=1000", **TIMEOUTS)
    try:
        p.start_all()
        job = p.submit(sleepers(6, outage_s + 30, cpu=1))
        p.wait_for("6 tasks RUNNING", lambda: p.counts(job).get("RUNNING", 0) == 6, 60)
        watch = Watch(job)
        time.sleep(3)  # the agents' peers read from host-state
        cluster.kill(1, signal.SIGKILL)
        down_at = time.monotonic()
        while time.monotonic() - down_at < outage_s:
            alive = runs_alive(job)
            assert len(alive) == 6 and all(len(r) == 1 for r in alive.values()), \
                f"{time.monotonic() - down_at:.0f}s into the outage: {alive}; logs in {p.home}"
            time.sleep(1.0)
        cluster.start_node(1)
        assert p.wait_job(job, timeout=180) == "SUCCEEDED"
        watch.stop()
        assert [t.run_id for t in p.store.tasks_of_job(job)] == [1] * 6, "a task was killed and run again"
        ends = {(e["state"], e["reason"]) for e in p.store.task_events(job) if e["state"] in ("LOST", "KILLED")}
        assert not ends, ends
        for host in AGENTS:
            said = p.log(host).read_text()
            assert "a control-plane outage" in said and "(the lease)" not in said, f"{host}: logs in {p.home}"
        launch = p.log("launch-0").read_text()
        assert "sent no report" not in launch, p.home
        assert not watch.twice
    finally:
        p.stop()


def test_launches_read_as_the_lease_runs_out_wait_for_a_report_and_each_runs_once(pipeline_factory) -> None:
    """The agent's reports refused (its right to write the agent-reports topic taken away) while it
    still reads its commands, as after a broker outage almost as long as its lease: launches it
    reads as the lease runs out, or just after, wait for a report to get through. Started at once
    they were killed by the fence a moment later, and those read after it were answered lost:
    each ran twice (seen after whole-cluster restarts). The right given back just after the fence:
    each runs once."""
    from confluent_kafka.admin import AclBindingFilter, AdminClient

    from peloton.runtime import kafka_access
    from peloton.topics import Catalogue
    from pelotonctl.principals import Grant, binding

    p = pipeline_factory(hosts="agent:1:cpu=4,mem_mb=1024,disk_mb=1000", **HOLDING)
    assert p.settings.kafka_user, "the session's broker runs without ACLs"
    p.start_all()
    # A run the fence kills: its end, unreported meanwhile, makes the agent report at every step,
    # so the report that renews the lease goes as soon as it may.
    fenced = p.submit(sleepers(1, 60, cpu=1))
    p.wait_for("a run to fence", lambda: p.counts(fenced).get("RUNNING", 0) == 1, 60)
    admin = AdminClient(kafka_access(p.settings))
    write = binding(Grant("agent", "topic", Catalogue(p.settings.topic_prefix)["agent-reports"].name, "write"))
    [(_, taking)] = admin.delete_acls([AclBindingFilter(write.restype, write.name, write.resource_pattern_type,
                                                        write.principal, write.host, write.operation,
                                                        write.permission_type)], request_timeout=10).items()
    assert taking.result(), "the agent's write ACL was not there to take"
    time.sleep(2.5)  # the lease about to run out (less than the margin left) when the launches come
    job = p.submit(sleepers(3, 2, cpu=1))
    log = p.log("agent-0")
    deadline = time.monotonic() + 15
    while "(the lease)" not in log.read_text():
        assert time.monotonic() < deadline, f"agent-0 not fenced; logs in {p.home}"
        time.sleep(0.05)
    [(_, giving)] = admin.create_acls([write], request_timeout=10).items()
    giving.result()
    assert p.wait_job(job, timeout=60) == "SUCCEEDED"
    runs = p.store.launch_counts(job)
    assert runs == {0: 1, 1: 1, 2: 1}, f"launches per instance {runs}; logs in {p.home}"
    held = re.search(r"the (\d+) launches held for it start", log.read_text())
    assert held and int(held[1]) >= 3, f"not held; logs in {p.home}"  # the fenced run's rerun may be too
