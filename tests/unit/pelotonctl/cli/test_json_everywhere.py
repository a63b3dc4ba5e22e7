"""Peloton's global -j/--json (`pelotonctl -j COMMAND ...`) reaches the --json of every command that
prints data: each one is parsed with it, and a few that need no cluster (or a stand-in) answer
JSON end to end. The commands without --json are those of test_cli_json.NO_DATA, each with its
reason (one list, so that the two tests cannot disagree)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.main import get_command
from typer.testing import CliRunner

from pelotonctl.cli import app
from pelotonctl.cli.main import peloton_json_flag
from tests.unit.pelotonctl.cli.test_cli_json import NO_DATA

runner = CliRunner()
HELLO = Path(__file__).resolve().parents[4] / "examples" / "jobs" / "hello.yaml"


def _commands() -> dict[str, object]:
    found = {}

    def walk(command, path):
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, [*path, name])
        if not hasattr(command, "commands"):
            found[" ".join(path)] = command

    walk(get_command(app), [])
    return found


def test_a_leading_j_reaches_the_json_flag_of_every_command_not_exempt() -> None:
    unreached = []
    for path, command in _commands().items():
        if path in NO_DATA:
            continue
        words = path.split()
        try:
            args = peloton_json_flag(["-j", *words])
        except SystemExit:  # refused: the command has no --json, and no reason to be without it
            unreached.append(f"{path}: refused")
            continue
        flag = next(p for p in command.params if "--json" in p.opts)
        # The arguments a command needs are left out: resilient parsing reads the options alone.
        context = command.make_context(words[-1], args[len(words):], resilient_parsing=True)
        if not (flag.is_flag and context.params[flag.name] is True):
            unreached.append(f"{path}: --json parsed as {context.params[flag.name]!r}")
    assert not unreached, f"-j does not reach --json (add --json, or a reason to NO_DATA): {unreached}"


def test_a_leading_j_before_a_group_or_an_exempt_command_is_refused_naming_it(capsys) -> None:
    for words in (["job"], ["dev", "down"], ["agent", "run"]):
        try:
            peloton_json_flag(["-j", *words])
        except SystemExit as exc:
            assert exc.code == 2, words
        else:
            raise AssertionError(f"-j {' '.join(words)} was not refused")
    assert "`pelotonctl job` has no JSON output (name a command)" in capsys.readouterr().err


def test_j_before_job_validate_answers_what_its_json_flag_answers() -> None:
    assert HELLO.is_file()
    led = runner.invoke(app, peloton_json_flag(["-j", "job", "validate", str(HELLO)]))
    assert led.exit_code == 0, led.output
    own = runner.invoke(app, ["job", "validate", str(HELLO), "--json"])
    assert json.loads(led.stdout) == json.loads(own.stdout)
    assert json.loads(led.stdout)["valid"] is True and json.loads(led.stdout)["name"] == "hello"


def test_j_before_job_validate_of_a_bad_file_fails_with_exit_2_and_no_output(tmp_path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ninstanceCount: -1\n")
    failed = runner.invoke(app, peloton_json_flag(["--json", "job", "validate", str(bad)]))
    assert failed.exit_code == 2 and failed.stdout == "" and str(bad) in failed.stderr


class _Cluster:
    def delete_job(self, job_id, keep_volumes=False) -> dict:
        return {"job_id": job_id, "kind": "DELETE", "command_id": "c1", "instances": [0]}


def test_j_job_delete_answers_json_where_the_issue_saw_exit_2(monkeypatch) -> None:
    monkeypatch.setattr("pelotonctl.cli.job.client", lambda: _Cluster())
    deleted = runner.invoke(app, peloton_json_flag(["-j", "job", "delete", "X"]))
    assert deleted.exit_code == 0, deleted.output
    assert json.loads(deleted.stdout) == {"job_id": "X", "kind": "DELETE", "command_id": "c1", "instances": [0]}
