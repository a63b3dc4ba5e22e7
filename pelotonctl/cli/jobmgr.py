"""pelotonctl jobmgr: Peloton's job manager state command kept here, `jobmgr instance-availability`."""

from __future__ import annotations

import typer

from pelotonctl.cli.common import (
    EXIT_INVALID,
    EXIT_NOT_FOUND,
    JSON_HELP,
    client,
    cluster_call,
    commands,
    fail,
    out,
    print_json,
)
from stages.admit.lifecycle import STOPPED

jobmgr_app = commands("Peloton's job manager commands: each instance's availability.")


def availability(task: dict) -> str:
    """An instance's availability as Peloton's job manager counts it for the disruption budget:
    DELETED (removed by a shrink), KILLED (stopped, or ended otherwise than by the budget's own
    kills), AVAILABLE (running, and not unhealthy), UNAVAILABLE (anything else: starting, moving off
    a drained host, replaced by an update, failed)."""
    state, reason, health = task["state"], task.get("reason") or "", task.get("health") or ""
    if state == "DELETED":
        return "DELETED"
    if reason == STOPPED and state in ("KILLED", "KILLING"):
        return "KILLED"
    if state == "RUNNING" and health != "UNHEALTHY":
        return "AVAILABLE"
    if state in ("KILLED", "SUCCEEDED"):
        return "KILLED"
    return "UNAVAILABLE"


@jobmgr_app.command("instance-availability")
def instance_availability(job_id: str, instances: str = typer.Option("", "--instances", "-i",
                                                                     help="Comma-separated instance ids (default: "
                                                                          "every instance)."),
                          as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """Each instance's availability (AVAILABLE, UNAVAILABLE, KILLED, DELETED), as Peloton's
    `jobmgr instance-availability` shows it."""
    wanted = {i.strip() for i in instances.split(",") if i.strip()}
    if any(not i.isdigit() for i in wanted):
        fail(f"--instances {instances!r}: comma-separated instance ids, e.g. 0,3", EXIT_INVALID)
    listing = cluster_call(client().task_listing, job_id)
    if not listing:
        fail(f"no job {job_id}", EXIT_NOT_FOUND)
    shown = {str(t["instance"]): availability(t) for t in listing["tasks"]
             if not wanted or str(t["instance"]) in wanted}
    if as_json:
        print_json({"job_id": job_id, "instance_availability": shown})
        return
    for instance, state in sorted(shown.items(), key=lambda kv: int(kv[0])):
        out.print(f"{instance}: {state}", highlight=False)
