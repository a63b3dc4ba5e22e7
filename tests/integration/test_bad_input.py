"""Bad input loses nothing and stops nothing: dead letters for stages, clear errors for the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
import yaml
from confluent_kafka import Producer

from peloton.runtime import kafka_access
from peloton.topics import Catalogue
from pelotonctl.admin import emitter, host_capacities
from pelotonctl.dev.stack import free_port
from tests.integration.conftest import pool_yaml
from tests.integration.helpers import command

pytestmark = pytest.mark.integration

GOOD = """
name: good
instancecount: 2
defaultconfig:
  resource: {cpulimit: 1, memlimitmb: 32}
  command: {shell: true, value: 'exit 0'}
"""


def test_malformed_messages_land_on_the_dead_letter_topic_and_the_stage_goes_on(pipeline_factory) -> None:
    p = pipeline_factory()
    p.start_all()
    topic = Catalogue(p.settings.topic_prefix)["job-commands"].name
    raw = Producer(kafka_access(p.settings))
    raw.produce(topic, key=b"junk", value=b"this is not avro")
    raw.flush()
    out = emitter(p.settings, "test")
    out.emit("job-commands", "j-yaml", "peloton.JobCommand", command("j-yaml", "name: [unclosed"))
    out.emit("job-commands", "j-pool", "peloton.JobCommand", command("j-pool", GOOD, pool="/nowhere"))
    out.emit("job-commands", "j-kind", "peloton.JobCommand", command("j-kind", GOOD, kind="EXPLODE"))
    out.emit("job-commands", "j-status", "peloton.TaskRelease",
             {"task_id": "x", "job_id": "x", "pool": "/test", "reason": "", "timestamp_ms": 1})
    out.flush()
    good = p.submit(GOOD)
    assert p.wait_job(good) == "SUCCEEDED"  # the stage went on past every bad message

    letters = p.read_topic("dead-letters", expect=5)
    reasons = {dl["key"]: dl["reason"] for dl in letters}
    assert len(letters) == 5
    assert all(dl["stage"] == "admit" and dl["source_topic"] == topic and dl["offset"] >= 0 for dl in letters)
    assert "undecodable" in reasons[b"junk"] and "magic byte" in reasons[b"junk"]
    assert next(dl for dl in letters if dl["key"] == b"junk")["value"] == b"this is not avro"
    assert "invalid YAML" in reasons[b"j-yaml"]
    assert "unknown resource pool '/nowhere'" in reasons[b"j-pool"]
    assert "unknown job command kind 'EXPLODE'" in reasons[b"j-kind"]
    assert "schema peloton.TaskRelease is not allowed on job-commands" in reasons[b"j-status"]
    for job_id in ("j-yaml", "j-pool", "j-kind"):
        assert p.store.get_job(job_id) is None


def test_an_invalid_job_file_gets_a_clear_error_and_nothing_is_stored_or_sent(pipeline_factory, tmp_path) -> None:
    p = pipeline_factory()
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\ninstancecount: -3\ndefaultconfig:\n  resource: {cpulimit: lots}\n")
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: [unclosed\n")
    good = tmp_path / "good.yaml"
    good.write_text(GOOD)

    for args in (("job", "validate", str(bad)), ("job", "create", "/test", str(bad))):
        result = p.ctl(*args)
        assert result.returncode == 2, result.stderr
        assert "instancecount" in result.stderr and "defaultconfig.resource.cpulimit" in result.stderr
        assert "Traceback" not in result.stderr
    result = p.ctl("job", "create", "/test", str(broken))
    assert result.returncode == 2 and "invalid YAML" in result.stderr and "line" in result.stderr
    result = p.ctl("job", "create", "/nowhere", str(good))
    assert result.returncode == 2 and "unknown resource pool '/nowhere'" in result.stderr
    result = p.ctl("job", "validate", str(good), "--json")
    assert result.returncode == 0 and json.loads(result.stdout)["instances"] == 2

    assert p.store.list_jobs() == []
    assert p.read_topic("job-commands", expect=1, timeout=2) == []


def test_topics_apply_is_idempotent(pipeline_factory) -> None:
    p = pipeline_factory()
    result = p.ctl("topics", "apply", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert len(report) == len(list(Catalogue())) and {r["status"] for r in report} == {"ok"}


def test_a_job_that_can_never_fit_is_refused_at_create_with_the_numbers(pipeline_factory, tmp_path) -> None:
    p = pipeline_factory()
    p.start("launch")  # publishes its hosts: local 8-cpu hosts
    deadline = time.monotonic() + 20
    while not host_capacities(p.settings, wait_s=1):
        assert time.monotonic() < deadline, "launch never published its hosts"
    wide, gang, huge = tmp_path / "wide.yaml", tmp_path / "gang.yaml", tmp_path / "huge.yaml"
    wide.write_text(GOOD.replace("cpulimit: 1", "cpulimit: 12"))
    gang.write_text(GOOD.replace("instancecount: 2", "instancecount: 80\nsla: {minimumRunningInstances: 80}"))
    huge.write_text(GOOD + "# " + "x" * 5_000_000 + "\n")
    result = p.ctl("job", "create", "/test", str(wide))
    assert result.returncode == 2, result.stderr
    assert "fits on no host: it needs cpu 12, memory MB 32" in result.stderr
    assert "the largest host has cpu 8" in result.stderr
    result = p.ctl("job", "create", "/test", str(gang))
    assert result.returncode == 2 and "need more than pool /test's limit: cpu 80 > 64" in result.stderr, result.stderr
    result = p.ctl("job", "create", "/test", str(huge))
    assert result.returncode == 2 and "more than the limit of 1048576" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert p.store.list_jobs() == []


def test_pool_changes_need_only_the_store_and_every_refusal_names_its_rule(pipeline_factory, tmp_path) -> None:
    p = pipeline_factory()
    parent, child, big = tmp_path / "parent.yaml", tmp_path / "child.yaml", tmp_path / "big.yaml"
    parent.write_text(pool_yaml(cpu=4))
    child.write_text(pool_yaml(cpu=4).replace("name: pool-4cpu", "name: child"))
    big.write_text(pool_yaml(cpu=8).replace("name: pool-8cpu", "name: big"))
    closed = free_port()  # nothing listens there: a pool is one row in the store, no broker needed
    env = {**os.environ, **p.settings.env(), "PELOTON_KAFKA_BOOTSTRAP": f"127.0.0.1:{closed}"}
    made = subprocess.run([sys.executable, "-m", "pelotonctl", "respool", "create", "/later", str(parent)], env=env,
                          capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    assert p.ctl("respool", "create", "/later", str(parent)).returncode == 0  # the same again: a no-op
    clash = p.ctl("respool", "create", "/later", str(big))
    assert clash.returncode == 2 and "path: /later already exists" in clash.stderr, clash.stderr

    too_big = p.ctl("respool", "create", "/later/big", str(big))
    assert too_big.returncode == 2, too_big.stderr
    assert "cpu reservation: children of /later reserve 8 of its 4" in too_big.stderr
    assert "cpu limit: /later/big limit 8 is above" in too_big.stderr
    assert p.store.get_pool("/later/big") is None  # nothing invalid is stored
    assert p.ctl("respool", "create", "/later/child", str(child)).returncode == 0

    shrink = tmp_path / "shrink.yaml"
    shrink.write_text(pool_yaml(cpu=2))
    refused = p.ctl("respool", "update", "/later", str(shrink))
    assert refused.returncode == 2 and "children of /later reserve 4 of its 2" in refused.stderr, refused.stderr
    gone = p.ctl("respool", "delete", "/later")
    assert gone.returncode == 2 and "children: /later has child pools (/later/child)" in gone.stderr, gone.stderr
    assert p.ctl("respool", "delete", "/nowhere").returncode == 3

    tree = json.loads(p.ctl("respool", "dump", "--json").stdout)
    later = next(c for c in tree["children"] if c["path"] == "/later")
    assert [c["path"] for c in later["children"]] == ["/later/child"]
    assert yaml.safe_load(p.ctl("respool", "dump").stdout)["path"] == "/"
    assert p.ctl("respool", "delete", "/later/child").returncode == 0
    assert p.ctl("respool", "delete", "/later").returncode == 0
    assert p.store.get_pool("/later") is None

    report = p.ctl("respool", "get", "/test", "--json")
    assert report.returncode == 0, report.stderr
    figures = json.loads(report.stdout)
    assert figures["reservation"]["cpu"] == 64 and figures["limit"]["cpu"] == 64
    assert set(figures["entitlement"]) == {"cpu", "gpu", "memory", "disk"}


def status_once_it_says(p, job_id: str, key: str, timeout: float) -> dict:
    """`job status --json` of the job, polled until it has something under key."""
    deadline = time.monotonic() + timeout
    while True:
        result = p.ctl("job", "status", job_id, "--json")
        assert result.returncode == 0, result.stderr
        summary = json.loads(result.stdout)
        if summary.get(key):
            return summary
        assert time.monotonic() < deadline, f"job status never showed {key!r}: {summary}"
        time.sleep(0.5)


def test_job_status_says_why_a_job_waits(pipeline_factory) -> None:
    p = pipeline_factory(hosts="sim:4:cpu=16,mem_mb=65536,disk_mb=100000", sim_task_seconds=60)
    p.start_all()
    busy = p.submit(GOOD.replace("instancecount: 2", "instancecount: 60").replace("exit 0", "sleep 60"))
    deadline = time.monotonic() + 30
    while p.store.task_state_counts([busy])[busy].get("RUNNING", 0) < 60:
        assert time.monotonic() < deadline, "the first job never ran"
        time.sleep(0.2)
    waiting = p.submit(GOOD.replace("instancecount: 2", "instancecount: 8\nsla: {minimumRunningInstances: 8}"))
    summary = status_once_it_says(p, waiting, "waiting", timeout=20)
    assert summary["state"] == "PENDING"
    [gang] = summary["waiting"]
    assert gang["tasks"] == 8 and "waiting for room in its pool" in gang["reason"]
    assert "cpu 8 (free 4 of 64)" in gang["reason"]
    text = p.ctl("job", "status", waiting)
    assert "waiting: gang" in text.stdout and "free 4 of 64" in text.stdout


def test_job_status_names_the_launched_tasks_their_agent_has_not_started(pipeline_factory) -> None:
    """An agent that does not take its launches (frozen here; behind on its commands or cut off
    from the broker elsewhere): the host manager waits for it, and the job's status says on which
    host its tasks wait, and why, until they start."""
    import signal

    p = pipeline_factory(hosts="agent:1:cpu=4,mem_mb=1024,disk_mb=1000", agent_timeout_s=60.0)
    p.start_all()
    frozen = p.procs["agent-0"]
    frozen.send_signal(signal.SIGSTOP)
    try:
        job_id = p.submit(GOOD)
        summary = status_once_it_says(p, job_id, "not_started", timeout=30)
        assert {(r["instance"], r["host_id"]) for r in summary["not_started"]} == {(0, "agent-0"), (1, "agent-0")}
        assert summary["not_started_tasks"] == 2 and all(r["seconds"] >= 5 for r in summary["not_started"])
        text = p.ctl("job", "status", job_id).stdout
        assert "not started on agent-0: 2 tasks (instances 0, 1)" in text and "behind on its commands" in text
    finally:
        frozen.send_signal(signal.SIGCONT)
    assert p.wait_job(job_id, timeout=60) == "SUCCEEDED"
    assert "not_started" not in json.loads(p.ctl("job", "status", job_id, "--json").stdout)


def test_job_status_says_why_no_host_takes_a_job(pipeline_factory) -> None:
    p = pipeline_factory(hosts="sim:2:cpu=8,mem_mb=65536,disk_mb=100000", placement_attempts=2,
                         placement_backoff_s=0.2)
    p.start_all()
    pinned = GOOD + ("  constraint:\n    type: 1\n    labelconstraint: {kind: 2, condition: 2, "
                     "label: {key: hostname, value: nowhere}, requirement: 1}\n")
    job_id = p.submit(pinned)
    summary = status_once_it_says(p, job_id, "unplaced", timeout=30)
    assert summary["state"] == "PENDING"
    assert summary["unplaced"][0]["message"].endswith("fits on none of 2 hosts: constraint hostname=nowhere on 2")
    assert "found no host" in p.ctl("job", "status", job_id).stdout
