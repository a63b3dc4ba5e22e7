"""pelotonctl admin: Peloton's `admin lock|unlock COMPONENT...`, and the lockdown now."""

from __future__ import annotations

import sys
from datetime import datetime

import typer

from pelotonctl.cli.common import EXIT_FAILED, JSON_HELP, client, cluster_call, commands, fail, print_json

admin_app = commands("Peloton's administrative commands: lock components down, unlock them.")
COMPONENTS_HELP = ("Peloton's components: Read (reading jobs and tasks), Write (every job command that changes one), "
                   "Kill (stopping runs); GoalStateEngine and Launch cannot be locked here (each says why).")


def _set(components: list[str], locked: bool, as_json: bool) -> None:
    op = "lock" if locked else "unlock"
    answer = cluster_call(client().set_locks, components, locked)
    if as_json:
        print_json(answer)
    else:
        for name in answer["successes"]:
            sys.stdout.write(f"{op} on {name} succeeded\n")
        for failure in answer["failures"]:
            sys.stdout.write(f"{op} on {failure['component']} failed due to: {failure['message']}\n")
    if answer["failures"]:
        fail(f"{len(answer['failures'])} of {len(components)} components not {op}ed", EXIT_FAILED)


@admin_app.command("lock")
def lock(components: list[str] = typer.Argument(..., help=COMPONENTS_HELP),
         as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """Lock components down (administrators): their API calls and job commands, a producer's
    included, are refused with who locked them until `admin unlock`. Pools, hosts and tokens are
    not locked."""
    _set(components, True, as_json)


@admin_app.command("unlock")
def unlock(components: list[str] = typer.Argument(..., help=COMPONENTS_HELP),
           as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """Lift the lockdown of components (administrators)."""
    _set(components, False, as_json)


@admin_app.command("lockdown")
def show(as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """The components locked down now, by whom and since when."""
    locked = cluster_call(client().lockdown)
    if as_json:
        print_json({"locked": locked})
        return
    if not locked:
        sys.stdout.write("nothing is locked down\n")
    for name, lock in locked.items():
        since = datetime.fromtimestamp(lock["locked_ms"] / 1000).isoformat(sep=" ", timespec="seconds")
        sys.stdout.write(f"{name}: locked by {lock['locked_by'] or '?'} since {since}\n")
