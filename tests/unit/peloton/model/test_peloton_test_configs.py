"""Peloton's own integration tests' files (tests/integration/peloton_files/test_configs, unchanged
from its repository) read as Peloton read them: every job and stateless spec valid but the one its
tests meant to be invalid, every resource pool valid; a spec whose entrypoint is a shell line runs
it through a shell."""

from __future__ import annotations

from pathlib import Path

import pytest

from peloton.model.jobconfig import parse_job_config
from peloton.model.jobspec import JobConfigError
from peloton.model.pool import parse_pool_config

CONFIGS = Path(__file__).resolve().parents[3] / "integration" / "peloton_files" / "test_configs"
POOLS = sorted(p.name for p in CONFIGS.glob("*.yaml") if p.read_text().startswith(("name:", "changeLog:"))
               and "\nresources:" in p.read_text() and "defaultConfig" not in p.read_text()
               and "defaultSpec" not in p.read_text())
JOBS = sorted(p.name for p in CONFIGS.glob("*.yaml") if p.name not in POOLS)
# Peloton's tests submit this one to see it refused (a revocable job that may not be preempted).
INVALID = {"test_stateless_job_spec_invalid.yaml"}


def test_the_files_are_all_there() -> None:
    assert (len(JOBS), len(POOLS)) == (41, 7)


@pytest.mark.parametrize("name", [j for j in JOBS if j not in INVALID])
def test_peloton_s_job_and_stateless_files_are_valid(name: str) -> None:
    spec = parse_job_config((CONFIGS / name).read_text())
    assert spec.instance_count >= 1 and spec.tasks
    assert all(t.command.value for t in spec.tasks), name


@pytest.mark.parametrize("name", sorted(INVALID))
def test_the_file_peloton_meant_to_be_invalid_is_refused_with_the_path(name: str) -> None:
    with pytest.raises(JobConfigError) as refused:
        parse_job_config((CONFIGS / name).read_text())
    assert "sla.revocable: a revocable SERVICE job must be preemptible" in str(refused.value)


@pytest.mark.parametrize("name", POOLS)
def test_peloton_s_pool_files_are_valid(name: str) -> None:
    pool = parse_pool_config((CONFIGS / name).read_text(), "/" + name.removesuffix(".yaml"))
    assert pool["resources"], name


def test_a_stateless_spec_s_shell_entrypoint_runs_through_a_shell() -> None:
    spec = parse_job_config((CONFIGS / "test_stateless_job_spec.yaml").read_text())
    assert spec.type == "SERVICE" and spec.tasks[0].command.shell
