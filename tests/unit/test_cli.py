"""What users of kubectl and nomad expect of a command line, checked without a broker."""

from __future__ import annotations

from importlib.metadata import version

from typer.testing import CliRunner

from peloton.cli import app

runner = CliRunner()


def test_version_prints_the_installed_version() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.stdout.strip() == f"pelotonctl {version('peloton-kafka')}"


def test_shell_completion_is_offered_for_bash(monkeypatch) -> None:
    # Typer finds the shell among the process's ancestors (the "bash" argument is not read):
    # under a runner with no shell above it (CI, a detached make) it would find none and exit 1.
    monkeypatch.setattr("typer.completion._get_shell_name", lambda: "bash")
    result = runner.invoke(app, ["--show-completion"], prog_name="pelotonctl")
    assert result.exit_code == 0 and "_PELOTONCTL_COMPLETE" in result.stdout, (result.output, result.exception)


def test_a_setting_that_does_not_parse_is_named_by_its_variable(tmp_path) -> None:
    result = runner.invoke(app, ["job", "list"], env={"PELOTON_MAX_BATCH": "lots", "PELOTON_HOME": str(tmp_path)})
    assert result.exit_code == 2
    assert "PELOTON_MAX_BATCH='lots': expected a whole number" in result.output


def test_a_bad_host_inventory_is_named_by_its_variable(tmp_path) -> None:
    result = runner.invoke(app, ["dev", "up"], env={"PELOTON_HOSTS": "local:x", "PELOTON_HOME": str(tmp_path)})
    assert result.exit_code == 2 and "PELOTON_HOSTS: host group 'local:x': count 'x' is not a number" in result.output
    result = runner.invoke(app, ["dev", "up", "--hosts", "gpu:1"], env={"PELOTON_HOME": str(tmp_path)})
    assert result.exit_code == 2 and "--hosts: host group 'gpu:1'" in result.output
