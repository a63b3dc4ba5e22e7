"""The API's two faces measured side by side on one throwaway dev stack: job creates per second
and the latency of reading a job, through HTTP/JSON and through Peloton's gRPC JobManager, with
the stack's admin token and its signed commands.

    .venv/bin/python -m pelotonctl.bench.api_calls            # 100 creates and 300 reads each
    .venv/bin/python -m pelotonctl.bench.api_calls 200 600 --json

One client, one call at a time, over one connection each (HTTP keep-alive, one gRPC channel), so
the figures are each face's own cost per call. A create waits for the job manager's answer on both
faces (HTTP's wait=true; gRPC's Create always waits, as Peloton's does). Figures are printed,
never asserted: these machines are shared and noisy; compare the two faces within one run."""

from __future__ import annotations

import http.client
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlparse

import grpc
import yaml
from google.protobuf import json_format

from peloton.api.v0 import peloton_pb2
from peloton.api.v0.job import job_pb2, job_pb2_grpc
from peloton.config import REPO_ROOT, Settings
from pelotonctl.dev.stack import DevStack

POOL = "/DefaultResPool"
JOB_FILE = REPO_ROOT / "examples" / "jobs" / "hello.yaml"
HOSTS = "sim:20:cpu=64,mem_mb=262144,disk_mb=1000000"


def _timed(calls: int, call: Callable[[int], None]) -> list[float]:
    took = []
    for i in range(calls):
        start = time.perf_counter()
        call(i)
        took.append(time.perf_counter() - start)
    return took


def _figures(creates: list[float], reads: list[float]) -> dict:
    reads_ms = sorted(r * 1000 for r in reads)
    return {"creates_per_s": round(len(creates) / sum(creates), 1),
            "create_p50_ms": round(statistics.median(creates) * 1000, 1),
            "get_p50_ms": round(statistics.median(reads_ms), 2),
            "get_p99_ms": round(reads_ms[min(len(reads_ms) - 1, int(len(reads_ms) * 0.99))], 2)}


def measure(state: dict, creates: int, reads: int) -> dict:
    text = JOB_FILE.read_text().replace("instanceCount: 6", "instanceCount: 1")
    token = state["token"]
    url = urlparse(state["api_url"])
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def http_call(method: str, path: str, body: dict | None = None) -> dict:
        conn.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
        answer = conn.getresponse()
        data = json.loads(answer.read())
        if answer.status >= 300:
            raise RuntimeError(f"{method} {path}: {answer.status} {data}")
        return data

    made: list[str] = []
    http_creates = _timed(creates, lambda _i: made.append(
        http_call("POST", "/v1/jobs?wait=true", {"pool": POOL, "config": text})["job_id"]))
    http_reads = _timed(reads, lambda i: http_call("GET", f"/v1/jobs/{made[i % len(made)]}"))

    channel = grpc.insecure_channel(state["grpc"])
    jobs = job_pb2_grpc.JobManagerStub(channel)
    metadata = [("authorization", f"Bearer {token}")]
    config = json_format.ParseDict(yaml.safe_load(text), job_pb2.JobConfig())
    config.respoolID.value = POOL
    ids: list[str] = []

    def grpc_create(_i: int) -> None:
        answer = jobs.Create(job_pb2.CreateRequest(config=config), metadata=metadata)
        if answer.HasField("error"):
            raise RuntimeError(f"Create: {answer.error}")
        ids.append(answer.jobId.value)
    grpc_creates = _timed(creates, grpc_create)
    grpc_reads = _timed(reads, lambda i: jobs.Get(job_pb2.GetRequest(id=peloton_pb2.JobID(value=ids[i % len(ids)])),
                                                  metadata=metadata))
    channel.close()
    conn.close()
    return {"http": _figures(http_creates, http_reads), "grpc": _figures(grpc_creates, grpc_reads),
            "creates": creates, "reads": reads}


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    creates, reads = (int(args[0]) if args else 100), (int(args[1]) if len(args) > 1 else 300)
    as_json = "--json" in sys.argv
    home = Path(tempfile.mkdtemp(prefix="peloton-bench-api-"))
    say = (lambda _m: None) if as_json else print
    stack = DevStack(Settings.from_env(home=home, store=str(home / "peloton.db"), hosts=HOSTS))
    stack.up(progress=say)
    try:
        say(f"{creates} creates and {reads} reads through each face ...")
        figures = measure(stack.read() or {}, creates, reads)
    finally:
        stack.down(progress=lambda _m: None)
        shutil.rmtree(home, ignore_errors=True)
    if as_json:
        print(json.dumps(figures))
        return
    print(f"{'':6}{'creates/s':>10}{'create p50 ms':>15}{'get p50 ms':>12}{'get p99 ms':>12}")
    for face in ("http", "grpc"):
        f = figures[face]
        print(f"{face:6}{f['creates_per_s']:>10}{f['create_p50_ms']:>15}{f['get_p50_ms']:>12}{f['get_p99_ms']:>12}")


if __name__ == "__main__":
    main()
