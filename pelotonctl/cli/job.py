"""pelotonctl job: validate, submit, follow and control jobs."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import typer
from rich.table import Table

from pelotonctl.cli.common import (
    EXIT_FAILED,
    EXIT_INVALID,
    EXIT_NOT_FOUND,
    EXIT_TIMEOUT,
    JSON_HELP,
    amount,
    checked,
    client,
    cluster_call,
    commands,
    counted,
    err,
    fail,
    load_settings,
    out,
    print_json,
    read_text,
    say_health,
)

job_app = commands("Jobs: validate, create, status, stop, start, delete, get, query, list.")


@job_app.command("validate")
def job_validate(config: Path, as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """Check a Peloton job file; print what it asks for, or every problem in it (exit 2)."""
    from peloton.model.jobspec import gang_instances
    from pelotonctl.admin import UserError, validate_job

    try:
        spec = validate_job(read_text(config), load_settings())
    except UserError as exc:
        fail(f"{config}: {exc}", EXIT_INVALID)
    summary = {
        "file": str(config), "valid": True, "name": spec.name, "type": spec.type,
        "instances": spec.instance_count, "gangs": len(gang_instances(spec)), "priority": spec.priority,
        "cpu": sum(t.resources.cpu for t in spec.tasks), "mem_mb": sum(t.resources.mem_mb for t in spec.tasks),
        "not_honoured": list(spec.notices),
    }
    if spec.type == "DAEMON":  # its instances are the eligible hosts, known only when it runs
        summary.update(instances=None, gangs=None, per_host=True)
    if as_json:
        print_json(summary)
    elif spec.type == "DAEMON":
        out.print(f"{config}: valid DAEMON job {spec.name!r}: one instance on every UP host its constraint admits, "
                  f"each {amount(summary['cpu'])} cpu and {amount(summary['mem_mb'])} MB", highlight=False)
    else:
        out.print(f"{config}: valid {spec.type} job {spec.name!r}, {counted(spec.instance_count, 'instance')} in "
                  f"{counted(summary['gangs'], 'gang')}, {amount(summary['cpu'])} cpu and {amount(summary['mem_mb'])} "
                  f"MB in all", highlight=False)
    if not as_json:
        for notice in spec.notices:
            out.print(f"  not honoured here: {notice}", highlight=False)


@job_app.command("create")
def job_create(
    pool: str = typer.Argument(..., help="Resource pool path, e.g. /DefaultResPool"),
    config: Path = typer.Argument(..., help="Peloton job YAML"),
    job_id: str | None = typer.Option(None, "--job-id", "--jobID", "-i",
                                      help="The job's id (Peloton's -i/--jobID); a new UUID when not given. "
                                           "Refused if a job has it."),
    wait: bool = typer.Option(False, "--wait", help="Wait until the job ends, showing progress."),
    timeout: float = typer.Option(600, help="Seconds to wait with --wait."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Validate a job file and submit it to POOL: prints `Job <id> created`, as Peloton's CLI does
    (--json: {"job_id": ...}); with --wait, follow it to the end."""
    text = read_text(config)
    job_id = cluster_call(client().submit_job, pool, text, job_id, invalid=f"{config}: ")
    _say_not_honoured(text)
    if not as_json:
        out.print(f"Job {job_id} created", highlight=False)  # Peloton's words: scripts read the id from them
    if not wait:
        if as_json:
            print_json({"job_id": job_id})
        return
    _follow(job_id, timeout, as_json)


def _say_not_honoured(text: str) -> None:
    """Fields of an accepted job that Peloton honours and this scheduler does not, on stderr."""
    from pelotonctl.admin import UserError, validate_job

    try:
        notices = validate_job(text, load_settings()).notices
    except UserError:
        return  # accepted by the cluster under its own limits: nothing to add
    for notice in notices:
        err.print(f"warning: not honoured here: {notice}", highlight=False)


def _follow(job_id: str, timeout: float, as_json: bool) -> None:
    """Wait for a job to end with a progress bar; exit 0 SUCCEEDED, 1 other end, 4 timed out."""
    from peloton.model.states import JOB_TERMINAL
    from pelotonctl.watch import wait_for_jobs

    cluster = client()
    results = wait_for_jobs(lambda j: cluster_call(cluster.job_summary, j, why=False), [job_id], timeout,
                            None if as_json else out)
    state = results[job_id]["state"]
    if as_json:
        print_json(results[job_id])
    else:
        out.print(f"job {job_id} {state}", highlight=False)
    if state not in JOB_TERMINAL:
        raise typer.Exit(EXIT_TIMEOUT)
    if state != "SUCCEEDED":
        raise typer.Exit(EXIT_FAILED)


@job_app.command("status")
def job_status(
    job_id: str,
    wait: bool = typer.Option(False, "--wait", help="Follow the job to its end, showing progress."),
    timeout: float = typer.Option(600, help="Seconds to wait with --wait."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """A job's state, its tasks' states, and why it waits: through the API, also the stages it waits
    on that have no live instance or do not keep up (its statuses are not applied then), and the
    hosts of its runs whose agents are silent; with --wait, follow it to the end."""
    summary = cluster_call(client().job_summary, job_id)
    if summary is None:
        fail(f"no job {job_id}", EXIT_NOT_FOUND)
    if wait:
        _follow(job_id, timeout, as_json)
        return
    if as_json:
        print_json(summary)
        return
    out.print(f"job {summary['job_id']} ({summary['name']}) in {summary['pool']}: [bold]{summary['state']}[/bold]",
              highlight=False)
    out.print("tasks: " + ", ".join(f"{k} {v}" for k, v in sorted(summary["tasks"].items())), highlight=False)
    say_health(summary)  # right under the counts: they may be stale
    # Gangs of a job mostly wait for one reason: said once, with how many.
    same: dict[str, list[dict]] = {}
    for w in summary.get("waiting", []):
        same.setdefault(re.sub(r" for \d+(\.\d+)?s\b", "", w["reason"]), []).append(w)
    for reason, gangs in same.items():
        tasks = sum(w["tasks"] for w in gangs)
        which = f"gang {gangs[0]['gang_id']}" if len(gangs) == 1 else f"{len(gangs)} gangs from {gangs[0]['gang_id']}"
        out.print(f"waiting: {which} ({tasks} tasks): {reason if len(gangs) > 1 else gangs[0]['reason']}",
                  highlight=False)
    for u in summary.get("unplaced", []):
        out.print(f"instance {u['instance']} found no host: {u['message']}", highlight=False)
    for d in summary.get("daemon_hosts", []):  # a DAEMON job: every host, and why one runs none
        where = f"instance {d['instance']} {d['state']}" if d["instance"] is not None else "no instance"
        out.print(f"host {d['host']}: {where}" + (f" ({d['why']})" if d["why"] else ""), highlight=False)
    hosts: dict[str, list[dict]] = {}
    for late in summary.get("not_started", []):
        hosts.setdefault(late["host_id"], []).append(late)
    for host_id, runs in hosts.items():
        instances = ", ".join(str(r["instance"]) for r in runs[:10]) + (", ..." if len(runs) > 10 else "")
        out.print(f"not started on {host_id}: {len(runs)} tasks (instances {instances}) launched up to "
                  f"{runs[0]['seconds']:.0f}s ago; its agent has not reported them: it is behind on its commands or "
                  f"cannot reach the broker (they wait for it until it reads them, or the host goes DOWN)",
                  highlight=False)
    unlisted = summary.get("not_started_tasks", 0) - len(summary.get("not_started", []))
    if unlisted > 0:
        out.print(f"not started: {unlisted} tasks more", highlight=False)
    for f in summary.get("failures", []):
        out.print(f"instance {f['instance']} run {f['run_id']} {f['state']}: {f['message'] or f['reason']}",
                  highlight=False)


INSTANCES_HELP = "Ranges, e.g. 0-3,7 (or Peloton's half-open 0:4)."


def _control(kind: str, job_id: str, instances: str | None, batch_size: int = 0, config: str | None = None,
             options=None) -> dict:
    return cluster_call(client().control_job, kind, job_id, instances, batch_size, config, options=options)


@job_app.command("stop")
def job_stop(job_id: str | None = typer.Argument(None, help="The job; none: every job not ended of --owner "
                                                             "(and --labels), Peloton's bulk stop."),
             instances: str | None = typer.Option(None, "--instances", help=INSTANCES_HELP),
             batch_size: int = typer.Option(0, "--batch-size", min=0, help="Tasks stopped at a time, each batch once "
                                            "the last has ended (a rolling stop, followed by `update get`); 0: all."),
             wait: bool = typer.Option(False, "--wait", help="Wait until every stopped task has ended."),
             timeout: float = typer.Option(120, help="Seconds to wait with --wait."),
             as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
             owner: str | None = typer.Option(None, "--owner", help="Peloton's bulk stop: the jobs of this owner "
                                                                    "(owningTeam, else owner)."),
             labels: str | None = typer.Option(None, "--labels", "-l", help="With --owner: only jobs with every "
                                                                            "one of these labels, k1=v1,k2=v2."),
             force: bool = typer.Option(False, "--force", "-f", help="Bulk stop without asking first."),
             limit: int = typer.Option(100, "--limit", "-n", min=1, help="Bulk stop: at most this many jobs.")) -> None:
    """Stop a job (or some of its instances): their tasks are killed on their hosts, process and
    children, and their resources released; the job ends KILLED when every task has ended. Without
    a job, Peloton's bulk stop: every job not ended of --owner (with every label of --labels), listed
    and confirmed first unless --force."""
    if job_id is None:
        _stop_many(owner, labels, force, limit, as_json)
        return
    if owner or labels:
        _check_owner_labels(job_id, owner, labels)
    stop_instances(job_id, instances, batch_size, wait, timeout, as_json)


def stop_instances(job_id: str, instances: str | None, batch_size: int = 0, wait: bool = False,
                   timeout: float = 120, as_json: bool = False) -> None:
    """A job's stop (of some instances), as `job stop` and Peloton's forms of it say it."""
    done = _control("STOP", job_id, instances, batch_size)
    if wait:
        _wait_tasks(job_id, done["instances"], lambda t: t["state"] in ("KILLED", "SUCCEEDED", "FAILED", "LOST"),
                    timeout)
    if as_json:
        print_json(done)
    else:
        rolling = f", {batch_size} at a time (update {done['update_id']})" if done.get("update_id") else ""
        out.print(f"job {job_id}: stopping {len(done['instances'])} tasks{rolling}", highlight=False)


@job_app.command("start")
def job_start(job_id: str, instances: str | None = typer.Option(None, "--instances", help=INSTANCES_HELP),
              batch_size: int = typer.Option(0, "--batch-size", min=0, help="Tasks started at a time, each batch "
                                             "once the last runs (a rolling start, followed by `update get`); 0: all."),
              as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """Run stopped (KILLED) instances of a job again, each as a new run."""
    done = _control("START", job_id, instances, batch_size)
    if as_json:
        print_json(done)
    else:
        rolling = f", {batch_size} at a time (update {done['update_id']})" if done.get("update_id") else ""
        out.print(f"job {job_id}: starting {len(done['instances'])} tasks again{rolling}", highlight=False)


@job_app.command("restart")
def job_restart(job_id: str, instances: str | None = typer.Option(None, "--instances", help=INSTANCES_HELP),
                batch_size: int = typer.Option(0, "--batch-size", help="Tasks replaced at a time (0: all at once)."),
                start_paused: bool = typer.Option(False, "--start-paused", help="Wait for `update resume` before "
                                                                                 "the first batch."),
                in_place: bool = typer.Option(False, "--in-place", help="Each new run goes back to the host of "
                                                                        "the run it replaces where it fits."),
                quiet: bool = typer.Option(False, "--quiet", "-q", help="Print only the update's id."),
                as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """Replace running tasks with new runs, BATCH-SIZE at a time: the next batch goes once the
    last one's new runs are running (and HEALTHY, where a health check is set). The restart is an
    update workflow (`pelotonctl update`)."""
    from stages.admit.workflow import UpdateOptions

    done = _control("RESTART", job_id, instances, options=UpdateOptions(batch_size=batch_size,
                                                                         start_paused=start_paused, in_place=in_place))
    if quiet:
        out.print(done["update_id"])
    elif as_json:
        print_json(done)
    else:
        out.print(f"job {job_id}: restarting {len(done['instances'])} tasks (update {done['update_id']})",
                  highlight=False)


def _stop_many(owner: str | None, labels: str | None, force: bool, limit: int, as_json: bool) -> None:
    """Peloton's `job stop --owner O [--labels k=v,...] [-f]`: the matching jobs not ended, stopped
    one by one once confirmed."""
    from pelotonctl.queries import JobQuery, labels_of, words

    if not owner:
        fail("give a job, or --owner (with --labels) to stop every job of that owner", EXIT_INVALID)
    query = checked(lambda: JobQuery(("INITIALIZED", "PENDING", "RUNNING"), None, owner, None,
                                     labels_of(words(labels or "")), limit=limit))
    rows = cluster_call(client().query_jobs, query)
    if not rows:
        if as_json:
            print_json({"stopped": []})
        else:
            out.print("No matching job(s) found", highlight=False)
        return
    if not as_json:
        for r in rows:
            out.print(f"{r['job_id']}  {r['name']}  {r['pool']}  {r['state']}", highlight=False)
    if not force and not typer.confirm(f"The above {len(rows)} jobs will be stopped. Continue?"):
        raise typer.Exit(EXIT_INVALID)
    stopped = [_control("STOP", r["job_id"], None)["job_id"] for r in rows]
    if as_json:
        print_json({"stopped": stopped})
    else:
        out.print(f"stopping {len(stopped)} jobs", highlight=False)


def _check_owner_labels(job_id: str, owner: str | None, labels: str | None) -> None:
    """With a job given, --owner and --labels must describe it (Peloton stops nothing otherwise)."""
    from pelotonctl.queries import labels_of, words

    job = cluster_call(client().job, job_id)
    if job is None:
        fail(f"no job {job_id}", EXIT_NOT_FOUND)
    config = job.get("config") if isinstance(job.get("config"), dict) else {}
    have = {(str(lb.get("key")), str(lb.get("value"))) for lb in (config.get("labels") or []) if isinstance(lb, dict)}
    wanted = set(checked(lambda: labels_of(words(labels or ""))))
    if (owner and job.get("owner") != owner) or (wanted and not wanted & have):
        fail(f"job {job_id} is not one of {owner or 'any owner'}'s with those labels: nothing stopped", EXIT_NOT_FOUND)


# Peloton's CLI forms: `job rolling-restart|rolling-start|rolling-stop JOB BATCH-SIZE [-r FROM:TO]...`,
# each the same workflow as restart, start or stop with --batch-size (ranges half-open, as Peloton's).
RANGE_HELP = "Instances FROM:TO, half-open as in Peloton (0:4 is 0-3; either end may be left out); give it " \
             "again for more ranges. Default: every instance."


def peloton_ranges(ranges: list[str] | None) -> str | None:
    return ",".join(ranges) if ranges else None


@job_app.command("rolling-restart")
def job_rolling_restart(job_id: str,
                        batch_size: int = typer.Argument(..., min=1, help="Instances restarted at a time."),
                        ranges: list[str] | None = typer.Option(None, "--range", "-r", help=RANGE_HELP),
                        in_place: bool = typer.Option(False, "--in-place", help="Each new run goes back to the "
                                                                                "host of the run it replaces where "
                                                                                "it fits."),
                        as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """Peloton's rolling restart: `job restart JOB --batch-size N`, instances by Peloton's ranges."""
    job_restart(job_id, peloton_ranges(ranges), batch_size, False, in_place, False, as_json)


@job_app.command("rolling-start")
def job_rolling_start(job_id: str, batch_size: int = typer.Argument(..., min=1, help="Instances started at a time."),
                      ranges: list[str] | None = typer.Option(None, "--range", "-r", help=RANGE_HELP),
                      as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """Peloton's rolling start: `job start JOB --batch-size N`, instances by Peloton's ranges."""
    job_start(job_id, peloton_ranges(ranges), batch_size, as_json)


@job_app.command("rolling-stop")
def job_rolling_stop(job_id: str, batch_size: int = typer.Argument(..., min=1, help="Instances stopped at a time."),
                     ranges: list[str] | None = typer.Option(None, "--range", "-r", help=RANGE_HELP),
                     as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """Peloton's rolling stop: `job stop JOB --batch-size N`, instances by Peloton's ranges."""
    stop_instances(job_id, peloton_ranges(ranges), batch_size, as_json=as_json)


@job_app.command("update")
def job_update(job_id: str, config: Path, batch_size: int = typer.Option(
        0, "--batch-size", help="Tasks replaced at a time when their config changed (default: updateConfig.batchSize, "
                                "else all at once)."),
               max_instance_retries: int = typer.Option(
                   0, "--max-instance-retries", help="Failed new runs before an instance counts as failed "
                                                     "(default: updateConfig.maxInstanceAttempts, else never)."),
               max_failure_instances: int = typer.Option(
                   0, "--max-failure-instances", help="Failed instances before the update fails (default: "
                                                      "updateConfig.maxFailureInstances, else never)."),
               rollback_on_failure: bool = typer.Option(
                   False, "--rollback-on-failure", help="A failed update puts the previous config back."),
               start_paused: bool = typer.Option(False, "--start-paused", help="Wait for `update resume` before "
                                                                                "the first batch."),
               in_place: bool = typer.Option(False, "--in-place", help="Each new run goes back to the host of the "
                                                                       "run it replaces where it fits (default: "
                                                                       "updateConfig.inPlace)."),
               quiet: bool = typer.Option(False, "--quiet", "-q", help="Print only the update's id."),
               as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """A new config version for a job: more instances start (or the extra ones stop, highest
    first, and end DELETED), and tasks whose config changed are replaced by new runs in batches.
    name, type and pool cannot change;
    changeLog.version, when given, must be the job's current version. The update is a workflow
    with an id: `pelotonctl update get|pause|resume|abort|rollback UPDATE`."""
    from stages.admit.workflow import UpdateOptions

    options = UpdateOptions(batch_size, max_instance_retries, max_failure_instances, rollback_on_failure,
                            start_paused, in_place)
    done = _control("UPDATE", job_id, None, config=read_text(config), options=options)
    if quiet:
        out.print(done["update_id"])
    elif as_json:
        print_json(done)
    else:
        added, removed = done.get("added", []), done.get("removed", [])
        new = f"{len(added)} new instance{'' if len(added) == 1 else 's'}"
        if added:
            new += f" ({added[0]}-{added[-1]})" if len(added) > 1 else f" ({added[0]})"
        if removed:
            new += f", instance{'s' if len(removed) > 1 else ''} " + (
                f"{removed[0]}-{removed[-1]}" if len(removed) > 1 else f"{removed[0]}") + " removed"
        out.print(f"job {job_id}: updating, {new}, {len(done['instances'])} tasks to replace (update "
                  f"{done['update_id']})", highlight=False)


@job_app.command("delete")
def job_delete(job_id: str, keep_volumes: bool = typer.Option(
        False, "--keep-volumes", help="Keep the job's persistent volumes on their hosts (`volume delete` removes "
                                      "them later)."),
               as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """Delete a terminal job with its tasks and their events, and its persistent volumes (their
    directories removed from their hosts) unless --keep-volumes."""
    done = cluster_call(client().delete_job, job_id, keep_volumes)
    if as_json:
        print_json(done)
        return
    deleted, kept = done.get("volumes_deleted", []), done.get("volumes_kept", [])
    said = f"job {job_id}: deleted"
    if deleted:
        said += f", with its volume{'s' if len(deleted) > 1 else ''} {', '.join(deleted)}"
    if kept:
        said += f"; volume{'s' if len(kept) > 1 else ''} kept: {', '.join(kept)}"
    out.print(said, highlight=False, soft_wrap=True)


def _wait_tasks(job_id: str, instances: list[int], done, timeout: float) -> None:
    import time

    cluster, wanted = client(), set(instances)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(done(t) for t in cluster_call(cluster.tasks, job_id) or () if t["instance"] in wanted):
            return
        time.sleep(0.2)
    fail(f"job {job_id}: tasks still running after {timeout:g}s", EXIT_TIMEOUT)


@job_app.command("get")
def job_get(job_id: str, version: int | None = typer.Option(None, "--version", min=1,
                                                            help="The config of this version (default: the current)."),
            as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """A job's config (as submitted) and runtime: state, times, task counts, the update in progress."""
    import yaml

    info = cluster_call(client().job, job_id, version)
    if info is None:
        fail(f"no job {job_id}", EXIT_NOT_FOUND)
    if as_json:
        print_json(info)
    else:
        sys.stdout.write(yaml.safe_dump(info, sort_keys=False))


# Peloton's `job query` flags beside ours: comma lists (--states A,B) and repeats (--state A --state B)
# are one option; -r/--respool is --pool; the short letters are its CLI's.
@job_app.command("query")
def job_query(state: list[str] = typer.Option([], "--state", "--states", "-s",
                                              help="Job states, e.g. RUNNING,PENDING (Peloton's JOB_STATE_RUNNING "
                                                   "too); repeat or comma-separate: any may match."),
              pool: str | None = typer.Option(None, "--pool", "--respool", "-r",
                                              help="Only jobs of this pool, e.g. /team (Peloton's --respool)."),
              owner: str | None = typer.Option(None, "--owner", help="Only jobs of this owner (owningTeam, "
                                                                     "else owner)."),
              name: str | None = typer.Option(None, "--name", help="Only jobs with this name (exactly)."),
              label: list[str] = typer.Option([], "--label", "--labels", "-l",
                                              help="KEY=VALUE, e.g. team=a,tier=1; repeat or comma-separate: all "
                                                   "must match."),
              keywords: list[str] = typer.Option([], "--keywords", "-k",
                                                 help="Words, e.g. nightly,etl: each must occur, in any case, in the "
                                                      "job's config (its name, owner, labels, description, command; "
                                                      "instanceConfig aside), as in Peloton."),
              days: int = typer.Option(0, "--timerange", "-d", min=0,
                                       help="Only jobs created within the last DAYS days (0: any time), as "
                                            "Peloton's --timerange."),
              sort: list[str] = typer.Option(["creation_time"], "--sort", "-p",
                                             help="Properties to sort by, e.g. name,creation_time: creation_time, "
                                                  "completion_time, update_time, name, owner, state, instance_count, "
                                                  "job_type, respool_id."),
              sort_order: str = typer.Option("DESC", "--sortorder", "-a", help="ASC or DESC (for every --sort)."),
              offset: int = typer.Option(0, "--offset", "-o", min=0, help="Skip this many matching jobs first."),
              limit: int = typer.Option(100, "--limit", "-n", min=0,
                                        help="At most this many jobs (0: Peloton's default, 100)."),
              total: int = typer.Option(0, "--total", "-q", "--max-limit", min=0,
                                        help="Peloton's --total (maxLimit): the query yields at most this many "
                                             "jobs, and --offset and --limit page within them (0: no bound)."),
              as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """Jobs by state, pool, owner, name, labels, keywords and creation time, the most recent first
    (or as --sort says), a page at a time: ours and Peloton's forms alike."""
    import time

    from pelotonctl.queries import JobQuery, job_states, labels_of, words
    from pelotonctl.queries import sort_order as order

    def query() -> JobQuery:
        since = int(time.time() * 1000) - days * 86_400_000 if days else None
        return JobQuery(tuple(job_states(words(state))), pool, owner, name, labels_of(words(label)),
                        tuple(words(keywords)), since, tuple(words(sort)) or ("creation_time",), order(sort_order),
                        offset, limit or 100, total or None)
    rows = cluster_call(client().query_jobs, checked(query))
    if as_json:
        print_json(rows)
        return
    table = Table("job", "name", "pool", "owner", "state", "instances")
    for r in rows:
        table.add_row(r["job_id"], r["name"], r["pool"], r["owner"], r["state"], str(r["instances"]))
    out.print(table)


@job_app.command("active-list")
def job_active_list(limit: int = typer.Option(10_000, "--limit", min=1, help="At most this many jobs."),
                    as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """Every job not ended yet (Peloton's active-list), the oldest first."""
    from peloton.model.states import JOB_STATES, JOB_TERMINAL
    from pelotonctl.queries import JobQuery

    active = tuple(s for s in JOB_STATES if s not in JOB_TERMINAL)
    _print_jobs(cluster_call(client().query_jobs, checked(JobQuery, states=active, descending=False, limit=limit)),
                as_json)


@job_app.command("list")
def job_list(limit: int = typer.Option(20, "--limit", help="At most this many jobs."),
             as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """The most recent jobs."""
    from pelotonctl.queries import JobQuery

    _print_jobs(cluster_call(client().query_jobs, checked(JobQuery, limit=limit)), as_json)


def _print_jobs(rows: list[dict], as_json: bool) -> None:
    if as_json:
        print_json(rows)
        return
    table = Table("job", "name", "pool", "state", "instances")
    for r in rows:
        table.add_row(r["job_id"], r["name"], r["pool"], r["state"], str(r["instances"]))
    out.print(table)
