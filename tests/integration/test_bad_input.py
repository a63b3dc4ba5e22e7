"""Bad input loses nothing and stops nothing: dead letters for stages, clear errors for the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest
from confluent_kafka import Producer

from peloton.admin import emitter
from peloton.runtime import now_ms
from peloton.topics import Catalogue

pytestmark = pytest.mark.integration

GOOD = """
name: good
instancecount: 2
defaultconfig:
  resource: {cpulimit: 1, memlimitmb: 32}
  command: {shell: true, value: 'exit 0'}
"""


def command(job_id: str, config: str | None, pool: str = "/test", kind: str = "CREATE") -> dict:
    return {"command_id": uuid.uuid4().hex, "kind": kind, "job_id": job_id, "pool": pool, "config": config,
            "requested_by": "test", "timestamp_ms": now_ms()}


def test_malformed_messages_land_on_the_dead_letter_topic_and_the_stage_goes_on(pipeline_factory) -> None:
    p = pipeline_factory()
    p.start_all()
    topic = Catalogue(p.settings.topic_prefix)["job-commands"].name
    raw = Producer({"bootstrap.servers": p.settings.bootstrap})
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


def pelotonctl(p, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, **p.settings.env()}
    return subprocess.run([sys.executable, "-m", "peloton.cli", *args], env=env, capture_output=True, text=True,
                          timeout=60)


def test_an_invalid_job_file_gets_a_clear_error_and_nothing_is_stored_or_sent(pipeline_factory, tmp_path) -> None:
    p = pipeline_factory()
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\ninstancecount: -3\ndefaultconfig:\n  resource: {cpulimit: lots}\n")
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: [unclosed\n")
    good = tmp_path / "good.yaml"
    good.write_text(GOOD)

    for args in (("job", "validate", str(bad)), ("job", "create", "/test", str(bad))):
        result = pelotonctl(p, *args)
        assert result.returncode == 2, result.stderr
        assert "instancecount" in result.stderr and "defaultconfig.resource.cpulimit" in result.stderr
        assert "Traceback" not in result.stderr
    result = pelotonctl(p, "job", "create", "/test", str(broken))
    assert result.returncode == 2 and "invalid YAML" in result.stderr and "line" in result.stderr
    result = pelotonctl(p, "job", "create", "/nowhere", str(good))
    assert result.returncode == 2 and "unknown resource pool '/nowhere'" in result.stderr
    result = pelotonctl(p, "job", "validate", str(good), "--json")
    assert result.returncode == 0 and json.loads(result.stdout)["instances"] == 2

    assert p.store.list_jobs() == []
    assert p.read_topic("job-commands", expect=1, timeout=2) == []


def test_topics_apply_is_idempotent(pipeline_factory) -> None:
    p = pipeline_factory()
    result = pelotonctl(p, "topics", "apply", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert len(report) == len(list(Catalogue())) and {r["status"] for r in report} == {"ok"}
