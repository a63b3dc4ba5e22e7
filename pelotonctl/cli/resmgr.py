"""pelotonctl resmgr: what the resource manager (the entitle stage) holds, as Peloton's `resmgr`
commands show it: the task runs it tracks, and the gangs waiting in its pools' queues."""

from __future__ import annotations

import datetime

import typer
from rich.table import Table

from pelotonctl.cli.common import JSON_HELP, amount, checked, client, cluster_call, commands, out, print_json

resmgr_app = commands("The resource manager's view: the task runs it tracks (active-list) and its pools' queues "
                      "(pending). Peloton's `resmgr tasks active|pending` are the same commands.")
tasks_app = commands("Peloton's forms: `resmgr tasks active`, `resmgr tasks pending RESPOOL`, and the runs it "
                     "holds that the job manager is done with (`resmgr tasks orphan`).")
resmgr_app.add_typer(tasks_app, name="tasks")

POOL_HELP = "A pool path, e.g. /team (it and the pools below it). Pools are named by path here, not by Peloton's " \
            "pool ids."


def _when(ms: int | None) -> str:
    return "" if not ms else datetime.datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S")


@resmgr_app.command("active-list")
def active_list(job_id: str | None = typer.Option(None, "--job", help="Only the runs of this job."),
                pool: str | None = typer.Option(None, "--respool", "--pool", "-r", help=POOL_HELP),
                states: list[str] = typer.Option([], "--states", "--state", "-s",
                                                 help="Task states, e.g. PENDING,RUNNING; repeat or comma-separate: "
                                                      "any may match."),
                as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """Every task run the resource manager tracks, one a line. Columns: TASK the run's id
    (JOB-INSTANCE-RUN); STATE the job manager's state of that run ('-': it has moved on to a
    later run, and this run's charge goes once the resource manager hears it ended); RESMGR
    queued (waiting in its pool's queue) or admitted (its resources charged to its pool until it
    ends); POOL; HOST where it runs; REASON the last reason given for its state; SINCE when it
    was queued or admitted; UPDATED the job manager's last change to it."""
    from pelotonctl.queries import task_states, words

    wanted = checked(task_states, words(states))
    _print_runs(cluster_call(client().resmgr_tasks, job_id, pool, wanted or None), as_json)


def _print_runs(rows: list[dict], as_json: bool) -> None:
    if as_json:
        print_json(rows)
        return
    table = Table("task", "state", "resmgr", "pool", "host", "reason", "since", "updated")
    for r in rows:
        table.add_row(r["task_id"], r["state"] or "-", r["resmgr"], r["pool"], r["host"], r["reason"],
                      _when(r["since_ms"]), _when(r["updated_ms"]))
    out.print(table)


@resmgr_app.command("pending")
def pending(pool: str | None = typer.Argument(None, help=POOL_HELP + " Default: every pool."),
            limit: int = typer.Option(100, "--limit", min=1, help="At most this many gangs a pool."),
            as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """The gangs waiting in each pool's queue, in the order the resource manager admits them
    (higher priority first, first come first within one). Columns: POOL; # the place in its
    queue; GANG its id (its first task's); JOB; PRIORITY; TASKS how many; CPU and MEM_MB what it
    asks for in all; KIND the rule that holds it aside when only that rule fails (controller,
    non-preemptible, revocable; blank: none); QUEUED when it was queued; NOT BEFORE the end of
    its backoff, for a gang placement sent back. Why a gang waits: `job status JOB` or
    `respool get POOL`."""
    rows = cluster_call(client().pending_gangs, pool, limit)
    if as_json:
        print_json(rows)
        return
    table = Table("pool", "#", "gang", "job", "priority", "tasks", "cpu", "mem_mb", "kind", "queued", "not before")
    for r in rows:
        demand = r["demand"] or {}
        table.add_row(r["pool"], str(r["position"]), r["gang_id"], r["job_id"], str(r["priority"]), str(r["tasks"]),
                      amount(demand.get("cpu")), amount(demand.get("mem_mb")), r["kind"], _when(r["queued_ms"]),
                      _when(r["not_before_ms"]))
    out.print(table)


@tasks_app.command("orphan")
def orphans(pool: str | None = typer.Option(None, "--respool", "--pool", "-r", help=POOL_HELP),
            as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """The task runs the resource manager still holds (queued, or charged to their pool) that the
    job manager has done with: its task moved on to a later run, ended, or went with its job.
    Each goes once the resource manager hears of its end; one that stays is a charge that keeps
    its pool's resources from others. Columns as `resmgr active-list`, STATE '-' where the job
    manager has no such run any more."""
    from peloton.model.states import TASK_TERMINAL

    rows = cluster_call(client().resmgr_tasks, None, pool, None)
    _print_runs([r for r in rows if r["state"] is None or r["state"] in TASK_TERMINAL], as_json)


# Peloton's own paths for the same two commands.
tasks_app.command("active", help=active_list.__doc__)(active_list)
tasks_app.command("pending", help=pending.__doc__)(pending)
