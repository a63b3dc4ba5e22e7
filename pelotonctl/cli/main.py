"""The root of pelotonctl: its command groups in the order `pelotonctl --help` lists them, and the
entry point (the console script and `python -m pelotonctl`)."""

from __future__ import annotations

import sys

import typer

from peloton.config import Settings
from pelotonctl.cli import (agent, api, auth, bench, cluster, dashboard, deadletters, dev, host, image, job, lag,
                            resmgr, respool, stage, task, topics, update)
from pelotonctl.cli.common import EXIT_UNAVAILABLE, commands, err, masked, out

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
app.add_typer(task.task_app, name="task")
app.add_typer(update.update_app, name="update")
app.add_typer(respool.pool_app, name="respool")
app.add_typer(resmgr.resmgr_app, name="resmgr")
app.add_typer(cluster.cluster_app, name="cluster")
app.add_typer(agent.agent_app, name="agent")
app.add_typer(host.host_app, name="host")
app.add_typer(image.image_app, name="image")
app.add_typer(deadletters.letters_app, name="dead-letters")
app.add_typer(auth.auth_app, name="auth")


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        out.print(f"pelotonctl {version('peloton-kafka')}", highlight=False)
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print the version and exit."),
) -> None:
    """Peloton-style cluster scheduler on Kafka."""


def main() -> None:
    import logging

    from peloton.store import store_unavailable

    # The connection pool's retries would print a warning each: the one line below says it.
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
    try:
        app()
    except store_unavailable() as exc:  # any command: one line naming what is away, exit 5
        try:
            where = masked(Settings.from_env().store)
        except ValueError:
            where = "PELOTON_STORE"
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        err.print(f"[red]error:[/red] the store at {where} is unavailable: {first}", highlight=False, soft_wrap=True)
        sys.exit(EXIT_UNAVAILABLE)
