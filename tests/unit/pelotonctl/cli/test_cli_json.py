"""Every command that prints data takes --json (and so Peloton's `pelotonctl -j COMMAND`): scripts
read JSON, never tables. The commands that print no data are listed below, each with the reason;
a new command is one or the other."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from pelotonctl.cli import app

runner = CliRunner()

# The commands without --json, and why they print no data a script would read.
NO_DATA = {
    # Servers and long-running processes: they run until stopped, and print where they serve or
    # log as they go; what they serve (pages, the API, metrics) is read elsewhere.
    "api": "serves the HTTP API until stopped (its answers are JSON already)",
    "dashboard": "serves a web page until stopped",
    "stage run": "runs one stage instance until stopped; it logs",
    "agent run": "runs a host agent until stopped; it logs",
    # The dev stack's lifecycle: progress lines for a person while processes stop and start, and
    # nothing to read afterwards (`dev status --json` says what runs).
    "dev restart": "progress while one component restarts; `dev status --json` tells the outcome",
    "dev down": "progress while the stack stops",
    "dev demo": "a live show of the example jobs for a person (`make demo`); `bench --json` has the figures",
    # Output that is the data itself, in a form of its own.
    "task logs": "the run's own stdout or stderr, byte for byte (any bytes, not text): pipe it",
    "cluster targets": "prints JSON already: Prometheus file_sd targets (or writes them to --output)",
    "deploy env": "the env file itself, KEY=VALUE lines a compose file reads (or writes it to --output)",
    # A deployment's one-shot steps and its Kafka node: progress lines, then the files they made.
    "deploy broker": "becomes a Kafka node (exec) until stopped; Kafka logs",
    "deploy certificates": "writes ca.pem and broker.pem; a line says so",
    "deploy setup": "progress while topics, users, ACLs, the pool and tokens are made; the tokens are files",
}


def _commands() -> dict[str, object]:
    from typer.main import get_command

    found = {}

    def walk(command, path):
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, [*path, name])
        if not hasattr(command, "commands"):
            found[" ".join(path)] = command

    walk(get_command(app), [])
    return found


def _takes_json(command) -> bool:
    return any("--json" in p.opts for p in command.params)


def test_every_command_that_prints_data_takes_json() -> None:
    commands = _commands()
    missing = sorted(path for path, command in commands.items() if not _takes_json(command) and path not in NO_DATA)
    assert not missing, f"commands without --json (add it, or say in NO_DATA why they print no data): {missing}"
    stale = sorted(path for path in NO_DATA if path not in commands or _takes_json(commands[path]))
    assert not stale, f"NO_DATA names commands that are gone or take --json now: {stale}"


def test_pelotons_leading_json_flag_reaches_the_new_ones_and_is_refused_by_the_others(tmp_path) -> None:
    from pelotonctl.cli.main import peloton_json_flag

    assert peloton_json_flag(["-j", "job", "delete", "j1"]) == ["job", "delete", "j1", "--json"]
    assert peloton_json_flag(["-j", "host", "maintenance", "start", "h1"])[-1] == "--json"
    for path in NO_DATA:
        try:
            peloton_json_flag(["-j", *path.split()])
        except SystemExit as exc:
            assert exc.code == 2, path
        else:
            raise AssertionError(f"-j {path} was not refused")


def _env(tmp_path, **more: str) -> dict[str, str]:
    return {"PELOTON_HOME": str(tmp_path / "home"), "PELOTON_STORE": str(tmp_path / "peloton.db"), **more}


def test_respool_delete_and_auth_revoke_answer_json(tmp_path) -> None:
    from peloton.model.pool import parse_pool_config
    from peloton.store import open_store
    from tests.builders.api import RESOURCES

    store = open_store(tmp_path / "peloton.db")
    store.put_pool("/a", parse_pool_config("name: a\nowningTeam: team-a\n" + RESOURCES, "/a"))
    store.close()
    deleted = runner.invoke(app, ["respool", "delete", "/a", "--json"], env=_env(tmp_path))
    assert deleted.exit_code == 0, deleted.output
    assert json.loads(deleted.stdout) == {"path": "/a", "deleted": True}
    made = json.loads(runner.invoke(app, ["auth", "issue", "--user", "u", "--json"], env=_env(tmp_path)).stdout)
    revoked = runner.invoke(app, ["auth", "revoke", made["token"], "--json"], env=_env(tmp_path))
    assert revoked.exit_code == 0, revoked.output
    assert json.loads(revoked.stdout) == {"token_id": made["token_id"], "revoked": True}


def test_host_key_image_import_and_dev_env_answer_json(tmp_path) -> None:
    from peloton.auth.host_keys import host_key
    from peloton.host.containers import image_directory_name

    keyed = runner.invoke(app, ["auth", "host-key", "h1", "--json"], env=_env(tmp_path, PELOTON_AGENT_REPORT_KEY="k"))
    assert keyed.exit_code == 0, keyed.output
    assert json.loads(keyed.stdout) == {"PELOTON_HOST_KEY": host_key("k", "h1")}
    rootfs = tmp_path / "rootfs"
    (rootfs / "bin").mkdir(parents=True)
    imported = runner.invoke(app, ["image", "import", "debian:bookworm", str(rootfs), "--json"], env=_env(tmp_path))
    assert imported.exit_code == 0, imported.output
    target = tmp_path / "home" / "images" / image_directory_name("debian:bookworm") / "rootfs"
    assert json.loads(imported.stdout) == {"name": "debian:bookworm", "path": str(target)} and target.is_dir()
    (tmp_path / "home" / "dev").mkdir(parents=True)
    (tmp_path / "home" / "dev" / "stack.json").write_text(json.dumps({"api_url": "http://127.0.0.1:1", "token": "t"}))
    exported = runner.invoke(app, ["dev", "env", "--json"], env=_env(tmp_path))
    assert exported.exit_code == 0, exported.output
    assert json.loads(exported.stdout) == {"PELOTON_API_URL": "http://127.0.0.1:1", "PELOTON_TOKEN": "t"}


class _Cluster:
    """A cluster that takes a job command, and maintenance on every host but `refused`."""

    def __init__(self, refused: str = "") -> None:
        self.refused = refused

    def delete_job(self, job_id, keep_volumes=False) -> dict:
        return {"job_id": job_id, "kind": "DELETE", "command_id": "c1", "instances": [0, 1],
                "volumes_deleted": [] if keep_volumes else [f"{job_id}-0"], "volumes_kept": []}

    def maintenance(self, host_id, action, force=False) -> None:
        from pelotonctl.admin import UserError

        if host_id == self.refused:
            raise UserError(f"host {host_id}: refused")


def test_job_delete_and_host_maintenance_answer_json(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr("pelotonctl.cli.job.client", lambda: _Cluster())
    deleted = runner.invoke(app, ["job", "delete", "j1", "--json"], env=_env(tmp_path))
    assert deleted.exit_code == 0, deleted.output
    assert json.loads(deleted.stdout) == {"job_id": "j1", "kind": "DELETE", "command_id": "c1", "instances": [0, 1],
                                          "volumes_deleted": ["j1-0"], "volumes_kept": []}
    monkeypatch.setattr("pelotonctl.cli.host.client", lambda: _Cluster(refused="h3"))
    started = runner.invoke(app, ["host", "maintenance", "start", "h1,h2", "--json"], env=_env(tmp_path))
    assert started.exit_code == 0, started.output
    assert json.loads(started.stdout) == {"hosts": [{"host_id": "h1", "action": "START", "state": "DRAINING"},
                                                    {"host_id": "h2", "action": "START", "state": "DRAINING"}]}
    # A refusal stops the hosts after it: stdout still says, as JSON, what was done before it.
    stopped = runner.invoke(app, ["host", "maintenance", "complete", "h1,h3,h4", "--json"], env=_env(tmp_path))
    assert stopped.exit_code == 2 and "host h3: refused" in stopped.stderr
    assert json.loads(stopped.stdout) == {"hosts": [{"host_id": "h1", "action": "COMPLETE", "state": "UP"}]}
