"""pelotonctl update: a job's update workflows (every `job update` and `job restart` is one), and
pause, resume, abort and rollback of the one in progress."""

from __future__ import annotations

import time
from datetime import datetime

import typer
from rich.table import Table

from pelotonctl.cli.common import EXIT_FAILED, EXIT_TIMEOUT, JSON_HELP, client, cluster_call, commands, out, print_json

update_app = commands("Update workflows: list, get, pause, resume, abort, rollback.")

ENDED = ("SUCCEEDED", "ABORTED", "ROLLED_BACK", "FAILED")


def _when(ms: int | None) -> str:
    return datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S") if ms else "-"


def _progress(u: dict) -> str:
    return f"{u['instances_done']}/{u['instances_total']} done, {u['instances_failed']} failed"


@update_app.command("list")
def update_list(job_id: str, as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """A job's updates and restarts, the newest first."""
    rows = cluster_call(client().updates, job_id)
    if as_json:
        print_json(rows)
        return
    table = Table("update", "kind", "state", "versions", "progress", "by", "created")
    for u in rows:
        table.add_row(u["update_id"], u["kind"], u["state"], f"{u['from_version']} -> {u['to_version']}", _progress(u),
                      u["requested_by"], _when(u["created_ms"]))
    out.print(table)


def _show(u: dict) -> None:
    out.print(f"update {u['update_id']} ({u['kind'].lower()} of job {u['job_id']}, by {u['requested_by']}): "
              f"[bold]{u['state']}[/bold]", highlight=False)
    out.print(f"config version {u['from_version']} -> {u['to_version']}; {_progress(u)}"
              + (f"; in flight: {', '.join(map(str, u['instances_current']))}" if u["instances_current"] else ""),
              highlight=False)
    if u["failed"]:
        out.print(f"failed instances: {', '.join(map(str, u['failed']))}", highlight=False)
    if u["message"]:
        out.print(f"why: {u['message']}", highlight=False)
    opts = u["options"]
    out.print("options: " + ", ".join(f"{k.replace('_', '-')} {v}" for k, v in opts.items()), highlight=False)


@update_app.command("get")
def update_get(update_id: str,
               wait: bool = typer.Option(False, "--wait", help="Wait until the update has ended."),
               timeout: float = typer.Option(600, help="Seconds to wait with --wait."),
               as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """An update's state, its instances done, failed and in flight, and why it is where it is. With
    --wait: exit 0 once SUCCEEDED, 1 for another end, 4 when it has not ended in time."""
    cluster = client()
    u = cluster_call(cluster.update, update_id)
    deadline = time.monotonic() + timeout
    while wait and u["state"] not in ENDED and time.monotonic() < deadline:
        time.sleep(0.5)
        u = cluster_call(cluster.update, update_id)
    print_json(u) if as_json else _show(u)
    if wait and u["state"] not in ENDED:
        raise typer.Exit(EXIT_TIMEOUT)
    if wait and u["state"] != "SUCCEEDED":
        raise typer.Exit(EXIT_FAILED)


def _steer(action: str, update_id: str, as_json: bool) -> None:
    done = cluster_call(client().steer_update, update_id, action)
    if as_json:
        print_json(done)
    else:
        state = f": {done['state']}" if done.get("state") else ""
        out.print(f"update {update_id} of job {done['job_id']}: {action.lower()} sent{state}", highlight=False)


@update_app.command("pause")
def update_pause(update_id: str, as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """Hold the next batch (the batch in flight finishes)."""
    _steer("PAUSE", update_id, as_json)


@update_app.command("resume")
def update_resume(update_id: str, as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """Go on with a paused update."""
    _steer("RESUME", update_id, as_json)


@update_app.command("abort")
def update_abort(update_id: str, as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """Stop the rollout where it is: replaced instances keep the new config, the rest the old."""
    _steer("ABORT", update_id, as_json)


@update_app.command("rollback")
def update_rollback(update_id: str, as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """Put the previous config back on every instance the update touched (a new config version)."""
    _steer("ROLLBACK", update_id, as_json)


