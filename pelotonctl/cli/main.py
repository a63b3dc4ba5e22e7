"""The root of pelotonctl: its command groups in the order `pelotonctl --help` lists them, and the
entry point (the console script and `python -m pelotonctl`)."""

from __future__ import annotations

import sys

import typer

from peloton.config import Settings
from pelotonctl.cli import (
    agent,
    api,
    auth,
    bench,
    cluster,
    dashboard,
    deadletters,
    deploy,
    dev,
    host,
    image,
    job,
    jobmgr,
    lag,
    lockdown,
    resmgr,
    respool,
    stage,
    stateless,
    task,
    topics,
    update,
    volume,
    watch,
)
from pelotonctl.cli.common import EXIT_INVALID, EXIT_UNAVAILABLE, commands, err, out

# add_completion gives --install-completion and --show-completion (bash, zsh, fish, PowerShell).
app = commands("Peloton-style cluster scheduler on Kafka.", add_completion=True)
app.command("bench")(bench.bench)
app.command("lag")(lag.lag)
app.command("dashboard")(dashboard.dashboard)
app.command("api")(api.api)
app.add_typer(topics.topics_app, name="topics")
app.add_typer(stage.stage_app, name="stage")
app.add_typer(dev.dev_app, name="dev")
app.add_typer(job.job_app, name="job")
job.job_app.add_typer(stateless.stateless_app, name="stateless")
app.add_typer(task.task_app, name="task")
app.add_typer(update.update_app, name="update")
app.add_typer(volume.volume_app, name="volume")
app.add_typer(respool.pool_app, name="respool")
app.add_typer(resmgr.resmgr_app, name="resmgr")
app.add_typer(cluster.cluster_app, name="cluster")
app.add_typer(deploy.deploy_app, name="deploy")
app.add_typer(agent.agent_app, name="agent")
app.add_typer(host.host_app, name="host")
app.add_typer(host.hostmgr_app, name="hostmgr")
app.add_typer(jobmgr.jobmgr_app, name="jobmgr")
app.add_typer(watch.watch_app, name="watch")
app.add_typer(image.image_app, name="image")
app.add_typer(deadletters.letters_app, name="dead-letters")
app.add_typer(auth.auth_app, name="auth")
app.add_typer(lockdown.admin_app, name="admin")


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        out.print(f"pelotonctl {version('peloton-kafka')}", highlight=False)
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print the version and exit."),
    # Never set here: main() moves it behind the command (peloton_json_flag); declared for --help.
    as_json: bool = typer.Option(False, "-j", "--json",
                                 help="Peloton's form of the command's own --json (before the command)."),
) -> None:
    """Peloton-style cluster scheduler on Kafka."""


def peloton_json_flag(args: list[str]) -> list[str]:
    """Peloton's global -j/--json, written before the command (`peloton -j job get JOB`), moved
    behind it, where every command here with JSON output takes --json. A command without one
    refuses it with the reason (exit 2)."""
    lead = 0
    while lead < len(args) and args[lead].startswith("-"):
        lead += 1
    if not {"-j", "--json"} & set(args[:lead]):
        return args
    args = [a for a in args[:lead] if a not in ("-j", "--json")] + args[lead:]
    from typer.main import get_command

    command, path = get_command(app), []
    for word in args:  # down the groups (they have commands) to the command named
        if word not in getattr(command, "commands", {}):
            break
        command, path = command.commands[word], [*path, word]
    group = hasattr(command, "commands")
    if group or not any("--json" in p.opts for p in command.params):
        named = " ".join(["pelotonctl", *path])
        err.print(f"[red]error:[/red] -j/--json: `{named}` has no JSON output" + (" (name a command)" if group else ""),
                  highlight=False)
        sys.exit(EXIT_INVALID)
    return [*args, "--json"]


def main() -> None:
    import logging

    from peloton.store import masked_url, store_unavailable

    # The connection pool's retries would print a warning each: the one line below says it.
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
    try:
        app(args=peloton_json_flag(sys.argv[1:]))
    except store_unavailable() as exc:  # any command: one line naming what is away, exit 5
        try:
            where = masked_url(Settings.from_env().store)
        except ValueError:
            where = "PELOTON_STORE"
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        err.print(f"[red]error:[/red] the store at {where} is unavailable: {first}", highlight=False, soft_wrap=True)
        sys.exit(EXIT_UNAVAILABLE)
