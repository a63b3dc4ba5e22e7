"""The cluster reached through the API, as the user the token names. The API's answers map to the
errors the direct client raises (400: UserError, 404: NotFound), and two of its own: NotPermitted
(401, 403) and ApiUnavailable (no answer, or 503: its line says what is away). An answer the API
served from its views without the store (X-Peloton-Served-From) is passed on, with why, to
`on_note`."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import asdict

from pelotonctl.admin import NotFound, UserError
from pelotonctl.queries import JobQuery, TaskQuery
from stages.admit.workflow import UpdateOptions


class NotPermitted(Exception):
    """The API refused the caller: no valid token (401), or no permission (403)."""


class ApiUnavailable(Exception):
    """The API does not answer, or answers that what is behind it is away (503)."""


# The headers of an answer the API served without the store (pelotonctl/api/storeguard.py).
SERVED_FROM, STORE_AWAY = "X-Peloton-Served-From", "X-Peloton-Store"


class ApiClient:
    def __init__(self, url: str, token: str, timeout: float = 60.0,
                 on_note: Callable[[str], None] | None = None):
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.on_note = on_note  # told, in a line, when an answer came from the API's views alone

    def call(self, method: str, path: str, body: dict | None = None, query: dict | None = None,
             missing_ok: bool = False, raw: bool = False):
        """The answer's JSON (its bytes when raw); None for a 404 when missing_ok."""
        url = self.url + urllib.parse.quote(path)
        if query:
            url += "?" + urllib.parse.urlencode({k: v for k, v in query.items() if v is not None}, doseq=True)
        headers = {"Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as answer:
                body = answer.read()
                if answer.headers.get(SERVED_FROM) and self.on_note is not None:
                    self.on_note(f"served from the API's {answer.headers[SERVED_FROM]} without the store: "
                                 f"{answer.headers.get(STORE_AWAY, 'it is away')}")
                return body if raw else json.loads(body or b"null")
        except urllib.error.HTTPError as exc:
            detail = _detail(exc)
            if exc.code == 404 and missing_ok:
                return None
            if exc.code in (401, 403):
                raise NotPermitted(f"{detail} (the API at {self.url}, as PELOTON_TOKEN's user)") from None
            if exc.code == 423:  # locked down (pelotonctl admin lock): permitted, not now
                raise NotPermitted(detail) from None
            if exc.code == 404:
                raise NotFound(detail) from None
            if exc.code in (400, 409, 422):
                raise UserError(detail) from None
            if exc.code == 503:  # the API's line names what is away and what needed it
                raise ApiUnavailable(f"{detail} (answered by the API at {self.url})") from None
            raise ApiUnavailable(f"the API at {self.url} answered {exc.code}: {detail}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ApiUnavailable(f"the API at {self.url} does not answer ({reason}): is `pelotonctl api` running, "
                                 f"or PELOTON_API_URL right?") from None

    # -- jobs ---------------------------------------------------------------------------------
    # Commands answer once the job manager acted on them (wait=true), so the next command finds
    # what this one did, and a refusal by the job manager is this command's error (exit 2).
    WAIT = {"wait": "true"}
    PAGE = 1000  # the most jobs the API lists in one answer

    def submit_job(self, pool: str, text: str, job_id: str | None = None) -> str:
        return self.call("POST", "/v1/jobs", {"pool": pool, "config": text, "job_id": job_id}, self.WAIT)["job_id"]

    def control_job(self, kind: str, job_id: str, instances: str | None = None, batch_size: int = 0,
                    config: str | None = None, options: UpdateOptions | None = None) -> dict:
        options = options or UpdateOptions(batch_size=batch_size)
        if kind == "UPDATE":
            return self.call("PUT", f"/v1/jobs/{job_id}", {"config": config or "", **asdict(options)}, self.WAIT)
        if kind == "DELETE":
            return self.delete_job(job_id)
        return self.call("POST", f"/v1/jobs/{job_id}/{kind.lower()}", {
            "instances": instances, "batch_size": options.batch_size, "start_paused": options.start_paused,
            "in_place": options.in_place}, self.WAIT)

    def delete_job(self, job_id: str, keep_volumes: bool = False) -> dict:
        """The job deleted, and its persistent volumes unless kept (volumes_deleted, volumes_kept)."""
        return self.call("DELETE", f"/v1/jobs/{job_id}", query={**self.WAIT, "keep_volumes": str(keep_volumes).lower()})

    def job(self, job_id: str, version: int | None = None) -> dict | None:
        if version is not None:  # a version the job never had is a NotFound with the reason, not None
            return self.call("GET", f"/v1/jobs/{job_id}", query={"version": version})
        return self.call("GET", f"/v1/jobs/{job_id}", missing_ok=True)

    # -- updates ------------------------------------------------------------------------------
    def updates(self, job_id: str) -> list[dict]:
        return self.call("GET", f"/v1/jobs/{job_id}/updates")["updates"]

    def update(self, update_id: str) -> dict:
        return self.call("GET", f"/v1/updates/{update_id}")

    def steer_update(self, update_id: str, action: str) -> dict:
        return self.call("POST", f"/v1/updates/{update_id}/{action.lower()}", query=self.WAIT)

    def job_summary(self, job_id: str, why: bool = True) -> dict | None:
        return self.call("GET", f"/v1/jobs/{job_id}/status", query={"why": str(why).lower()}, missing_ok=True)

    def query_jobs(self, query: JobQuery) -> list[dict]:
        # The API pages at most PAGE jobs a call: a longer page is asked for in pages.
        rows: list[dict] = []
        offset, end = query.offset, query.offset + query.limit
        while offset < end:
            limit = min(self.PAGE, end - offset)
            answer = self.call("GET", "/v1/jobs", query={
                "state": list(query.states) or None, "pool": query.pool, "owner": query.owner, "name": query.name,
                "label": [f"{k}={v}" for k, v in query.labels] or None, "keyword": list(query.keywords) or None,
                "created_since_ms": query.created_since_ms, "sort": list(query.sort),
                "order": "DESC" if query.descending else "ASC", "total": query.total, "offset": offset,
                "limit": limit})
            rows.extend(answer["jobs"])
            if answer["next_offset"] is None:
                break
            offset = answer["next_offset"]
        return rows

    # -- tasks --------------------------------------------------------------------------------
    def tasks(self, job_id: str) -> list[dict] | None:
        answer = self.call("GET", f"/v1/jobs/{job_id}/tasks", missing_ok=True)
        return answer["tasks"] if answer and answer["tasks"] else None

    def task_listing(self, job_id: str) -> dict | None:
        """Every task of the job, with the stages it waits on that are not doing their part and
        its silent hosts ({"tasks", "total", "stage_problems", "silent_hosts"}); None: no such job."""
        return self.call("GET", f"/v1/jobs/{job_id}/tasks", missing_ok=True)

    def query_tasks(self, job_id: str, query: TaskQuery) -> dict:
        return self.call("GET", f"/v1/jobs/{job_id}/tasks", query={
            "state": list(query.states) or None, "name": list(query.names) or None,
            "host": list(query.hosts) or None, "sort": list(query.sort) or None,
            "order": "DESC" if query.descending else "ASC", "offset": query.offset, "limit": query.limit})

    def task(self, job_id: str, instance: int) -> dict | None:
        return self.call("GET", f"/v1/jobs/{job_id}/tasks/{instance}", missing_ok=True)

    def task_events(self, job_id: str, instance: int) -> list[dict] | None:
        answer = self.call("GET", f"/v1/jobs/{job_id}/tasks/{instance}/events", missing_ok=True)
        return None if answer is None else answer["events"]

    def task_log(self, job_id: str, instance: int, run: int | None = None, stderr: bool = False) -> bytes:
        """A run's stdout (or stderr), from the host that ran it, through the API."""
        return self.call("GET", f"/v1/jobs/{job_id}/tasks/{instance}/logs",
                         query={"run": run, "file": "stderr" if stderr else "stdout"}, raw=True)

    # -- tokens -------------------------------------------------------------------------------
    def issue_token(self, user: str, groups: list[str], admin: bool) -> dict:
        return self.call("POST", "/v1/tokens", {"user": user, "groups": groups, "admin": admin})

    def revoke_token(self, token_id: str) -> None:
        self.call("DELETE", f"/v1/tokens/{token_id}")

    def list_tokens(self) -> list[dict]:
        return self.call("GET", "/v1/tokens")["tokens"]

    # -- pools and hosts ----------------------------------------------------------------------
    def create_pool(self, path: str, text: str) -> dict:
        return self.call("POST", f"/v1/respools{path}", {"config": text})

    def update_pool(self, path: str, text: str, force: bool = False) -> dict:
        return self.call("PUT", f"/v1/respools{path}", {"config": text, "force": force})

    def delete_pool(self, path: str) -> None:
        self.call("DELETE", f"/v1/respools{path}")

    def pool_report(self, path: str) -> dict:
        return self.call("GET", f"/v1/respools{path}")

    def pool_tree(self) -> dict:
        return self.call("GET", "/v1/respools")

    def hosts(self, states: list[str] | None = None) -> list[dict]:
        return self.call("GET", "/v1/hosts", query={"state": states or None})["hosts"]

    # -- the resource manager's view ----------------------------------------------------------
    def resmgr_tasks(self, job_id: str | None = None, pool: str | None = None,
                     states: list[str] | None = None) -> list[dict]:
        return self.call("GET", "/v1/resmgr/tasks", query={"job": job_id, "pool": pool,
                                                           "state": states or None})["tasks"]

    def pending_gangs(self, pool: str | None = None, limit: int = 100) -> list[dict]:
        return self.call("GET", "/v1/resmgr/pending", query={"pool": pool, "limit": limit})["gangs"]

    def maintenance(self, host_id: str, action: str, force: bool = False) -> None:
        self.call("POST", f"/v1/hosts/{host_id}/maintenance/{action.lower()}", {"force": force})

    def lockdown(self) -> dict[str, dict]:
        return self.call("GET", "/v1/admin/lockdown")["locked"]

    def set_locks(self, components: list[str], locked: bool) -> dict:
        return self.call("POST", f"/v1/admin/{'lock' if locked else 'unlock'}", {"components": components})

    def host_pools(self) -> list[dict]:
        return self.call("GET", "/v1/host-pools")["pools"]

    def create_host_pool(self, name: str) -> dict:
        return self.call("POST", "/v1/host-pools", {"name": name})

    def delete_host_pool(self, name: str) -> list[str]:
        return self.call("DELETE", f"/v1/host-pools/{name}")["moved_to_default"]

    def change_host_pool(self, host_id: str, pool: str, source: str = "") -> dict:
        return self.call("POST", f"/v1/hosts/{host_id}/pool", {"pool": pool, "source": source})

    # -- persistent volumes -------------------------------------------------------------------
    def volumes(self, job_id: str | None = None) -> list[dict]:
        return self.call("GET", "/v1/volumes", query={"job": job_id})["volumes"]

    def volume(self, volume_id: str) -> dict:
        return self.call("GET", f"/v1/volumes/{volume_id}")

    def delete_volume(self, volume_id: str) -> dict:
        return self.call("DELETE", f"/v1/volumes/{volume_id}")


    # -- what operators watch: lag, dead letters, the instance registry ---------------------------
    def lag(self, stages: tuple[str, ...], window: int) -> dict:
        return self.call("GET", "/v1/lag", query={"stage": list(stages), "window": window})

    def dead_letters(self, since_ms: int | None = None, stage: str | None = None) -> list[dict]:
        return self.call("GET", "/v1/dead-letters", query={"since_ms": since_ms, "stage": stage})["letters"]

    def dead_letter(self, number: str) -> dict:
        return self.call("GET", f"/v1/dead-letters/{number}")

    def replay_dead_letter(self, number: str, value: dict | None = None, sets: dict[str, str] | None = None,
                           schema: str | None = None) -> dict:
        return self.call("POST", f"/v1/dead-letters/{number}/replay",
                         {"value": value, "set": sets or {}, "schema": schema})

    def instances(self, timeout: float = 5.0) -> list[dict]:
        return self.call("GET", "/v1/cluster/instances", query={"timeout": timeout})["instances"]

    def close(self) -> None:
        pass


def _detail(exc: urllib.error.HTTPError) -> str:
    try:
        detail = json.loads(exc.read()).get("detail")
    except (ValueError, AttributeError, OSError):
        return exc.reason or f"HTTP {exc.code}"
    if isinstance(detail, list):  # a request the API's schema refused (422): each problem's place and message
        return "; ".join(f"{'.'.join(str(p) for p in d.get('loc', []))}: {d.get('msg')}" for d in detail)
    return str(detail)
