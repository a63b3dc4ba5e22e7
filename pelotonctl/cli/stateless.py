"""pelotonctl job stateless: Peloton's `job stateless replace-diff`, what a replace (an update) of
a job with a new spec would do to each instance, sent nowhere, and `job stateless workflow events`,
where the job's latest workflow (update or restart) is, with the job or with one instance. The
other `job stateless` forms are the job commands (docs/peloton/migration.md)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import typer
import yaml
from rich.table import Table

from pelotonctl.cli.common import (
    EXIT_NOT_FOUND,
    JSON_HELP,
    checked,
    client,
    cluster_call,
    commands,
    fail,
    out,
    print_json,
    read_text,
)

stateless_app = commands("Peloton's stateless job forms: replace-diff, workflow events.")
workflow_app = commands("Peloton's workflow forms: events (pause, resume, abort: `update pause|resume|abort`).")
stateless_app.add_typer(workflow_app, name="workflow")


def replace_diff(old_text: str, new_text: str) -> dict[str, list[int]]:
    """Instances a replace adds, removes, updates (their task config changes) and leaves as they are."""
    from pelotonctl.admin import validate_job
    from stages.admit.commands import replace_diff as diff

    return diff(validate_job(old_text), validate_job(new_text))


@stateless_app.command("replace-diff")
def stateless_replace_diff(job_id: str, spec: Path,
                           respool: str | None = typer.Argument(None, help="Peloton's form: the pool path (a replace "
                                                                          "keeps the job's pool)."),
                           entity_version: str | None = typer.Argument(None, help="Peloton's form: accepted; the "
                                                                                  "diff is against the job as it is."),
                           as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """Which instances replacing the job's spec with SPEC would add, remove, update and leave
    alone, as Peloton's `job stateless replace-diff` (nothing is sent)."""
    del entity_version
    job = cluster_call(client().job, job_id)
    if job is None:
        fail(f"no job {job_id}", EXIT_NOT_FOUND)
    if respool and respool.rstrip("/") != job["pool"]:
        fail(f"job {job_id} is in {job['pool']}, not {respool}: a replace keeps the job's pool", 2)
    current = job["config"] if isinstance(job["config"], str) else yaml.safe_dump(job["config"])
    diff = checked(replace_diff, current, read_text(spec))
    if as_json:
        print_json(diff)
        return
    for key, instances in diff.items():
        out.print(f"{key.replace('_', ' ')}: {', '.join(map(str, instances)) or 'none'}", highlight=False)


def latest_workflow(workflows: list[dict]) -> dict | None:
    """Peloton's "most recent workflow operation on the job": the one in progress, else the newest
    (`workflows` newest first, as `update list` gives them)."""
    from stages.admit.workflow import ACTIVE

    return next((w for w in workflows if w["state"] in ACTIVE), workflows[0] if workflows else None)


def workflow_events(wf: dict, instance: int | None = None) -> list[dict]:
    """A workflow's events, newest first, as the gRPC API's GetWorkflowEvents and WorkflowInfo give
    them (pelotonctl/api/rpc/v1_shapes.py; a test holds the two together). A workflow keeps its
    state, not its history: without `instance`, the state it began in (at its creation) and, when
    another, the state it is in (at its last change); with one, where it is with that instance:
    begun when the workflow began, then SUCCEEDED, FAILED or in flight as of its last change (no
    time is kept per instance); none for an instance it does not take, or never reached."""
    from stages.admit.workflow import ACTIVE, FAILED, PAUSED, ROLLING_FORWARD, SUCCEEDED

    def event(state: str, ms: int | None) -> dict:
        return {"state": state, "type": wf["kind"], "timestamp_ms": ms or None}

    if instance is None:
        first = PAUSED if wf["options"].get("start_paused") and wf["instances"] else ROLLING_FORWARD
        since = [event(wf["state"], wf["updated_ms"])] if wf["state"] != first else []
        return [*since, event(first, wf["created_ms"])]
    added = wf.get("added") or []
    if instance not in wf["instances"] and instance not in added:
        return []
    begun = event(ROLLING_FORWARD, wf["created_ms"])
    if instance in wf["failed"]:
        now = FAILED
    elif instance in wf["done"]:
        now = SUCCEEDED
    elif instance in wf["in_flight"] or instance in added:
        now = wf["state"]
    else:  # not reached yet; never, if the workflow ended first
        return [begun] if wf["state"] in ACTIVE else []
    return [begun] if now == ROLLING_FORWARD else [event(now, wf["updated_ms"]), begun]


def _when(ms: int | None) -> str:
    return datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] if ms else "-"


@workflow_app.command("events")
def workflow_events_command(job_id: str,
                            instance: int | None = typer.Argument(None, min=0, help="An instance of the job: where "
                                                                  "the workflow is with it (default: the workflow's "
                                                                  "own states)."),
                            as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """Events of the job's most recent workflow (its update or restart in progress, else its last),
    newest first, as Peloton's `job stateless workflow events JOB INSTANCE`: state, type, time.
    Workflows here keep their state, not their history, so the events are the state the workflow
    began in (at its creation) and the state it is in (at its last change); with INSTANCE, where it
    is with that instance: ROLLING_FORWARD when the workflow began, then SUCCEEDED, FAILED or in
    flight as of the workflow's last change (no time is kept per instance), none for an instance it
    does not take. Every state change of the instance's runs, timed: `task events JOB INSTANCE`."""
    wf = latest_workflow(cluster_call(client().updates, job_id))
    events = workflow_events(wf, instance) if wf else []
    if as_json:
        print_json({"job_id": job_id, "instance": instance, "update_id": wf and wf["update_id"],
                    "type": wf and wf["kind"], "state": wf and wf["state"], "events": events})
        return
    if wf is None:
        out.print(f"job {job_id} has had no workflow (no update or restart)", highlight=False)
        return
    out.print(f"update {wf['update_id']} ({wf['kind'].lower()} of job {job_id}): [bold]{wf['state']}[/bold]"
              + ("" if instance is None else f"; instance {instance}"), highlight=False)
    if not events:
        out.print(f"no events: instance {instance} is not one this workflow takes, or it ended before reaching it",
                  highlight=False)
        return
    table = Table("state", "type", "time")
    for e in events:
        table.add_row(e["state"], e["type"], _when(e["timestamp_ms"]))
    out.print(table)
