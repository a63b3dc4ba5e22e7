"""What operators see, on a real broker with real stage processes: consumer lag per stage group
(the same figures as Kafka's own kafka-consumer-groups), each stage's Prometheus metrics, and the dead
letters listed, shown and replayed with pelotonctl."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
import uuid

import pytest

from pelotonctl.admin import create_pool, emitter
from pelotonctl.dev.stack import free_port
from pelotonctl.lag import STAGES, LagMonitor
from pelotonctl.lag_child import LagInChild, LagUnavailable
from tests.integration.conftest import pool_yaml

pytestmark = pytest.mark.integration

# 20,000 tasks of 0 s on simulated hosts: large enough that every stage falls behind for a while.
BIG = """
name: big
instancecount: 20000
defaultconfig:
  resource: {cpulimit: 0.001, memlimitmb: 1, disklimitmb: 1}
  command: {shell: true, value: 'true'}
"""

HELLO = """
name: hello
instancecount: 2
defaultconfig:
  resource: {cpulimit: 1, memlimitmb: 64, disklimitmb: 10}
  command: {shell: true, value: 'true'}
"""


def pelotonctl(p, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = p.ctl(*args)
    if check and done.returncode != 0:
        raise AssertionError(f"pelotonctl {' '.join(args)} exited {done.returncode}: {done.stderr}")
    return done


@pytest.mark.slow  # a scale test (20,000 tasks): `make soak`, so the suite stays under 25 minutes
def test_lag_shows_every_stage_behind_under_a_20000_task_job_then_0_and_ok(pipeline_factory) -> None:
    p = pipeline_factory(hosts="sim:50:cpu=64,mem_mb=262144,disk_mb=1000000", sim_task_seconds=0.0)
    p.start_all()
    monitor = LagMonitor(p.settings, window=3)
    try:
        first = monitor.sample()
        assert [g["stage"] for g in first["groups"]] == list(STAGES)
        job_id = p.submit(BIG)
        most = dict.fromkeys(STAGES, 0)
        deadline = time.monotonic() + 240
        def state() -> str | None:
            job = p.store.get_job(job_id)
            return job.state if job else None

        while state() not in ("SUCCEEDED", "FAILED", "KILLED"):
            assert time.monotonic() < deadline, f"job not done: {p.counts(job_id)}; logs in {p.home}"
            for g in monitor.sample()["groups"]:
                most[g["stage"]] = max(most[g["stage"]], g["total_lag"])
            time.sleep(0.2)
        assert p.store.get_job(job_id).state == "SUCCEEDED"
        assert all(most[s] > 0 for s in STAGES), f"largest lag seen per stage: {most}"
        print(f"largest lag seen per stage: {most}")

        # Drained: every group at 0 and OK (a window of three samples, so the status has seen it).
        def drained() -> bool:
            report = [monitor.sample() for _ in range(3)][-1]
            return all(g["total_lag"] == 0 and g["status"] == "OK" and g["held"] == 0 for g in report["groups"])

        p.wait_for("every group at lag 0 and OK", drained, 30)
    finally:
        monitor.close()
    shown = json.loads(pelotonctl(p, "lag", "--json", "--interval", "0.2").stdout)
    assert {g["group"]: (g["status"], g["total_lag"]) for g in shown["groups"]} == {
        f"{p.settings.topic_prefix}peloton.{s}": ("OK", 0) for s in STAGES}
    row = shown["groups"][0]["partitions"][0]
    assert set(row) >= {"topic", "partition", "current_offset", "log_end_offset", "lag", "lag_seconds"}
    table = pelotonctl(p, "lag", "--interval", "0.2").stdout
    assert all(f"peloton.{s}" in table for s in STAGES)

    # A group with no member and messages waiting is STOP.
    p.procs["launch-0"].terminate()
    p.procs["launch-0"].wait(15)
    p.submit(HELLO)

    def launch_stopped() -> bool:
        g = json.loads(pelotonctl(p, "lag", "--json", "--group", "launch", "--interval", "0.2").stdout)["groups"][0]
        return g["status"] == "STOP" and g["total_lag"] > 0 and g["max_lag_seconds"] >= 0

    p.wait_for("launch's group STOP with lag", launch_stopped, 30)


def kafka_consumer_groups(settings, groups: list[str]) -> dict[tuple[str, str, int], tuple]:
    """What Kafka's own kafka-consumer-groups (ConsumerGroupCommand, kafka-tools) prints for the
    groups: (group, topic, partition) -> (current offset, log-end offset, lag), None for '-'."""
    import subprocess

    from pelotonctl.dev.kafka import client_properties, java_command

    config = settings.home / "client.properties"
    config.write_text(client_properties(settings))
    args = ["--bootstrap-server", settings.bootstrap, "--command-config", str(config), "--describe"]
    for g in groups:
        args += ["--group", g]
    done = subprocess.run(java_command("org.apache.kafka.tools.consumer.group.ConsumerGroupCommand", *args),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {}
    for line in done.stdout.splitlines():
        cells = line.split()
        if len(cells) >= 6 and cells[0] in groups and cells[2].isdigit():
            num = [None if c == "-" else int(c) for c in cells[3:6]]
            rows[(cells[0], cells[1], int(cells[2]))] = tuple(num)
    return rows


def test_lag_reports_what_kafkas_own_consumer_groups_tool_reports(pipeline_factory) -> None:
    p = pipeline_factory()
    p.start_all()
    assert p.wait_job(p.submit(HELLO)) == "SUCCEEDED"
    for proc in p.procs.values():  # offsets stand still while both tools read them
        proc.terminate()
    for proc in p.procs.values():
        proc.wait(30)
    p.submit(HELLO)  # a command no admit reads: a lag of 1
    monitor = LagInChild(p.settings)  # as the API, the dashboard and the command line sample
    try:
        report = monitor.sample()
        # An abort in librdkafka (its failed assertion) ends the sampling process: that sample is
        # unavailable, and the next process answers the same.
        os.kill(monitor._child.pid, signal.SIGABRT)
        with pytest.raises(LagUnavailable, match="the sampling process ended"):
            monitor.sample()
        again = monitor.sample()
    finally:
        monitor.close()
    ours = {(g["group"], r["topic"], r["partition"]): (r["current_offset"], r["log_end_offset"], r["lag"])
            for g in report["groups"] for r in g["partitions"]}
    assert ours == {(g["group"], r["topic"], r["partition"]): (r["current_offset"], r["log_end_offset"], r["lag"])
                    for g in again["groups"] for r in g["partitions"]}
    theirs = kafka_consumer_groups(p.settings, [g["group"] for g in report["groups"]])
    assert theirs, "kafka-consumer-groups printed no rows"
    for key, (current, end, lag) in theirs.items():
        assert key in ours, f"{key} is in kafka-consumer-groups but not in pelotonctl lag"
        # Kafka's tool shows no lag where a group never committed; ours counts from 0 there.
        assert ours[key][:2] == (current, end) and (lag is None or ours[key][2] == lag), (
            key, ours[key], (current, end, lag))
    # the unread command: Kafka's tool shows it where admit committed before, ours everywhere
    assert sum(g["total_lag"] for g in report["groups"] if g["stage"] == "admit") >= 1
    print(f"{len(theirs)} partitions agree with kafka-consumer-groups")


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read().decode()


def test_every_stage_serves_consumer_lag_and_its_own_metrics(pipeline_factory) -> None:
    p = pipeline_factory(hosts="sim:4:cpu=8,mem_mb=16384,disk_mb=100000", sim_task_seconds=0.0)
    ports = {s: free_port() for s in STAGES}
    for s in STAGES:
        p.start(s, wait=False, extra_env={"PELOTON_METRICS_PORT": str(ports[s])})
    for s in STAGES:
        p.wait_for(f"{s} assigned", lambda s=s: "assigned" in p.log(f"{s}-0").read_text(), 60)
    job_id = p.submit(HELLO)
    assert p.wait_job(job_id) == "SUCCEEDED"
    own = {
        "admit": ['peloton_jobs_created_total{pool="/test"} 1.0',
                  'peloton_task_transitions_total{state="SUCCEEDED"} 2.0'],
        "entitle": ['peloton_admitted_tasks_total{pool="/test"} 2.0',
                    'peloton_pool_entitlement{kind="cpu",pool="/test"}'],
        "place": ['peloton_placements_total{strategy="PACK_HOST"} 2.0'],
        "launch": ['peloton_launches_total{driver="sim"} 2.0', 'peloton_hosts{state="UP"} 4.0'],
    }

    def all_there() -> bool:
        for s in STAGES:
            text = scrape(f"http://127.0.0.1:{ports[s]}/metrics")
            group = f'consumergroup="{p.settings.topic_prefix}peloton.{s}"'
            lines = [line for line in text.splitlines()
                     if line.startswith("kafka_consumergroup_lag{") and group in line]
            if not lines or not any(line.startswith("kafka_consumergroup_lag_seconds{") for line in text.splitlines()):
                return False
            if not all(any(line.startswith(m) for line in text.splitlines()) for m in own[s]):
                return False
            if f'peloton_records_handled_total{{stage="{s}"' not in text or "process_cpu_seconds_total" not in text:
                return False
        return True

    p.wait_for("every stage's metrics", all_there, 20)
    admit = scrape(f"http://127.0.0.1:{ports['admit']}/metrics")
    lags = [float(line.rsplit(" ", 1)[1]) for line in admit.splitlines() if line.startswith("kafka_consumergroup_lag{")]
    assert lags and all(v == 0 for v in lags)
    assert 'peloton_batch_seconds_bucket{le="+Inf",stage="admit"}' in admit
    # A dead letter is counted by stage and reason.
    out = emitter(p.settings)
    out.producer.produce(f"{p.settings.topic_prefix}peloton.job-commands", key=b"x", value=b"garbage")
    out.flush()
    p.wait_for("the dead letter counted", lambda: 'peloton_dead_letters_total{reason="undecodable",stage="admit"} 1.0'
               in scrape(f"http://127.0.0.1:{ports['admit']}/metrics"), 20)


def test_a_dead_letter_is_listed_shown_and_replayed_fixed(pipeline_factory, tmp_path) -> None:
    p = pipeline_factory(hosts="sim:2:cpu=8,mem_mb=16384,disk_mb=100000", sim_task_seconds=0.0)
    p.start_all()
    job_id = str(uuid.uuid4())
    out = emitter(p.settings)
    out.emit("job-commands", job_id, "peloton.JobCommand", {
        "command_id": uuid.uuid4().hex, "kind": "CREATE", "job_id": job_id, "pool": "/test",
        "config": "name: [broken\n", "requested_by": "a-team", "timestamp_ms": int(time.time() * 1000)})
    out.flush()
    p.wait_for("a dead letter", lambda: json.loads(pelotonctl(p, "dead-letters", "list", "--json").stdout), 30)
    [letter] = json.loads(pelotonctl(p, "dead-letters", "list", "--json", "--stage", "admit", "--since", "5m").stdout)
    assert letter["stage"] == "admit" and letter["source_topic"].endswith("peloton.job-commands")
    assert "invalid YAML" in letter["reason"]
    assert json.loads(pelotonctl(p, "dead-letters", "list", "--json", "--stage", "launch").stdout) == []
    shown = json.loads(pelotonctl(p, "dead-letters", "show", str(letter["number"]), "--json").stdout)
    assert shown["original"]["schema"] == "peloton.JobCommand"
    assert shown["original"]["value"]["job_id"] == job_id and shown["key"] == job_id
    assert "name: [broken" in pelotonctl(p, "dead-letters", "show", str(letter["number"])).stdout

    # Still broken: refused before anything is sent. Fixed: the job runs.
    still = pelotonctl(p, "dead-letters", "replay", str(letter["number"]), "--set", "config=name: [x", check=False)
    assert still.returncode == 2 and "invalid YAML" in still.stderr
    fixed = tmp_path / "fixed.json"
    shown["original"]["value"]["config"] = HELLO
    fixed.write_text(json.dumps(shown))
    pelotonctl(p, "dead-letters", "replay", str(letter["number"]), "--value", str(fixed))
    assert p.wait_job(job_id) == "SUCCEEDED"
    assert pelotonctl(p, "dead-letters", "show", "99", check=False).returncode == 3


PINNED = """
name: pinned
instancecount: 1
defaultconfig:
  resource: {cpulimit: 1, memlimitmb: 64, disklimitmb: 10}
  constraint:
    type: 1
    labelconstraint: {kind: 2, condition: 2, label: {key: rack, value: nowhere}, requirement: 1}
  command: {shell: true, value: 'true'}
"""

WIDE = HELLO.replace("instancecount: 2", "instancecount: 12")


def test_held_gangs_and_queued_demand_are_told_apart_from_lag(pipeline_factory) -> None:
    # A job pinned to a rack no host has is admitted, then held by place (waiting for a host); 12
    # one-cpu tasks of 60 s in a 4-cpu pool run 4 and queue 8 in their pool. Neither is lag.
    p = pipeline_factory(hosts="sim:1:cpu=8,mem_mb=16384,disk_mb=100000", sim_task_seconds=60.0,
                         placement_attempts=100_000)
    create_pool(p.settings, p.store, "/small", pool_yaml(cpu=4))
    p.start_all()
    pinned = p.submit(PINNED)
    p.wait_for("the pinned task placing", lambda: p.counts(pinned).get("PLACING"), 30)
    wide = p.submit(WIDE, pool="/small")
    p.wait_for("4 tasks running", lambda: p.counts(wide).get("RUNNING") == 4, 30)
    monitor = LagMonitor(p.settings, window=3)
    try:
        def told_apart() -> bool:
            report = [monitor.sample() for _ in range(3)][-1]
            groups = {g["stage"]: g for g in report["groups"]}
            place, entitle = groups["place"], groups["entitle"]
            queued = {q["pool"]: q for q in report["queued"]}.get("/small", {})
            return (place["held"] >= 1 and place["total_lag"] == place["held"] and place["status"] == "OK"
                    and entitle["total_lag"] == 0 and queued.get("queued_gangs") == 8)

        p.wait_for("place's held gang and the pool's queued gangs apart from lag", told_apart, 30)
    finally:
        monitor.close()
    table = pelotonctl(p, "lag", "--interval", "0.2").stdout
    assert "demand queued in pools (not lag)" in table and "/small" in table
