"""Integration fixtures: a real Apache Kafka node (KRaft) for the session, secure as the dev
stack's (SASL_SSL, ACLs), and per test an isolated pipeline (own topic prefix, store file and
home) whose stages run as real processes, each as its component's Kafka user with only its ACLs.
Tests that stop or kill brokers start clusters of their own (`kafka_cluster`, plaintext)."""

from __future__ import annotations

import itertools
import os
import secrets
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from peloton.auth.host_keys import host_key
from peloton.config import DEV_PACE, REPO_ROOT, Settings
from peloton.model.states import JOB_TERMINAL
from peloton.runtime import kafka_access
from peloton.serde import registry
from peloton.store import open_store
from peloton.topics import Catalogue
from pelotonctl import principals
from pelotonctl.admin import create_pool, ensure_topics, submit_job
from pelotonctl.dev.kafka import KafkaCluster
from pelotonctl.dev.stack import (
    agent_hosts,
    ready_line,
    sim_agent_hosts,
    start_agent,
    start_sim_agent,
    start_stage,
    wait_for_log,
)
from tests.conftest import fresh_store_url
from tests.integration.helpers import wait_until

pytestmark = pytest.mark.integration

def pool_yaml(cpu: float) -> str:
    """A leaf pool limited to `cpu` cores, with memory and disk to spare."""
    return f"""
name: pool-{cpu:g}cpu
resources:
- {{kind: cpu, reservation: {cpu}, limit: {cpu}, share: 1}}
- {{kind: memory, reservation: 65536, limit: 65536, share: 1}}
- {{kind: disk, reservation: 100000, limit: 100000, share: 1}}
- {{kind: gpu, reservation: 0, limit: 0, share: 1}}
"""


@pytest.fixture(scope="session")
def broker(tmp_path_factory) -> dict:
    """Settings that reach the session's broker as its admin user."""
    external = os.environ.get("PELOTON_KAFKA_BOOTSTRAP")
    if external:
        yield {"bootstrap": external}
        return
    # A light JVM (dev/jvm.py), though it lives the whole session: its load is the tests'
    # pipelines asking it for records and metadata many times a second, mostly finding none, and
    # there C2 does not pay (an idle dev stack's broker: 24 % of a core light, 32-45 % full).
    cluster = KafkaCluster.create(tmp_path_factory.mktemp("kafka"), nodes=1, secure=True)
    cluster.start()
    yield cluster.client_settings()
    cluster.stop()


# The components' Kafka users, made on the session's broker by the first pipeline.
PASSWORDS = principals.new_passwords()


@pytest.fixture
def kafka_cluster(tmp_path):
    """Makes a Kafka cluster of its own for a test that stops or kills brokers (`nodes` of them),
    started; stopped after the test."""
    made: list[KafkaCluster] = []

    def make(nodes: int = 1, proxied: bool = False) -> KafkaCluster:
        cluster = KafkaCluster.create(tmp_path / f"kafka-{len(made)}", nodes=nodes, proxied=proxied)
        made.append(cluster)
        cluster.start()
        return cluster

    yield make
    for cluster in made:  # thrown away: no clean shutdown to wait for (30 s for three nodes)
        for node in cluster.nodes:
            cluster.kill(node.node_id, signal.SIGKILL)


_seq = itertools.count()


class Pipeline:
    """One isolated pipeline on the shared broker; stages are real child processes."""

    def __init__(self, kafka: str | dict, home: Path, hosts: str, pool_cpu: float = 64, **overrides):
        """kafka: a plaintext broker's bootstrap list, or settings with its admin user (then the
        stages and agents run as their own users, with only their ACLs). Jobs go to the pool
        /test, limited to `pool_cpu` cores."""
        kafka = {"bootstrap": kafka} if isinstance(kafka, str) else kafka
        overrides.setdefault("store", str(home / "peloton.db"))
        overrides.setdefault("session_timeout_ms", 2000)  # quick takeovers; not where brokers die
        overrides.setdefault("kafka_debug", os.environ.get("PELOTON_KAFKA_DEBUG", ""))  # to find a wait
        for name, value in DEV_PACE.items():  # the resource manager at the dev stack's pace, not Peloton's
            overrides.setdefault(name, value)
        self.settings = Settings(
            **kafka,
            topic_prefix=f"t{next(_seq)}-{uuid.uuid4().hex[:6]}.",
            home=home,
            hosts=hosts,
            **overrides,
        )
        self.home = home
        self.store = open_store(self.settings.store)
        self.procs: dict[str, subprocess.Popen] = {}
        ensure_topics(self.settings)
        self.passwords = PASSWORDS if self.settings.kafka_user else None
        self.report_key = secrets.token_hex(32)  # launch checks each agent's reports against its host's key
        if self.passwords:
            principals.apply(self.settings, self.passwords)
        create_pool(self.settings, self.store, "/test", pool_yaml(cpu=pool_cpu))

    def as_user(self, component: str, host: str = "") -> dict[str, str]:
        """The variables that start a process as the component's Kafka user, with its keys (launch
        the agents key, an agent its host's, one of simulated hosts the agents key)."""
        keys = {}
        if component == "launch" or host == "simagent":
            keys = {"PELOTON_AGENT_REPORT_KEY": self.report_key}
        elif component == "agent" and host:
            keys = {"PELOTON_HOST_KEY": host_key(self.report_key, host)}
        return {**principals.as_user(component, self.passwords), **keys}

    def log(self, instance: str) -> Path:
        return self.home / f"{instance}.log"

    def start(self, stage: str, instance: str | None = None, wait: bool = True,
              extra_env: dict[str, str] | None = None) -> subprocess.Popen:
        instance = instance or f"{stage}-{len([k for k in self.procs if k.startswith(stage)])}"
        proc = start_stage(stage, self.settings, self.log(instance), instance_id=instance,
                           extra_env={**self.as_user(stage), **(extra_env or {})})
        self.procs[instance] = proc
        if wait:
            wait_for_log(self.log(instance), "assigned", 60, proc)
        return proc

    def start_agent(self, host_id: str, *options: str, wait: bool = True,
                    extra_env: dict[str, str] | None = None) -> subprocess.Popen:
        """The agent of a host of the inventory's `agent:` groups, as a process of its own."""
        [host] = [h for h in agent_hosts(self.settings) if h.host_id == host_id]
        log = self.log(host_id)
        starts = log.read_text().count(" up: ") if log.exists() else 0
        proc = start_agent(host, self.settings, log, *options,
                           extra_env={**self.as_user("agent", host_id), **(extra_env or {})})
        self.procs[host_id] = proc
        if wait:  # this start's line, not an earlier one of the same host
            self.wait_for(f"agent {host_id} up",
                          lambda: proc.poll() is None and log.read_text().count(" up: ") > starts, 60)
        return proc

    def start_all(self, instances: int = 1) -> None:
        for stage in ("admit", "entitle", "place", "launch"):
            for _ in range(instances):
                self.start(stage, wait=False)
        for host in agent_hosts(self.settings):
            self.start_agent(host.host_id, wait=False)
        simulated = sim_agent_hosts(self.settings)
        if simulated:
            self.procs["agent-simagent"] = start_sim_agent(simulated, self.settings, self.log("agent-simagent"),
                                                           extra_env=self.as_user("agent", "simagent"))
        for instance, proc in self.procs.items():
            wait_for_log(self.log(instance), ready_line(instance), 60, proc)

    def ctl(self, *args: str, timeout: float = 60,
            extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        """pelotonctl against this pipeline, as a separate process."""
        env = {**os.environ, **self.settings.env(), "COLUMNS": "200", **(extra_env or {})}
        return subprocess.run([sys.executable, "-m", "pelotonctl", *args], env=env, capture_output=True, text=True,
                              timeout=timeout, cwd=str(REPO_ROOT))

    def submit(self, text: str, pool: str = "/test") -> str:
        return submit_job(self.settings, self.store, pool, text)

    def wait_job(self, job_id: str, timeout: float = 90) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            job = self.store.get_job(job_id)
            if job is not None and job.state in JOB_TERMINAL:
                return job.state
            time.sleep(0.1)
        job = self.store.get_job(job_id)
        raise AssertionError(f"job {job_id} is {job.state if job else 'not stored'} after {timeout}s; "
                             f"tasks {self.store.task_state_counts([job_id])}; logs in {self.home}{self.last_words()}")

    def counts(self, job_id: str) -> dict[str, int]:
        """The job's tasks by state."""
        return self.store.task_state_counts([job_id])[job_id]

    def wait_for(self, what: str, check, timeout: float) -> None:
        """Poll `check` until it holds; fail naming `what` and where the logs are."""
        wait_until(what, check, timeout, 0.2, lambda: f"; logs in {self.home}{self.last_words()}")

    def last_words(self, lines: int = 8) -> str:
        """Each process's state and the last lines of its log that say something, for a failure's
        message: pytest keeps only its last few temporary folders, and CI shows only the console.
        Of the periodic `alive:` lines only the last goes in, and none of librdkafka's (`%3|...`)."""
        out = []
        for name, proc in self.procs.items():
            code = proc.poll()
            try:
                every = self.log(name).read_text(errors="replace").splitlines()
            except OSError:
                every = ["(no log)"]
            said = [i for i, line in enumerate(every) if " alive: " not in line and not line.startswith("%")]
            alive = [i for i, line in enumerate(every) if " alive: " in line][-1:]
            tail = [every[i] for i in sorted(said[-lines:] + alive)]
            out.append(f"--- {name} (pid {proc.pid}, {'running' if code is None else f'exited {code}'}):")
            out.extend(f"    {line[:300]}" for line in tail)
        return "".join(f"\n{line}" for line in out)

    def read_topic(self, topic: str, expect: int, timeout: float = 20) -> list[dict]:
        """Decoded values of a topic, waiting until at least `expect` arrived."""
        spec = Catalogue(self.settings.topic_prefix)[topic]
        consumer = Consumer({**kafka_access(self.settings), "group.id": f"reader-{uuid.uuid4().hex}",
                             "enable.auto.commit": False})
        consumer.assign([TopicPartition(spec.name, p, 0) for p in range(spec.partitions)])
        values: list[dict] = []
        deadline = time.monotonic() + timeout
        try:
            while len(values) < expect and time.monotonic() < deadline:
                for m in consumer.consume(100, 0.5):
                    if m.error() is None:
                        values.append(registry().decode(m.value())[1])
        finally:
            consumer.close()
        return values

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.store.close()


@pytest.fixture
def pipeline_factory(broker, tmp_path, request):
    """Makes isolated pipelines; `store_kind="postgres"` puts one on a fresh PostgreSQL database."""
    made: list[Pipeline] = []

    def make(hosts: str = "local:2:cpu=8,mem_mb=16384,disk_mb=100000", store_kind: str = "sqlite",
             **overrides) -> Pipeline:
        home = tmp_path / f"p{len(made)}"
        home.mkdir(parents=True, exist_ok=True)
        overrides.setdefault("store", fresh_store_url(request, store_kind, home))
        p = Pipeline(broker, home, hosts, **overrides)
        made.append(p)
        return p

    yield make
    for p in made:
        p.stop()
