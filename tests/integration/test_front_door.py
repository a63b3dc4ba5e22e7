"""The one front door on the dev stack itself, as issue 22's "done when" reads: a request without a
token gets 401; alice (team-a) runs a job in /a to SUCCEEDED through pelotonctl, is refused in
/b with exit 6 and nothing made, bob cannot stop her job, and the audit topic holds those
decisions; a Kafka client without credentials writes nothing, and an agent's credentials cannot
write job commands."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import replace

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from peloton.config import REPO_ROOT, Settings
from peloton.runtime import kafka_access
from peloton.serde import registry
from peloton.topics import Catalogue

pytestmark = pytest.mark.integration

POOL = """name: {name}
owningTeam: {team}
resources:
- {{kind: cpu, reservation: 2, limit: 2, share: 1}}
- {{kind: memory, reservation: 1024, limit: 1024, share: 1}}
- {{kind: disk, reservation: 1000, limit: 1000, share: 1}}
- {{kind: gpu, reservation: 0, limit: 0, share: 1}}
"""
JOB = """name: hello
instanceCount: 2
defaultConfig:
  resource: {cpuLimit: 0.5, memLimitMb: 64, diskLimitMb: 10}
  command: {value: "echo hello"}
"""


def produce(config: dict, topic: str, key: bytes = b"k", value: bytes = b"v") -> str:
    results, errors = [], []
    producer = Producer({**config, "message.timeout.ms": 6000, "log_level": 0,
                         "error_cb": lambda e: errors.append(e.str())})
    producer.produce(topic, key=key, value=value, on_delivery=lambda err, _m: results.append(err))
    producer.flush(8)
    return "delivered" if results and results[0] is None else str(results[0] if results else errors[:1])


@pytest.mark.long
def test_the_front_door_of_the_dev_stack(tmp_path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PELOTON_")}
    env.update(PELOTON_HOME=str(tmp_path), PELOTON_SESSION_TIMEOUT_MS="2000")

    def ctl(*args: str, token: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "pelotonctl", *args], cwd=REPO_ROOT, capture_output=True,
                              text=True, timeout=180, env={**env, **({"PELOTON_TOKEN": token} if token else {})})

    up = ctl("dev", "up", "--hosts", "agent:1:cpu=4,mem_mb=4096,disk_mb=10000")
    try:
        assert up.returncode == 0, up.stderr
        state = json.loads((tmp_path / "dev" / "stack.json").read_text())
        try:
            urllib.request.urlopen(f"{state['api_url']}/v1/jobs", timeout=10)
            raise AssertionError("the API answered a request without a token")
        except urllib.error.HTTPError as exc:
            assert exc.code == 401
        for name, team in (("a", "team-a"), ("b", "team-b")):
            (tmp_path / f"{name}.yaml").write_text(POOL.format(name=name, team=team))
            assert ctl("respool", "create", f"/{name}", str(tmp_path / f"{name}.yaml")).returncode == 0
        alice = ctl("auth", "issue", "--user", "alice", "--group", "team-a").stdout.strip()
        bob = ctl("auth", "issue", "--user", "bob", "--group", "team-b").stdout.strip()
        (tmp_path / "hello.yaml").write_text(JOB)

        ran = ctl("job", "create", "/a", str(tmp_path / "hello.yaml"), "--wait", "--json", token=alice)
        assert ran.returncode == 0, ran.stderr
        job_id = json.loads(ran.stdout)["job_id"]
        assert json.loads(ctl("job", "get", job_id, "--json", token=alice).stdout)["runtime"]["state"] == "SUCCEEDED"
        refused = ctl("job", "create", "/b", str(tmp_path / "hello.yaml"), token=alice)
        assert refused.returncode == 6 and "alice is in none of team-b" in refused.stderr
        assert json.loads(ctl("job", "query", "--pool", "/b", "--json").stdout) == []  # nothing made
        stop = ctl("job", "stop", job_id, token=bob)
        assert stop.returncode == 6 and "bob is in none of team-a" in stop.stderr

        admin = Settings(bootstrap=state["bootstrap"], kafka_user=state["kafka_user"],
                         kafka_password=state["kafka_password"], kafka_ca=state["kafka_ca"])
        topics = Catalogue()

        # What operators watch, through the API: lag for any user, dead letters and the cluster's
        # instances for admins. A command its producer did not sign is a dead letter; an admin
        # replays it, and the API signs it for them.
        lag = ctl("lag", "--json", "--interval", "0.2", token=alice)
        assert lag.returncode == 0, lag.stderr
        assert {g["stage"] for g in json.loads(lag.stdout)["groups"]} == {"admit", "entitle", "place", "launch"}
        unsigned = str(uuid.uuid4())
        command = registry().encode("peloton.JobCommand", {
            "command_id": uuid.uuid4().hex, "kind": "CREATE", "job_id": unsigned, "pool": "/a", "config": JOB,
            "requested_by": "alice", "timestamp_ms": int(time.time() * 1000)})
        producer = kafka_access(replace(admin, kafka_user="producer", kafka_password=state["kafka_users"]["producer"]))
        assert produce(producer, topics["job-commands"].name, unsigned.encode(), command) == "delivered"
        deadline = time.monotonic() + 30
        while not (letters := json.loads(ctl("dead-letters", "list", "--json").stdout)) and time.monotonic() < deadline:
            time.sleep(0.5)
        [letter] = letters
        assert letter["stage"] == "admit" and "unsigned" in letter["reason"], letter
        assert ctl("dead-letters", "list", token=alice).returncode == 6
        shown = json.loads(ctl("dead-letters", "show", str(letter["number"]), "--json").stdout)
        assert shown["original"]["value"]["job_id"] == unsigned
        replayed = ctl("dead-letters", "replay", str(letter["number"]))
        assert replayed.returncode == 0, replayed.stderr
        while (got := json.loads(ctl("job", "get", unsigned, "--json").stdout or "null")) is None or \
                got["runtime"]["state"] != "SUCCEEDED":
            assert time.monotonic() < deadline + 60, got
            time.sleep(0.5)
        no_zookeeper = ctl("cluster", "status")
        assert no_zookeeper.returncode == 5 and "PELOTON_ZOOKEEPER" in no_zookeeper.stderr, no_zookeeper.stderr

        decisions = [(e["user"], e["action"], e["object"], e["allowed"]) for e in read_all(admin, "audit")]
        assert ("", "job.read", "jobs", False) in decisions  # the request without a token
        assert ("alice", "job.create", "/a", True) in decisions
        assert ("alice", "job.create", "/b", False) in decisions
        assert ("bob", "job.stop", job_id, False) in decisions
        assert ("alice", "lag.read", "groups", True) in decisions
        assert ("alice", "dead_letter.read", "dead-letters", False) in decisions
        assert any(a == "dead_letter.replay" and ok for _u, a, _o, ok in decisions)

        for topic in ("job-commands", "agent-commands"):
            assert produce({"bootstrap.servers": state["bootstrap"]}, topics[topic].name) != "delivered"
        agent = kafka_access(replace(admin, kafka_user="agent", kafka_password=state["kafka_users"]["agent"]))
        assert "TOPIC_AUTHORIZATION_FAILED" in produce(agent, topics["job-commands"].name)
    finally:
        ctl("dev", "down")


def read_all(settings: Settings, topic: str) -> list[dict]:
    """Every record of a topic, read to its end as settings' user."""
    spec = Catalogue(settings.topic_prefix)[topic]
    consumer = Consumer({**kafka_access(settings), "group.id": f"test-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "enable.partition.eof": True, "log_level": 0})
    consumer.assign([TopicPartition(spec.name, p, 0) for p in range(spec.partitions)])
    serde, values, ended = registry(), [], set()
    try:
        while len(ended) < spec.partitions:
            for m in consumer.consume(500, 2.0):
                if m.error() is not None:
                    ended.add(m.partition())
                    continue
                values.append(serde.decode(m.value())[1])
    finally:
        consumer.close()
    return values
