"""Peloton's own API over gRPC, as Peloton's clients use it, against a real `pelotonctl api`
process in front of a real pipeline with signed commands: job configs made from our example
files by json_format.ParseDict, jobs waited to SUCCEEDED through JobManager.Get, tasks listed,
instances stopped by half-open ranges; every call with a bearer token in its metadata."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable
from typing import Any

import grpc
import pytest
import yaml
from google.protobuf import json_format

from peloton.api.v0 import peloton_pb2
from peloton.api.v0.job import job_pb2, job_pb2_grpc
from peloton.api.v0.task import task_pb2, task_pb2_grpc
from peloton.config import REPO_ROOT
from pelotonctl.admin import create_pool
from pelotonctl.dev.jvm import LIGHT
from pelotonctl.dev.stack import free_port, start_api, wait_for_port
from tests.integration.conftest import Pipeline

pytestmark = pytest.mark.integration

TEAM_POOL = """name: a
owningTeam: team-a
resources:
- {kind: cpu, reservation: 8, limit: 8, share: 1}
- {kind: memory, reservation: 8192, limit: 8192, share: 1}
- {kind: disk, reservation: 10000, limit: 10000, share: 1}
- {kind: gpu, reservation: 0, limit: 0, share: 1}
"""
TERMINAL = (job_pb2.SUCCEEDED, job_pb2.FAILED, job_pb2.KILLED)


class Cluster:
    """A pipeline with the API serving gRPC, and tokens: alice (team-a), bob (team-b), root (admin), and
    the API's own (api, the admin token it signs its commands with)."""

    def __init__(self, p: Pipeline, address: str, tokens: dict[str, str]) -> None:
        self.p, self.address, self.tokens = p, address, tokens
        self.channel = grpc.insecure_channel(address)

    def as_user(self, user: str) -> list[tuple[str, str]]:
        # What Peloton's Python client sends (YARPC's headers), with our bearer token beside them.
        return [("authorization", f"Bearer {self.tokens[user]}"), ("rpc-caller", "peloton-client"),
                ("rpc-service", "peloton-jobmgr"), ("rpc-encoding", "proto")]

    def until(self, what: str, read: Callable[[], Any], done: Callable[[Any], bool], timeout: float = 90) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = read()
            if done(value):
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"{what} within {timeout}s: last {value}; logs in {self.p.home}"
                                     f"{self.p.last_words()}")
            time.sleep(0.3)


@pytest.fixture(scope="module")
def cluster(broker, tmp_path_factory):
    home = tmp_path_factory.mktemp("grpc")
    p = Pipeline(broker, home, "local:2:cpu=8,mem_mb=16384,disk_mb=100000", signed_commands=True)
    try:
        create_pool(p.settings, p.store, "/a", TEAM_POOL)
        p.start_all()
        tokens = {"root": p.ctl("auth", "issue", "--user", "root", "--admin").stdout.strip(),
                  "alice": p.ctl("auth", "issue", "--user", "alice", "--group", "team-a").stdout.strip(),
                  "bob": p.ctl("auth", "issue", "--user", "bob", "--group", "team-b").stdout.strip()}
        api_token = p.ctl("auth", "issue", "--user", "api", "--admin").stdout.strip()
        port, grpc_port = free_port(), free_port()
        p.procs["api-0"] = start_api(p.settings, p.log("api-0"), port, grpc_port,
                                     extra_env={**p.as_user("api"), "PELOTON_COMMAND_TOKEN": api_token})
        wait_for_port("127.0.0.1", grpc_port, 60)
        tokens["api"] = api_token
        yield Cluster(p, f"127.0.0.1:{grpc_port}", tokens)
    finally:
        p.stop()


def example(name: str) -> job_pb2.JobConfig:
    """One of our example job files as Peloton's Python clients load theirs."""
    return json_format.ParseDict(yaml.safe_load((REPO_ROOT / "examples" / "jobs" / name).read_text()),
                                 job_pb2.JobConfig())


def test_a_batch_job_from_an_example_file_runs_to_succeeded_through_v0(cluster) -> None:
    jobs = job_pb2_grpc.JobManagerStub(cluster.channel)
    tasks = task_pb2_grpc.TaskManagerStub(cluster.channel)
    config = example("hello.yaml")
    config.respoolID.value = "/a"
    made = jobs.Create(job_pb2.CreateRequest(config=config), metadata=cluster.as_user("alice"))
    assert not made.HasField("error"), made
    job = peloton_pb2.JobID(value=made.jobId.value)
    got = cluster.until("hello SUCCEEDED", lambda: jobs.Get(job_pb2.GetRequest(id=job),
                                                            metadata=cluster.as_user("alice")),
                        lambda r: r.jobInfo.runtime.state in TERMINAL)
    assert job_pb2.JobState.Name(got.jobInfo.runtime.state) == "SUCCEEDED"
    assert dict(got.jobInfo.runtime.taskStats) == {"SUCCEEDED": 6}
    assert (got.jobInfo.config.name, got.jobInfo.config.respoolID.value) == ("hello", "/a")
    listed = tasks.List(task_pb2.ListRequest(jobId=job), metadata=cluster.as_user("alice")).result.value
    assert sorted(listed) == list(range(6))
    assert {task_pb2.TaskState.Name(t.runtime.state) for t in listed.values()} == {"SUCCEEDED"}
    assert all(t.runtime.host and t.runtime.mesosTaskId.value.startswith(made.jobId.value) for t in listed.values())
    with pytest.raises(grpc.RpcError) as refused:
        jobs.Get(job_pb2.GetRequest(id=job), metadata=cluster.as_user("bob"))
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED and "team-a" in refused.value.details()


def test_instances_stop_by_half_open_ranges_then_the_whole_job(cluster) -> None:
    jobs = job_pb2_grpc.JobManagerStub(cluster.channel)
    tasks = task_pb2_grpc.TaskManagerStub(cluster.channel)
    me = cluster.as_user("alice")
    config = example("hello.yaml")
    config.respoolID.value, config.name, config.instanceCount = "/a", "sleepers", 4
    config.defaultConfig.command.value = "sleep 600"
    job = peloton_pb2.JobID(value=jobs.Create(job_pb2.CreateRequest(config=config), metadata=me).jobId.value)

    def states() -> dict[int, str]:
        listed = tasks.List(task_pb2.ListRequest(jobId=job), metadata=me).result.value
        return {i: task_pb2.TaskState.Name(t.runtime.state) for i, t in listed.items()}
    cluster.until("four sleepers RUNNING", states, lambda s: list(s.values()) == ["RUNNING"] * 4)
    stopped = tasks.Stop(task_pb2.StopRequest(jobId=job, ranges=[task_pb2.InstanceRange(**{"from": 1, "to": 3})]),
                         metadata=me)
    assert sorted(stopped.stoppedInstanceIds) == [1, 2]
    cluster.until("instances 1 and 2 KILLED", states,
                  lambda s: s == {0: "RUNNING", 1: "KILLED", 2: "KILLED", 3: "RUNNING"})
    jobs.Stop(job_pb2.StopRequest(id=job), metadata=me)
    got = cluster.until("the job KILLED", lambda: jobs.Get(job_pb2.GetRequest(id=job), metadata=me),
                        lambda r: r.jobInfo.runtime.state in TERMINAL)
    assert job_pb2.JobState.Name(got.jobInfo.runtime.state) == "KILLED"
    assert not jobs.Delete(job_pb2.DeleteRequest(id=job), metadata=me).HasField("error")
    gone = jobs.Get(job_pb2.GetRequest(id=job), metadata=me)
    assert gone.error.HasField("notFound"), gone


def test_grpcurl_finds_every_service_through_reflection_and_calls_one(cluster) -> None:
    # grpcurl knows nothing of our .proto files: it reads them from the server.
    built = subprocess.run(["make", "-s", "tools"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr
    grpcurl = str(REPO_ROOT / ".tools" / "grpcurl")
    listed = subprocess.run([grpcurl, "-plaintext", cluster.address, "list"], capture_output=True, text=True,
                            timeout=60)
    assert listed.returncode == 0, listed.stderr
    services = set(listed.stdout.split())
    assert {"peloton.api.v0.job.JobManager", "peloton.api.v0.task.TaskManager",
            "peloton.api.v0.respool.ResourceManager", "peloton.api.v1alpha.job.stateless.svc.JobService",
            "peloton.api.v1alpha.pod.svc.PodService", "grpc.health.v1.Health"} <= services, listed.stdout
    health = subprocess.run([grpcurl, "-plaintext", "-d", "{}", cluster.address, "grpc.health.v1.Health/Check"],
                            capture_output=True, text=True, timeout=60)
    assert health.returncode == 0 and '"SERVING"' in health.stdout, health.stderr
    asked = subprocess.run([grpcurl, "-plaintext", "-H", f"authorization: Bearer {cluster.tokens['alice']}",
                            "-d", '{"id": {"value": "no-such-job"}}', cluster.address,
                            "peloton.api.v0.job.JobManager/Get"], capture_output=True, text=True, timeout=60)
    assert asked.returncode == 0 and json.loads(asked.stdout)["error"]["notFound"]["message"] == "no job no-such-job"
    anonymous = subprocess.run([grpcurl, "-plaintext", "-d", '{"id": {"value": "x"}}', cluster.address,
                                "peloton.api.v0.job.JobManager/Get"], capture_output=True, text=True, timeout=60)
    assert anonymous.returncode != 0 and "Unauthenticated" in anonymous.stderr and "no token" in anonymous.stderr


def test_a_java_client_built_from_our_proto_files_creates_a_job_and_watches_it_succeed(cluster) -> None:
    # grpc-java and protoc through Maven, from proto/: a stock Java client of Peloton's v0 API.
    pom = REPO_ROOT / "jvm" / "grpc-client" / "pom.xml"
    jar = REPO_ROOT / "jvm" / "grpc-client" / "target" / "peloton-grpc-client.jar"
    built = subprocess.run(["mvn", "-q", "-B", "-f", str(pom), "package"], cwd=REPO_ROOT, capture_output=True,
                           text=True, timeout=900, env={**os.environ, "MAVEN_OPTS": " ".join(LIGHT)})
    assert built.returncode == 0 and jar.exists(), built.stdout[-3000:] + built.stderr[-3000:]
    ran = subprocess.run(["java", *LIGHT, "-jar", str(jar), "--target", cluster.address, "--token",
                          cluster.tokens["alice"], "--respool", "/a", "--name", "from-java", "--command", "echo hi",
                          "--instances", "2", "--timeout", "120"], capture_output=True, text=True, timeout=180)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    lines = ran.stdout.splitlines()
    assert lines[0] == "respool /a" and lines[1].startswith("job ") and lines[-1] == "state SUCCEEDED", ran.stdout
    job_id = lines[1].split()[1]
    assert cluster.p.store.get_job(job_id).name == "from-java"


SERVICE_SPEC = {
    "name": "web", "owner": "alice", "instanceCount": 3, "sla": {"maximumUnavailableInstances": 1},
    "defaultSpec": {"containers": [{
        "resource": {"cpuLimit": 0.1, "memLimitMb": 32, "diskLimitMb": 10},
        "entrypoint": {"value": "/bin/sh", "arguments": ["-c", "echo serving v1; sleep 600"]}}]},
}


def test_a_stateless_job_is_replaced_by_a_rolling_update_paused_resumed_and_aborted(cluster) -> None:
    from peloton.api.v1alpha import peloton_pb2 as v1
    from peloton.api.v1alpha.job.stateless import stateless_pb2
    from peloton.api.v1alpha.job.stateless.svc import stateless_svc_pb2 as svc
    from peloton.api.v1alpha.job.stateless.svc import stateless_svc_pb2_grpc as svc_grpc
    from peloton.api.v1alpha.pod import pod_pb2

    jobs = svc_grpc.JobServiceStub(cluster.channel)
    me = cluster.as_user("alice")
    spec = json_format.ParseDict(SERVICE_SPEC, stateless_pb2.JobSpec())
    spec.respool_id.value = "/a"
    made = jobs.CreateJob(svc.CreateJobRequest(spec=spec), metadata=me)
    job = v1.JobID(value=made.job_id.value)

    def pods() -> dict[str, str]:
        listed = [p for answer in jobs.ListPods(svc.ListPodsRequest(job_id=job), metadata=me) for p in answer.pods]
        return {p.pod_name.value: pod_pb2.PodState.Name(p.status.state) for p in listed}
    cluster.until("three pods RUNNING", pods, lambda s: len(s) == 3 and set(s.values()) == {"POD_STATE_RUNNING"})
    status = jobs.GetJob(svc.GetJobRequest(job_id=job), metadata=me).job_info.status
    assert stateless_pb2.JobState.Name(status.state) == "JOB_STATE_RUNNING"

    # A stale version is refused before anything is sent; the current one starts a paused update.
    new = json_format.ParseDict(SERVICE_SPEC, stateless_pb2.JobSpec())
    new.default_spec.containers[0].entrypoint.arguments[1] = "echo serving v2; sleep 600"
    with pytest.raises(grpc.RpcError) as stale:
        jobs.ReplaceJob(svc.ReplaceJobRequest(job_id=job, version=v1.EntityVersion(value="99-0-0"), spec=new),
                        metadata=me)
    assert stale.value.code() == grpc.StatusCode.ABORTED
    replaced = jobs.ReplaceJob(svc.ReplaceJobRequest(
        job_id=job, version=status.version, spec=new,
        update_spec=stateless_pb2.UpdateSpec(batch_size=1, start_paused=True)), metadata=me)
    assert replaced.version.value != status.version.value

    def workflow() -> str:
        info = jobs.GetJob(svc.GetJobRequest(job_id=job), metadata=me)
        return stateless_pb2.WorkflowState.Name(info.workflow_info.status.state)
    cluster.until("the update PAUSED", workflow, lambda s: s == "WORKFLOW_STATE_PAUSED")
    version = jobs.GetJob(svc.GetJobRequest(job_id=job), metadata=me).job_info.status.version
    jobs.ResumeJobWorkflow(svc.ResumeJobWorkflowRequest(job_id=job, version=version), metadata=me)
    cluster.until("the update rolling", workflow, lambda s: s == "WORKFLOW_STATE_ROLLING_FORWARD")
    version = jobs.GetJob(svc.GetJobRequest(job_id=job), metadata=me).job_info.status.version
    jobs.AbortJobWorkflow(svc.AbortJobWorkflowRequest(job_id=job, version=version), metadata=me)
    cluster.until("the update ABORTED", workflow, lambda s: s == "WORKFLOW_STATE_ABORTED")
    version = jobs.GetJob(svc.GetJobRequest(job_id=job), metadata=me).job_info.status.version
    jobs.StopJob(svc.StopJobRequest(job_id=job, version=version), metadata=me)
    cluster.until("every pod KILLED", pods, lambda s: set(s.values()) == {"POD_STATE_KILLED"})


def test_an_admin_creates_a_pool_that_a_team_looks_up_and_submits_to(cluster) -> None:
    from peloton.api.v0.respool import respool_pb2, respool_pb2_grpc

    pools = respool_pb2_grpc.ResourceManagerStub(cluster.channel)
    config = respool_pb2.ResourcePoolConfig(
        name="batch", owningTeam="team-a", parent=peloton_pb2.ResourcePoolID(value="/a"),
        resources=[respool_pb2.ResourceConfig(kind=kind, reservation=amount, limit=amount, share=1)
                   for kind, amount in (("cpu", 2), ("memory", 1024), ("disk", 1000), ("gpu", 0))])
    with pytest.raises(grpc.RpcError) as refused:
        pools.CreateResourcePool(respool_pb2.CreateRequest(config=config), metadata=cluster.as_user("alice"))
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    made = pools.CreateResourcePool(respool_pb2.CreateRequest(config=config), metadata=cluster.as_user("root"))
    assert not made.HasField("error") and made.result.value == "/a/batch", made
    found = pools.LookupResourcePoolID(respool_pb2.LookupRequest(path=respool_pb2.ResourcePoolPath(value="/a/batch")),
                                       metadata=cluster.as_user("alice"))
    assert found.id.value == "/a/batch"
    job_config = example("hello.yaml")
    job_config.respoolID.CopyFrom(found.id)
    jobs = job_pb2_grpc.JobManagerStub(cluster.channel)
    created = jobs.Create(job_pb2.CreateRequest(config=job_config), metadata=cluster.as_user("alice"))
    assert not created.HasField("error"), created
    assert cluster.p.store.get_job(created.jobId.value).pool == "/a/batch"


def test_a_host_drained_and_brought_back_through_host_service(cluster) -> None:
    from peloton.api.v0.host import host_pb2
    from peloton.api.v0.host.svc import host_svc_pb2 as svc
    from peloton.api.v0.host.svc import host_svc_pb2_grpc as svc_grpc

    hosts = svc_grpc.HostServiceStub(cluster.channel)
    root = cluster.as_user("root")

    def states() -> dict[str, str]:
        answer = hosts.QueryHosts(svc.QueryHostsRequest(), metadata=root)
        return {h.hostname: host_pb2.HostState.Name(h.state) for h in answer.host_infos}
    assert set(cluster.until("both hosts UP", states, lambda s: len(s) == 2).values()) == {"HOST_STATE_UP"}
    with pytest.raises(grpc.RpcError) as refused:
        hosts.StartMaintenance(svc.StartMaintenanceRequest(hostnames=["local-1"]), metadata=cluster.as_user("alice"))
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    hosts.StartMaintenance(svc.StartMaintenanceRequest(hostnames=["local-1"]), metadata=root)
    # Drained of its runs, then DOWN for its maintenance, as Peloton takes a host down.
    cluster.until("local-1 DOWN", states, lambda s: s.get("local-1") == "HOST_STATE_DOWN")
    hosts.CompleteMaintenance(svc.CompleteMaintenanceRequest(hostnames=["local-1"]), metadata=root)
    cluster.until("local-1 UP again", states, lambda s: s.get("local-1") == "HOST_STATE_UP")


def test_with_a_certificate_both_ports_speak_tls(cluster, tmp_path) -> None:
    import ssl
    import urllib.request

    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from pelotonctl.dev.tls import make_certificates

    ca, pem = make_certificates(tmp_path / "tls")
    port, grpc_port = free_port(), free_port()
    p = cluster.p
    p.procs["api-tls"] = start_api(p.settings, p.log("api-tls"), port, grpc_port,
                                   extra_env={**p.as_user("api"), "PELOTON_COMMAND_TOKEN": cluster.tokens["api"],
                                              "PELOTON_API_TLS_CERT": str(pem), "PELOTON_API_TLS_KEY": str(pem)})
    wait_for_port("127.0.0.1", port, 60)
    trusted = ssl.create_default_context(cafile=str(ca))
    with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", context=trusted, timeout=10) as answer:
        assert json.loads(answer.read()) == {"status": "ok"}
    channel = grpc.secure_channel(f"127.0.0.1:{grpc_port}", grpc.ssl_channel_credentials(ca.read_bytes()))
    checked = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=20)
    assert checked.status == health_pb2.HealthCheckResponse.SERVING
    jobs = job_pb2_grpc.JobManagerStub(channel)
    missing = jobs.Get(job_pb2.GetRequest(id=peloton_pb2.JobID(value="nope")), metadata=cluster.as_user("alice"))
    assert missing.error.HasField("notFound")
    plain = health_pb2_grpc.HealthStub(grpc.insecure_channel(f"127.0.0.1:{grpc_port}"))
    with pytest.raises(grpc.RpcError) as refused:
        plain.Check(health_pb2.HealthCheckRequest(), timeout=5)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    p.procs.pop("api-tls").terminate()
