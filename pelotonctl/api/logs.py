"""A run's output, fetched from the agent of the host that ran it (stages/agent/logs.py) with a
grant the API signs for that run alone (peloton/auth/grants.py), once it has decided that the
caller may read the job."""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request

from peloton.auth.grants import grant, private_key
from peloton.config import Settings


class LogsUnavailable(Exception):
    """The agent does not answer, or refuses: the message says which (503)."""


class NoLogs(Exception):
    """The host has no such file of that run (404)."""


def grant_key(settings: Settings):
    """The API's key for signing grants (None: it has none, and agents serve it nothing)."""
    return private_key(settings.agent_logs_key) if settings.agent_logs_key else None


def run_output(store, hosts: list[dict], key, task, run: int | None, name: str, offset: int,
               limit: int) -> tuple[bytes, int]:
    """A run of `task` (its latest unless `run` names one): a range of its stdout or stderr, from
    the agent of the host it ran on, with a grant for that run alone. NoLogs when there is none."""
    run_id = run or task.run_id
    where = f"instance {task.instance} of job {task.job_id}"
    if run_id > task.run_id:
        raise NoLogs(f"{where} has runs 1-{task.run_id}")
    host_id = task.host_id if run_id == task.run_id else next(
        (e["host_id"] for e in reversed(store.task_events(task.job_id))
         if e["instance"] == task.instance and e["run_id"] == run_id and e["host_id"]), "")
    if not host_id:
        raise NoLogs(f"run {run_id} of {where} has not been on a host")
    url = next((h.get("log_url") or "" for h in hosts if h["host_id"] == host_id), "")
    if not url or key is None:
        raise NoLogs(f"host {host_id} serves no task logs (a simulated host, an agent without "
                     "PELOTON_AGENT_LOGS_PUBLIC_KEY, an API without PELOTON_AGENT_LOGS_KEY, or a host not heard from)")
    task_id = f"{task.job_id}-{task.instance}-{run_id}"
    return fetch(url, grant(key, task_id, host_id), task_id, name, offset, limit)


def fetch(url: str, grant: str, task_id: str, name: str, offset: int, limit: int,
          timeout: float = 10.0) -> tuple[bytes, int]:
    """(the bytes, the file's whole size), with `grant` for run `task_id`."""
    query = urllib.parse.urlencode({"offset": offset, "limit": limit})
    request = urllib.request.Request(f"{url}/v1/sandboxes/{urllib.parse.quote(task_id, safe='')}/{name}?{query}",
                                     headers={"Authorization": f"Bearer {grant}"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.read(), int(answer.headers.get("X-File-Size") or 0)
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            raise NoLogs(exc.read().decode("utf-8", "replace").strip()) from None
        raise LogsUnavailable(f"the agent at {url} answered {exc.code}: "
                              f"{exc.read().decode('utf-8', 'replace').strip()}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise LogsUnavailable(f"the agent at {url} does not answer: {getattr(exc, 'reason', exc)}") from None
