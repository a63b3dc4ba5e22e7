"""The Java producer of docs/tutorials/producers.md, compiled with Maven against the published
Kafka and Avro jars (jvm/examples) and run against a pipeline: the job it submits must succeed, and WatchStatus, a
Java reader of the task-status topic, must print that job's statuses."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
import yaml

from peloton.auth.tokens import issue
from peloton.config import REPO_ROOT
from peloton.runtime import now_ms
from pelotonctl.admin import create_pool
from pelotonctl.dev.jvm import LIGHT
from tests.integration.conftest import pool_yaml

pytestmark = pytest.mark.integration

EXAMPLES = REPO_ROOT / "jvm" / "examples"
JARS = REPO_ROOT / ".jars" / "examples"  # the pom puts its jar and every runtime dependency here
JAR = JARS / "java-clients.jar"
JOB_FILE = "examples/jobs/hello.yaml"


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"`{name}` is not on PATH: the Java clients' test builds with Maven 3.8 and runs on Java 17 "
                    f"(Debian: apt-get install openjdk-17-jdk-headless maven)")
    return path


@pytest.fixture(scope="module")
def classpath() -> str:
    """The clients' jar and its dependencies, built once and rebuilt only when the pom or a source changed."""
    sources = [EXAMPLES / "pom.xml", *(p for p in (EXAMPLES / "src").rglob("*") if p.is_file())]
    if not JAR.exists() or JAR.stat().st_mtime < max(p.stat().st_mtime for p in sources):
        mvn = tool("mvn")
        # From scratch: a changed pom must not leave the old versions' jars on the classpath.
        shutil.rmtree(JARS, ignore_errors=True)
        # Maven itself as a light JVM (dev/jvm.py): a build of two classes ends before C2 pays.
        result = subprocess.run([mvn, "-q", "-B", "-f", str(EXAMPLES / "pom.xml"), "package"],
                                cwd=REPO_ROOT, capture_output=True, text=True, timeout=600,
                                env={**os.environ, "MAVEN_OPTS": " ".join(LIGHT)})
        assert result.returncode == 0 and JAR.exists(), (
            f"mvn package failed with {result.returncode}:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return str(JARS / "*")


def java(classpath: str, main: str, *args: str, env: dict[str, str], timeout: float = 90) -> str:
    """Runs a class of the clients from the checkout's root (the tutorial's relative paths) and
    returns its stdout."""
    result = subprocess.run([tool("java"), *LIGHT, "-cp", classpath, main, *args], cwd=REPO_ROOT, env=env,
                            capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, (
        f"{main} failed with {result.returncode}:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result.stdout


def test_the_tutorials_java_producer_submits_a_job_that_succeeds_and_watch_status_prints_its_runs(
        classpath, pipeline_factory) -> None:
    instances = yaml.safe_load((REPO_ROOT / JOB_FILE).read_text())["instanceCount"]
    p = pipeline_factory(signed_commands=True)
    team_a = pool_yaml(cpu=8).replace("name: pool-8cpu", "name: team-a\nowningTeam: team-a")
    create_pool(p.settings, p.store, "/team-a", team_a)
    p.start_all()
    token, row = issue("team-a-bot", ["team-a"], False, now_ms())
    p.store.add_token(row)
    # The stages' own variables: the prefix puts the command on this pipeline's topic. The
    # producer's Kafka user writes job-commands and nothing else; WatchStatus reads as the watcher, which
    # reads task-status and nothing else.
    env = {**os.environ, "PELOTON_TOPIC_PREFIX": p.settings.topic_prefix, "PELOTON_KAFKA_CA": p.settings.kafka_ca,
           "PELOTON_KAFKA_USER": p.settings.kafka_user, "PELOTON_KAFKA_PASSWORD": p.settings.kafka_password}
    producer = {**env, **p.as_user("producer"), "PELOTON_COMMAND_TOKEN": token}
    out = java(classpath, "SubmitJob", p.settings.bootstrap, "/team-a", JOB_FILE, "schemas/avro/JobCommand.avsc",
               env=producer)
    [job_id] = out.split()
    assert p.wait_job(job_id) == "SUCCEEDED"
    assert p.counts(job_id) == {"SUCCEEDED": instances}
    # The same producer in a pool its team does not own, and a command without a signature: refused.
    [elsewhere] = java(classpath, "SubmitJob", p.settings.bootstrap, "/test", JOB_FILE,
                       "schemas/avro/JobCommand.avsc", env=producer).split()
    [unsigned] = java(classpath, "SubmitJob", p.settings.bootstrap, "/team-a", JOB_FILE,
                      "schemas/avro/JobCommand.avsc", env={**producer, "PELOTON_COMMAND_TOKEN": ""}).split()
    letters = {v["key"].decode(): v["reason"] for v in p.read_topic("dead-letters", expect=2)}
    assert "only administrators act there" in letters[elsewhere], letters
    assert "unsigned" in letters[unsigned], letters
    assert p.store.get_job(elsewhere) is None and p.store.get_job(unsigned) is None

    out = java(classpath, "WatchStatus", p.settings.bootstrap, "schemas/avro", env={**env, **p.as_user("watcher")})
    lines = [line.split() for line in out.splitlines()]
    mine = [fields for fields in lines if fields[0] == job_id]
    assert mine, f"WatchStatus printed nothing of job {job_id}:\n{out[-3000:]}"
    # Every instance ran and finished; each line is job id, instance, run, state.
    finished = {int(instance) for _job, instance, _run, state in mine if state == "TASK_FINISHED"}
    assert finished == set(range(instances)), out[-3000:]
    assert {state for *_rest, state in mine} >= {"TASK_RUNNING", "TASK_FINISHED"}, out[-3000:]
