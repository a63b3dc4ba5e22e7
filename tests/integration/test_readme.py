"""The README's examples, run as written (the project's doctest for its README).

Every fenced block says what it is: `sh` blocks run in bash from the checkout's root, `python`
blocks run with the project's Python from there, in the order the README gives them, against the
dev stack the README itself starts. The `java` block is jvm/examples' SubmitJob, which
test_java_clients builds with Maven and runs against a pipeline: here its lines are checked to be
SubmitJob's, in order, and its schema id against ids.yaml. `text` blocks are pictures. The one
line not run is `make test`: it is what runs this test."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from peloton.config import REPO_ROOT
from peloton.model.states import JOB_TERMINAL
from peloton.store import open_store

pytestmark = pytest.mark.integration

README = REPO_ROOT / "README.md"
SUBMIT_JOB = REPO_ROOT / "jvm" / "examples" / "src" / "main" / "java" / "SubmitJob.java"
KINDS = {"sh", "python", "java", "text"}
NOT_RUN = {"make test"}  # the command that runs this very test


def blocks(text: str) -> list[tuple[str, str, int]]:
    """(kind, body, line) of every fenced block."""
    found = []
    for m in re.finditer(r"^```(\w*)\n(.*?)^```$", text, re.M | re.S):
        found.append((m.group(1), m.group(2), text.count("\n", 0, m.start()) + 1))
    return found


def shell_lines(body: str) -> list[str]:
    """A block's commands, minus those never run here (their trailing comments stay: bash reads them)."""
    return [line for line in body.splitlines() if line.split("#")[0].strip() not in NOT_RUN]


def test_every_block_in_the_readme_says_what_it_is() -> None:
    for kind, _body, line in blocks(README.read_text()):
        assert kind in KINDS, f"README.md line {line}: a block marked {kind!r}; mark it one of {sorted(KINDS)}"


def test_the_java_producer_uses_the_schema_id_of_ids_yaml() -> None:
    ids = yaml.safe_load((REPO_ROOT / "schemas" / "avro" / "ids.yaml").read_text())
    java = [body for kind, body, _ in blocks(README.read_text()) if kind == "java"]
    assert java, "the README lost its Java producer"
    for body in java:
        assert re.findall(r"putInt\((\d+)\)", body) == [str(ids["peloton.JobCommand"])]


def test_every_line_of_the_readmes_java_producer_is_a_line_of_submit_job_in_the_same_order() -> None:
    # SubmitJob's own lines (its arguments, the topic prefix) sit between them; a line changed on
    # one side only would leave the README showing code that no test runs.
    source = [line.strip() for line in SUBMIT_JOB.read_text().splitlines()]
    [body] = [body for kind, body, _ in blocks(README.read_text()) if kind == "java"]
    at = 0
    for line in filter(None, (line.strip() for line in body.splitlines())):
        assert line in source[at:], (f"the README's Java line {line!r} is not in {SUBMIT_JOB.relative_to(REPO_ROOT)} "
                                     f"after its line {at}: change both")
        at = source.index(line, at) + 1


@pytest.mark.long
def test_every_example_in_the_readme_runs_as_written(tmp_path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PELOTON_")}
    env.update(PELOTON_HOME=str(tmp_path / "home"), PELOTON_SESSION_TIMEOUT_MS="2000", PYTHONUNBUFFERED="1")
    ran: list[str] = []
    produced: list[str] = []
    try:
        for kind, body, line in blocks(README.read_text()):
            if kind == "sh":
                script = "set -euo pipefail\n" + "\n".join(shell_lines(body)) + "\n"
                result = subprocess.run(["bash", "-c", script], cwd=REPO_ROOT, env=env, capture_output=True,
                                        text=True, timeout=600)
            elif kind == "python":
                path = tmp_path / f"readme_{line}.py"
                path.write_text(body)
                # What the README has the reader export first: the dev stack's producer.
                exports = subprocess.run([sys.executable, "-m", "pelotonctl", "dev", "env", "--kafka-user", "producer"],
                                         cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60)
                assert exports.returncode == 0, exports.stderr
                producer = dict(shlex.split(row)[1].split("=", 1) for row in exports.stdout.splitlines())
                result = subprocess.run([sys.executable, str(path)], cwd=REPO_ROOT, env={**env, **producer},
                                        capture_output=True, text=True, timeout=120)
                produced.extend(result.stdout.split())
            else:
                continue
            assert result.returncode == 0, (f"README.md line {line} ({kind}) failed with {result.returncode}:\n"
                                            f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
            assert "Traceback" not in result.stderr, f"README.md line {line}: {result.stderr[-3000:]}"
            ran.append(f"{kind}@{line}")
            if produced and "dev down" not in body:
                _check_produced_job(tmp_path / "home" / "peloton.db", produced[-1])
    finally:
        subprocess.run([sys.executable, "-m", "pelotonctl", "dev", "down"], cwd=REPO_ROOT, env=env,
                       capture_output=True, timeout=120)
    assert len(ran) >= 4, f"only {ran} ran"
    print(f"ran {ran}; the producer made job {produced[-1]}")
    assert produced, "the Python producer printed no job id"


def _check_produced_job(store_path: Path, job_id: str, timeout: float = 60) -> None:
    """The job the README's producer published reaches SUCCEEDED (checked before the stack stops)."""
    store = open_store(store_path)
    try:
        deadline = time.monotonic() + timeout
        while True:
            job = store.get_job(job_id)
            if job is not None and job.state in JOB_TERMINAL:
                assert job.state == "SUCCEEDED", f"the producer's job {job_id} ended {job.state}"
                return
            assert time.monotonic() < deadline, f"the producer's job {job_id} is {job.state if job else 'not stored'}"
            time.sleep(0.2)
    finally:
        store.close()
