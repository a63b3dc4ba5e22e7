"""pelotonctl watch: Peloton's `watch job` and `watch pod`, a line per change of a job's state or
of a pod's (a task's run, state or host), until Ctrl-C or --for seconds. They read what `job
status` and `task list` read, once a second, through the API where one is configured."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable

import typer

from pelotonctl.cli.common import JSON_HELP, checked, client, cluster_call, commands, out

watch_app = commands("Peloton's watch: job and pod changes as they happen.")
POLL_S = 1.0


def _follow(read: Callable[[], dict[str, dict]], say: Callable[[str, dict | None, dict], None],
            seconds: float) -> None:
    """Calls read() every POLL_S and say(key, before, now) for each entry new or changed."""
    seen: dict[str, dict] = {}
    end = time.monotonic() + seconds if seconds > 0 else float("inf")
    try:
        while True:
            for key, now in sorted(read().items()):
                if seen.get(key) != now:
                    say(key, seen.get(key), now)
                    seen[key] = now
            if time.monotonic() + POLL_S > end:
                return
            time.sleep(POLL_S)
    except KeyboardInterrupt:
        return


def _line(change: dict) -> None:
    """A change as one line of JSON (a stream a script reads line by line)."""
    sys.stdout.write(json.dumps(change, sort_keys=True) + "\n")
    sys.stdout.flush()


def _stamp() -> str:
    return time.strftime("%H:%M:%S")


@watch_app.command("job")
def watch_job(job_ids: list[str] = typer.Argument(None, help="Jobs to watch (default: those --labels names)."),
              labels: list[str] = typer.Option([], "--labels", help="KEY:VALUE (Peloton's form) or KEY=VALUE; jobs "
                                                                    "with every label, not ended, when no job is "
                                                                    "named."),
              seconds: float = typer.Option(0, "--for", min=0, help="Stop after this many seconds (0: at Ctrl-C)."),
              as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """A line each time a watched job's state or task counts change."""
    from pelotonctl.queries import JobQuery, labels_of, words

    wanted = list(job_ids or [])
    if not wanted:
        pairs = [w.replace(":", "=", 1) if "=" not in w else w for w in words(labels)]
        query = checked(lambda: JobQuery(("INITIALIZED", "PENDING", "RUNNING", "KILLING"),
                                         labels=labels_of(pairs), limit=1000))
        wanted = [r["job_id"] for r in cluster_call(client().query_jobs, query)]

    def read() -> dict[str, dict]:
        found = {}
        for job_id in wanted:
            summary = cluster_call(client().job_summary, job_id, False)
            found[job_id] = {"state": summary["state"], "tasks": summary["tasks"]} if summary else {"state": "GONE",
                                                                                                     "tasks": {}}
        return found

    def say(job_id: str, before: dict | None, now: dict) -> None:
        if as_json:
            _line({"job_id": job_id, **now})
            return
        counts = ", ".join(f"{k} {v}" for k, v in sorted(now["tasks"].items()))
        was = f"{before['state']} -> " if before and before["state"] != now["state"] else ""
        out.print(f"{_stamp()} job {job_id}: {was}{now['state']} ({counts or 'no tasks'})", highlight=False)
    _follow(read, say, seconds)


@watch_app.command("pod")
def watch_pod(job_id: str, pods: list[str] = typer.Argument(None, help="Pod names (JOB-INSTANCE, Peloton's) or "
                                                                      "instance numbers; default: every pod."),
              seconds: float = typer.Option(0, "--for", min=0, help="Stop after this many seconds (0: at Ctrl-C)."),
              as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """A line each time one of the job's pods (tasks) changes run, state or host."""
    chosen = {p.rsplit("-", 1)[-1] for p in pods or []}

    def read() -> dict[str, dict]:
        listing = cluster_call(client().task_listing, job_id) or {}
        return {f"{job_id}-{t['instance']}": {"run": t["run_id"], "state": t["state"], "host": t["host"]}
                for t in listing.get("tasks") or [] if not chosen or str(t["instance"]) in chosen}

    def say(pod: str, before: dict | None, now: dict) -> None:
        if as_json:
            _line({"pod": pod, **now})
            return
        was = f"{before['state']} -> " if before and before["state"] != now["state"] else ""
        where = f" on {now['host']}" if now["host"] else ""
        out.print(f"{_stamp()} pod {pod} run {now['run']}: {was}{now['state']}{where}", highlight=False)
    _follow(read, say, seconds)
