"""docker/compose.yaml as an operator runs it: `make images` builds the image with podman (its base
made here, no registry reached), `pelotonctl deploy env` makes the cluster's secrets, and
podman-compose starts the whole cluster (three Kafka nodes with SASL_SSL and ACLs, PostgreSQL,
ZooKeeper, two instances of each stage, two agents, the API, the dashboard, Prometheus); a job
created through the API with the token setup issued runs to SUCCEEDED on the agents, and
Prometheus scrapes every process.

This machine's podman refuses containers its default rlimits (`error setting rlimit type 7`), so
the test runs them with lowered ones through a containers.conf of its own (CONTAINERS_CONF); the
compose file itself asks for none."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.request
import uuid
from pathlib import Path

import pytest

from peloton.config import REPO_ROOT
from pelotonctl.dev.processes import free_port
from tests.integration.helpers import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

COMPOSE = REPO_ROOT / "docker" / "compose.yaml"
PODMAN_COMPOSE = Path(sys.executable).with_name("podman-compose")


def test_the_compose_cluster_runs_a_job_created_through_the_api(tmp_path: Path) -> None:
    built = subprocess.run(["make", "images"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=1200)
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    assert shutil.which("podman") and PODMAN_COMPOSE.exists()
    ctl = [sys.executable, "-m", "pelotonctl"]
    secrets = tmp_path / "peloton.env"
    made = subprocess.run([*ctl, "deploy", "env", "--output", str(secrets)], capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    assert secrets.stat().st_mode & 0o077 == 0  # the cluster's secrets are the operator's alone
    conf = tmp_path / "containers.conf"
    conf.write_text('[containers]\ndefault_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]\n')
    ports = {name: free_port() for name in ("API_PORT", "GRPC_PORT", "DASHBOARD_PORT", "PROMETHEUS_PORT")}
    project = f"pt{uuid.uuid4().hex[:6]}"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PELOTON_")}, "CONTAINERS_CONF": str(conf),
           **{k: str(v) for k, v in ports.items()}}

    def compose(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        return subprocess.run([str(PODMAN_COMPOSE), "-f", str(COMPOSE), "--env-file", str(secrets), "-p", project,
                               *args], cwd=COMPOSE.parent, env=env, capture_output=True, text=True, timeout=timeout)

    up = compose("up", "-d")
    try:
        assert up.returncode == 0, up.stdout[-2000:] + up.stderr[-2000:]
        api = f"http://127.0.0.1:{ports['API_PORT']}"
        wait_for("the API to answer", lambda: _answers(f"{api}/healthz"), 300)
        token = wait_for("setup's admin token", lambda: subprocess.run(
            ["podman", "exec", f"{project}_api_1", "cat", "/secrets/tokens/admin-token"],
            capture_output=True, text=True).stdout.strip(), 300)
        as_operator = {**env, "PELOTON_API_URL": api, "PELOTON_TOKEN": token}

        def pelotonctl(*args: str) -> subprocess.CompletedProcess:
            return subprocess.run([*ctl, *args], env=as_operator, capture_output=True, text=True, timeout=60)

        wait_for("both agents UP", lambda: _up_hosts(pelotonctl("host", "list", "--json")) == {"agent-0", "agent-1"},
                 300)
        created = pelotonctl("job", "create", "/DefaultResPool", str(REPO_ROOT / "examples/jobs/hello.yaml"))
        assert created.returncode == 0, created.stderr
        job = created.stdout.split()[1]
        state = wait_for("the job to end", lambda: _ended(pelotonctl("job", "status", job, "--json")), 300)
        assert state == "SUCCEEDED", pelotonctl("job", "status", job).stdout
        # Prometheus scrapes every stage instance, both agents and the API.
        prometheus = f"http://127.0.0.1:{ports['PROMETHEUS_PORT']}"
        up_targets = wait_for("every target scraped", lambda: _all_up(prometheus, 11), 120)
        assert {"admit-0:9400", "launch-1:9400", "agent-1:9400", "api:8081"} <= up_targets
    finally:
        logs = compose("logs", "--tail", "30", timeout=120) if up.returncode else None
        down = compose("down", "-v", timeout=300)
        assert down.returncode == 0, down.stderr[-2000:]
        # podman-compose 1.6 leaves a volume now and then: whatever of the project is left goes.
        left = subprocess.run(["podman", "volume", "ls", "-q"], capture_output=True, text=True).stdout.split()
        subprocess.run(["podman", "volume", "rm", "-f", *[v for v in left if v.startswith(f"{project}_")]],
                       capture_output=True)
        assert subprocess.run(["podman", "ps", "-aq", "--filter", f"name={project}_"], capture_output=True,
                              text=True).stdout.strip() == ""
        if logs is not None:
            print(logs.stdout[-8000:])


def wait_for(what: str, check, timeout: float):
    return wait_until(what, check, timeout, every=3.0)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=3):
            return True
    except OSError:
        return False


def _up_hosts(done: subprocess.CompletedProcess) -> set[str]:
    if done.returncode:
        return set()
    return {h["host_id"] for h in json.loads(done.stdout)["hosts"] if h["state"] == "UP"}


def _ended(done: subprocess.CompletedProcess) -> str | None:
    if done.returncode:
        return None
    state = json.loads(done.stdout)["state"]
    return state if state in ("SUCCEEDED", "FAILED", "KILLED") else None


def _all_up(prometheus: str, count: int) -> set[str]:
    try:
        with urllib.request.urlopen(f"{prometheus}/api/v1/query?query=up", timeout=5) as answer:
            result = json.loads(answer.read())["data"]["result"]
    except OSError:
        return set()
    up = {r["metric"]["instance"] for r in result if r["value"][1] == "1"}
    return up if len(up) >= count else set()
