"""pelotonctl task: the tasks of a job, their events and logs."""

from __future__ import annotations

import sys

import typer
from rich.table import Table

from pelotonctl.cli.common import (
    EXIT_INVALID,
    EXIT_NOT_FOUND,
    JSON_HELP,
    checked,
    client,
    cluster_call,
    commands,
    fail,
    out,
    print_json,
    say_health,
)
from pelotonctl.cli.job import RANGE_HELP, job_restart, job_start, peloton_ranges, stop_instances

task_app = commands("Tasks of a job: list, query, get, events, logs; stop, start and restart by Peloton's ranges.")


@task_app.command("list")
def task_list(job_id: str, as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
              instance_range: str | None = typer.Option(None, "--range", "-r", help="Only instances FROM:TO, "
                                                        "half-open as in Peloton (0:4 is 0-3; either end may be "
                                                        "left out).")) -> None:
    """Every task of a job (or of a range of its instances): instance, run, state, health, host,
    exit code, message. Through the API, then the stages the job waits on that have no live
    instance or do not keep up (the states shown may be stale), and the silent hosts of its tasks
    (on stderr with --json)."""
    listing = cluster_call(client().task_listing, job_id)
    rows = (listing or {}).get("tasks")
    if not rows:
        fail(f"no job {job_id}", EXIT_NOT_FOUND)
    if instance_range is not None:
        first, stop = _half_open(instance_range)
        rows = [r for r in rows if first <= r["instance"] and (stop is None or r["instance"] < stop)]
    if as_json:
        print_json(rows)
        say_health(listing, to_stderr=True)
        return
    table = Table("instance", "run", "state", "health", "host", "exit", "message")
    for r in rows:
        table.add_row(str(r["instance"]), str(r["run_id"]), r["state"], r.get("health") or "", r["host"],
                      "" if r["exit_code"] is None else str(r["exit_code"]), r["message"])
    out.print(table)
    say_health(listing)


@task_app.command("query")
def task_query(job_id: str,
               states: list[str] = typer.Option([], "--states", "--state", "-s",
                                                help="Task states, e.g. RUNNING,FAILED (Peloton's words); repeat or "
                                                     "comma-separate: any may match."),
               names: list[str] = typer.Option([], "--names", help="Task names (the config's `name`), comma-"
                                                                   "separated: any may match."),
               hosts: list[str] = typer.Option([], "--hosts", help="Hosts of the tasks' current runs, comma-"
                                                                   "separated: any may match."),
               limit: int = typer.Option(100, "--limit", "-n", min=0, help="At most this many tasks (0: Peloton's "
                                                                           "default, 100)."),
               offset: int = typer.Option(0, "--offset", "-o", min=0, help="Skip this many matching tasks first."),
               sort: list[str] = typer.Option([], "--sort", "-p",
                                              help="Properties to sort by, e.g. state,host: creation_time (when the "
                                                   "current run started RUNNING), host, instance_id, message, name, "
                                                   "reason, state (in a run's life order). Default: instance."),
               sort_order: str = typer.Option("ASC", "--sortorder", "-a", help="ASC or DESC (for every --sort)."),
               as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """A job's tasks by state, name and host, sorted and a page at a time (Peloton's task query):
    instance, task name, run, state, health, host, exit code, reason, message."""
    from pelotonctl.queries import TaskQuery, task_states, words
    from pelotonctl.queries import sort_order as order

    query = checked(lambda: TaskQuery(tuple(task_states(words(states))), tuple(words(names)), tuple(words(hosts)),
                                      tuple(words(sort)), order(sort_order), offset, limit or 100))
    rows = cluster_call(client().query_tasks, job_id, query)["tasks"]
    if as_json:
        print_json(rows)
        return
    table = Table("instance", "name", "run", "state", "health", "host", "exit", "reason", "message")
    for r in rows:
        table.add_row(str(r["instance"]), r["name"], str(r["run_id"]), r["state"], r.get("health") or "", r["host"],
                      "" if r["exit_code"] is None else str(r["exit_code"]), r["reason"] or "", r["message"])
    out.print(table)


@task_app.command("get")
def task_get(job_id: str, instance: int, as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """One task: its current run, state, host, exit code, reason and message."""
    info = cluster_call(client().task, job_id, instance)
    if info is None:
        fail(f"no instance {instance} of job {job_id}", EXIT_NOT_FOUND)
    if as_json:
        print_json(info)
    else:
        for key, value in info.items():
            out.print(f"{key:12} {value}", highlight=False)


@task_app.command("events")
def task_events(job_id: str, instance: int, as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """Every state change of every run of one task: time, run, state, host, reason, message, exit code."""
    import datetime

    events = cluster_call(client().task_events, job_id, instance)
    if events is None:
        fail(f"no job {job_id}", EXIT_NOT_FOUND)
    if as_json:
        print_json(events)
        return
    table = Table("time", "run", "state", "host", "reason", "exit", "message")
    for e in events:
        at = datetime.datetime.fromtimestamp(e["timestamp_ms"] / 1000).strftime("%H:%M:%S.%f")[:-3]
        table.add_row(at, str(e["run_id"]), e["state"], e["host_id"] or "", e["reason"] or "",
                      "" if e["exit_code"] is None else str(e["exit_code"]), e["message"] or "")
    out.print(table)


@task_app.command("logs")
def task_logs(job_id: str, instance: int,
              task_id: str | None = typer.Argument(None, help="Peloton's form: the run's task id "
                                                   "(JOB-INSTANCE-RUN), for an earlier run than the current one."),
              run: int | None = typer.Option(None, "--run", help="Run id (default: the current run)."),
              stderr: bool = typer.Option(False, "--stderr", help="Standard error instead of standard output."),
              filename: str = typer.Option("stdout", "--filename", "-f", help="Peloton's form: stdout or stderr."),
              tail: int = typer.Option(0, "--tail", help="Only the last N lines (0: all).")) -> None:
    """A task run's standard output (or error): through the API from the host that ran it, or
    without an API from its sandbox on this machine."""
    if filename not in ("stdout", "stderr"):
        fail(f"--filename {filename}: a run keeps stdout and stderr only (no other file of its sandbox is served)",
             EXIT_INVALID)
    if task_id:
        prefix, _, number = task_id.rpartition("-")
        if prefix != f"{job_id}-{instance}" or not number.isdigit():
            fail(f"task id {task_id!r}: expected {job_id}-{instance}-RUN", EXIT_INVALID)
        run = int(number)
    data = cluster_call(client().task_log, job_id, instance, run, stderr or filename == "stderr")
    if tail > 0:
        data = b"\n".join(data.rstrip(b"\n").split(b"\n")[-tail:]) + b"\n"
    sys.stdout.buffer.write(data)


def _half_open(text: str) -> tuple[int, int | None]:
    """Peloton's FROM:TO (either end may be left out) as (first, stop); stop None: to the end."""
    first, sep, stop = text.partition(":")
    if not sep or not (first.strip() or "0").isdigit() or not (stop.strip() or "0").isdigit():
        fail(f"--range {text!r}: expected FROM:TO, e.g. 0:4 (instances 0-3)", EXIT_INVALID)
    return int(first or 0), (int(stop) if stop.strip() else None)


# Peloton's per-instance forms: `task stop|start|restart JOB [-r FROM:TO]...`, the job commands on
# those instances (every one when no range is given).
@task_app.command("stop")
def task_stop(job_id: str, ranges: list[str] | None = typer.Option(None, "--range", "-r", help=RANGE_HELP),
              as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """Stop the job's instances in the ranges (Peloton's `task stop`): `job stop --instances`."""
    stop_instances(job_id, peloton_ranges(ranges), as_json=as_json)


@task_app.command("start")
def task_start(job_id: str, ranges: list[str] | None = typer.Option(None, "--range", "-r", help=RANGE_HELP),
               as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """Run the job's stopped instances in the ranges again (Peloton's `task start`)."""
    job_start(job_id, peloton_ranges(ranges), 0, as_json)


@task_app.command("restart")
def task_restart(job_id: str, ranges: list[str] | None = typer.Option(None, "--range", "-r", help=RANGE_HELP),
                 as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """Replace the job's running instances in the ranges with new runs, all at once (Peloton's
    `task restart`)."""
    job_restart(job_id, peloton_ranges(ranges), 0, False, False, False, as_json)
