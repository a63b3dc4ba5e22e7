"""A run's output, fetched from the agent of the host that ran it (stages/agent/logs.py) with the
cluster's agent-logs secret. The agent answers the API alone; the API has already decided that
the caller may read the job."""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request


class LogsUnavailable(Exception):
    """The agent does not answer, or refuses: the message says which (503)."""


class NoLogs(Exception):
    """The host has no such file of that run (404)."""


def fetch(url: str, secret: str, task_id: str, name: str, offset: int, limit: int,
          timeout: float = 10.0) -> tuple[bytes, int]:
    """(the bytes, the file's whole size)."""
    query = urllib.parse.urlencode({"offset": offset, "limit": limit})
    request = urllib.request.Request(f"{url}/v1/sandboxes/{urllib.parse.quote(task_id, safe='')}/{name}?{query}",
                                     headers={"Authorization": f"Bearer {secret}"})
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
