"""The listings people ask the cluster for, with Peloton's query forms: jobs by state, pool,
owner, name, labels, keywords and creation time, sorted and paged; a job's tasks by state, name
and host; hosts by state; the resource manager's tasks and its pools' queues. The direct client
and the API call the same functions, so both answer alike. Words are read as Peloton's CLI
reads them (comma lists, its enum names) and any word that cannot mean something here is
refused with the reason (UserError), never dropped."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from peloton.model.states import JOB_STATES, TASK_ORDER
from peloton.store.base import JobRow, QueryStore, TaskRow
from pelotonctl.admin import NotFound, UserError

# Sorting by anything but creation time sorts this many of the newest matching jobs at most: more
# is refused with what to narrow, rather than a sort of an arbitrary part.
SORT_WINDOW = 10_000

HOST_STATES = ("UP", "DRAINING", "DRAINED", "DOWN")

# Job properties Peloton's job query sorts by (its job index's fields), as our job rows name them.
JOB_SORT = {"creation_time": "created_ms", "completion_time": "completed_ms", "update_time": "updated_ms",
            "name": "name", "owner": "owner", "state": "state", "instance_count": "instance_count",
            "job_type": "type", "respool_id": "pool"}
# Task properties Peloton's task query sorts by; its store spells instance_id as instanceId too.
TASK_SORT = ("creation_time", "host", "instance_id", "instanceId", "message", "name", "reason", "state")


def words(values: str | Iterable[str] | None) -> list[str]:
    """Peloton's comma lists and our repeated options alike, as one list: 'A,B' + 'C' -> [A, B, C]."""
    if values is None:
        return []
    if isinstance(values, str):
        values = [values]
    return [w.strip() for v in values for w in v.split(",") if w.strip()]


def _states(given: Iterable[str], known: Iterable[str], prefixes: tuple[str, ...], what: str,
            never: dict[str, str]) -> list[str]:
    known = tuple(known)
    out = []
    for word in given:
        state = word.upper()
        for prefix in prefixes:
            state = state.removeprefix(prefix)
        if state in never:
            raise UserError(f"state {word}: {never[state]}")
        if state not in known:
            raise UserError(f"state {word}: {what} states are {', '.join(known)} (Peloton's "
                            f"{' and '.join(p + 'X' for p in prefixes)} forms too)")
        if state not in out:
            out.append(state)
    return out


def job_states(given: Iterable[str]) -> list[str]:
    """Peloton's job state words (RUNNING, and its v1 API's JOB_STATE_RUNNING), any case."""
    return _states(given, JOB_STATES, ("JOB_STATE_",), "job",
                   {"UNKNOWN": "no job here is in Peloton's UNKNOWN state (a job's state is always known)"})


def task_states(given: Iterable[str]) -> list[str]:
    """Peloton's task state words (RUNNING, and its pods' POD_STATE_RUNNING), any case."""
    return _states(given, TASK_ORDER, ("TASK_STATE_", "POD_STATE_"), "task", {
        "UNKNOWN": "no task here is in Peloton's UNKNOWN state (a task's state is always known)",
        "RESERVED": "no task here is RESERVED: hosts are not reserved for tasks (there are no host reservations)"})


def host_states(given: Iterable[str]) -> list[str]:
    """Peloton's host states (HOST_STATE_UP, DRAINING, DRAINED, DOWN), with or without the prefix."""
    return _states(given, HOST_STATES, ("HOST_STATE_",), "host", {
        "UNKNOWN": "no host here is in Peloton's HOST_STATE_UNKNOWN (its reserve for future states)",
        "INVALID": "no host here is in Peloton's HOST_STATE_INVALID (its enum's unset value)"})


def sort_order(order: str) -> bool:
    """Peloton's --sortorder: True for DESC."""
    if order.upper() not in ("ASC", "DESC"):
        raise UserError(f"sort order {order!r}: ASC or DESC")
    return order.upper() == "DESC"


def labels_of(items: Iterable[str]) -> tuple[tuple[str, str], ...]:
    """KEY=VALUE words (Peloton's --labels k=v,k2=v2 and our repeated --label)."""
    pairs = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UserError(f"label {item!r}: expected KEY=VALUE")
        pairs[key] = value
    return tuple(pairs.items())


def _key(value, descending: bool) -> tuple:
    """A sort key where a missing value (a job not completed) comes last in either order."""
    missing = value is None
    return (not missing if descending else missing, 0 if missing else value)


def _sorted(rows: list, keys: list[Callable], descending: bool) -> list:
    """Rows sorted on keys, one order for all (Peloton's); equal rows keep the order they came in."""
    return sorted(rows, key=lambda r: tuple(_key(k(r), descending) for k in keys), reverse=descending)


# -- jobs ---------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class JobQuery:
    """Peloton's job QuerySpec with its pagination: every filter given must match."""

    states: tuple[str, ...] = ()
    pool: str | None = None
    owner: str | None = None
    name: str | None = None
    labels: tuple[tuple[str, str], ...] = ()
    keywords: tuple[str, ...] = ()  # each must occur in the job's config, any case
    created_since_ms: int | None = None
    sort: tuple[str, ...] = ("creation_time",)
    descending: bool = True
    offset: int = 0
    limit: int = 100
    total: int | None = None  # Peloton's maxLimit: the most jobs the query yields before its page is cut

    def __post_init__(self) -> None:
        unknown = [s for s in self.sort if s not in JOB_SORT]
        if "start_time" in unknown:
            raise UserError("sort start_time: jobs here keep no start time (sort by creation_time, update_time or "
                            "completion_time)")
        if unknown:
            raise UserError(f"sort {unknown[0]}: jobs sort by {', '.join(JOB_SORT)}")
        for field, value in (("limit", self.limit), ("offset", self.offset), ("total", self.total)):
            if value is not None and value < 0:
                raise UserError(f"{field} {value}: a count is 0 or more")
        if self.limit < 1:
            raise UserError(f"limit {self.limit}: at least 1")


def config_values(text: str) -> str:
    """A job config's values (not its keys, nor the per-instance configs), lowercased, one a
    line: what keywords are looked for in, as Peloton looks in its indexed config."""
    from peloton.model.safe_yaml import read_yaml

    try:
        config = read_yaml(text)
    except ValueError:
        return text.lower()
    found: list[str] = []

    def walk(node) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if str(key).lower() not in ("instanceconfig", "instancespec"):
                    walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)
        elif node is not None:
            found.append(str(node).lower())
    walk(config)
    return "\n".join(found)


def query_jobs(store: QueryStore, q: JobQuery, readable: Callable[[str], bool] | None = None) -> list[JobRow]:
    """Peloton's job query: the jobs matching every filter, sorted, cut to `total`, then the page
    from `offset`. `readable(pool)` keeps only the jobs of pools the caller may read."""
    from peloton.model.jobconfig import parse_job_config
    from peloton.model.jobspec import JobConfigError

    end = q.offset + q.limit if q.total is None else min(q.offset + q.limit, q.total)
    if end <= q.offset:
        return []
    by_creation = q.sort == ("creation_time",)
    # Labels, keywords and permissions are not columns: filtered here, after the store's filters.
    filtered = bool(q.labels or q.keywords) or readable is not None
    window = end if by_creation and not filtered else max(end, SORT_WINDOW)
    # One more than a sort looks at tells whether more match than it would see.
    jobs = store.list_jobs(window if by_creation else window + 1, states=list(q.states) or None, pool=q.pool,
                           owner=q.owner, name=q.name, created_since_ms=q.created_since_ms,
                           oldest_first=by_creation and not q.descending)
    more = len(jobs) > window
    if readable is not None:
        jobs = [j for j in jobs if readable(j.pool)]
    if q.labels:
        def labels(text: str) -> dict:
            try:
                return dict(parse_job_config(text).labels)
            except JobConfigError:
                return {}
        jobs = [j for j in jobs if dict(q.labels).items() <= labels(j.config_text).items()]
    if q.keywords:
        wanted = [k.lower() for k in q.keywords]
        jobs = [j for j in jobs if (lambda text: all(k in text for k in wanted))(config_values(j.config_text))]
    if not by_creation:
        if more:
            raise UserError(f"sort {','.join(q.sort)}: more than the {SORT_WINDOW} newest jobs match, and a sort "
                            f"looks at those only; narrow the query (states, pool, owner, time range) or sort by "
                            f"creation_time")
        attrs = [JOB_SORT[s] for s in q.sort]
        jobs = _sorted(jobs, [lambda j, a=a: getattr(j, a) for a in attrs], q.descending)
    return jobs[q.offset:end]


# -- tasks --------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class TaskQuery:
    """Peloton's task QuerySpec: states, names and hosts (each any of those given), a sort, a page."""

    states: tuple[str, ...] = ()
    names: tuple[str, ...] = ()
    hosts: tuple[str, ...] = ()
    sort: tuple[str, ...] = ()  # none: by instance
    descending: bool = False
    offset: int = 0
    limit: int | None = 100  # None: every task from offset on

    def __post_init__(self) -> None:
        unknown = [s for s in self.sort if s not in TASK_SORT]
        if unknown:
            raise UserError(f"sort {unknown[0]}: tasks sort by {', '.join(TASK_SORT)}")
        if self.offset < 0:
            raise UserError(f"offset {self.offset}: 0 or more")
        if self.limit is not None and self.limit < 1:
            raise UserError(f"limit {self.limit}: at least 1")


def task_names(job: JobRow) -> dict[int, str]:
    """Each instance's task name (its config's `name`), by the job's current config."""
    return _names(job.config_text)


@functools.lru_cache(maxsize=32)
def _names(config_text: str) -> dict[int, str]:
    # Kept by config: `job stop --wait` and the API's pollers list a job's tasks again and again.
    from peloton.model.jobconfig import parse_job_config
    from peloton.model.jobspec import JobConfigError

    try:
        return {t.instance: t.name for t in parse_job_config(config_text).tasks}
    except JobConfigError:
        return {}


def query_tasks(store: QueryStore, job: JobRow, q: TaskQuery) -> tuple[list[dict], int]:
    """Peloton's task query of one job: the page of matching tasks (each a task row with its
    name), and how many match in all."""
    from pelotonctl.shapes import task_row

    names = task_names(job)
    tasks = [t for t in store.tasks_of_job(job.job_id)
             if (not q.states or t.state in q.states) and (not q.names or names.get(t.instance, "") in q.names)
             and (not q.hosts or t.host_id in q.hosts)]
    tasks.sort(key=lambda t: t.instance)
    if q.sort:
        started = _run_starts(store, job.job_id, tasks) if "creation_time" in q.sort else {}
        keys: dict[str, Callable[[TaskRow], object]] = {
            "creation_time": lambda t: started.get(t.instance), "host": lambda t: t.host_id,
            "instance_id": lambda t: t.instance, "instanceId": lambda t: t.instance, "message": lambda t: t.message,
            "name": lambda t: names.get(t.instance, ""), "reason": lambda t: t.reason,
            "state": lambda t: TASK_ORDER.get(t.state, 99)}
        tasks = _sorted(tasks, [keys[s] for s in q.sort], q.descending)
    page = tasks[q.offset:] if q.limit is None else tasks[q.offset:q.offset + q.limit]
    return [{**task_row(t), "name": names.get(t.instance, "")} for t in page], len(tasks)


def _run_starts(store: QueryStore, job_id: str, tasks: list[TaskRow]) -> dict[int, int]:
    """When each task's current run started RUNNING (Peloton's start time), from the job's events."""
    runs = {t.instance: t.run_id for t in tasks}
    started: dict[int, int] = {}
    for e in store.task_events(job_id):
        if e["state"] == "RUNNING" and runs.get(e["instance"]) == e["run_id"] and e["instance"] not in started:
            started[e["instance"]] = e["timestamp_ms"]
    return started


# -- the resource manager's view ----------------------------------------------------------------

def pools_under(pools: dict[str, dict], path: str) -> list[str]:
    """The pool at `path` and every pool below it; NotFound for a pool that is not there."""
    if not path.startswith("/"):
        raise UserError(f"resource pool {path!r}: pools here are named by their path (e.g. /team/batch), not by "
                        f"Peloton's pool ids")
    path = "/" + path.strip("/")
    if path != "/" and path not in pools:
        raise NotFound(f"no resource pool {path!r}")
    return sorted(p for p in pools if path == "/" or p == path or p.startswith(path + "/"))


def _task_key(task_id: str) -> tuple[str, int, int] | None:
    """(job id, instance, run) of a task id JOB-INSTANCE-RUN (a job id may hold dashes)."""
    job_id, _, rest = task_id.rpartition("-")
    job_id, _, instance = job_id.rpartition("-")
    if not job_id or not instance.isdigit() or not rest.isdigit():
        return None
    return job_id, int(instance), int(rest)


def _scope(store: QueryStore, job_id: str | None, pool: str | None,
           readable: Callable[[str], bool] | None) -> list[str]:
    pools = store.list_pools()
    if job_id:
        job = store.get_job(job_id)
        if job is None:
            raise NotFound(f"no job {job_id}")
        scope = [job.pool]
        if pool and job.pool not in pools_under(pools, pool):
            scope = []
    else:
        scope = pools_under(pools, pool or "/")
    return [p for p in scope if readable is None or readable(p)]


def resmgr_tasks(store: QueryStore, job_id: str | None = None, pool: str | None = None,
                 states: Iterable[str] = (), readable: Callable[[str], bool] | None = None) -> list[dict]:
    """Every task run the resource manager tracks: queued in its pool's queue, or admitted (its
    resources charged to its pool until it ends), each with the state, host and reason the job
    manager has for that run; of one job, a pool (and those below it), in some states."""
    scope = _scope(store, job_id, pool, readable)
    entries: list[dict] = []
    for g in store.queued_gangs(scope):
        for t in g.gang.get("tasks", []):
            entries.append({"task_id": t["task_id"], "job_id": t["job_id"], "instance": t["instance"],
                            "run_id": t["run_id"], "pool": g.pool, "gang_id": g.gang_id, "resmgr": "queued",
                            "since_ms": g.gang.get("created_ms")})
    for a in store.allocations(scope):
        key = _task_key(a.task_id)
        if key is None:
            continue
        entries.append({"task_id": a.task_id, "job_id": key[0], "instance": key[1], "run_id": key[2], "pool": a.pool,
                        "gang_id": a.gang_id, "resmgr": "admitted", "since_ms": a.admitted_ms})
    if job_id:
        entries = [e for e in entries if e["job_id"] == job_id]
    runs = store.tasks_by_instance([(e["job_id"], e["instance"]) for e in entries], spec=False)
    wanted = set(states)
    rows = []
    for e in entries:
        task = runs.get((e["job_id"], e["instance"]))
        current = task is not None and task.run_id == e["run_id"]
        row = {**e, "state": task.state if current else None, "host": task.host_id if current else "",
               "reason": task.reason if current else "", "message": task.message if current else "",
               "updated_ms": task.updated_ms if current else None}
        if not wanted or row["state"] in wanted:
            rows.append(row)
    return sorted(rows, key=lambda r: (r["pool"], r["job_id"], r["instance"], r["run_id"]))


def gang_kind(gang: dict) -> str:
    """The side queue a gang goes to when it fails that one rule (stages/entitle/admission.py)."""
    tasks = gang.get("tasks", [])
    if len(tasks) == 1 and tasks[0].get("controller"):
        return "controller"
    if not gang.get("preemptible", True):
        return "non-preemptible"
    if gang.get("revocable"):
        return "revocable"
    return ""


def pending_gangs(store: QueryStore, pool: str | None = None, limit: int = 100,
                  readable: Callable[[str], bool] | None = None) -> list[dict]:
    """The gangs waiting in the queues of a pool (and those below it; every pool without one), in
    the order the resource manager admits them, at most `limit` a pool."""
    from stages.entitle.admission import gang_demand

    if limit < 1:
        raise UserError(f"limit {limit}: at least 1")
    by_pool: dict[str, list] = {}
    for g in store.queued_gangs(_scope(store, None, pool, readable)):
        by_pool.setdefault(g.pool, []).append(g)
    rows = []
    for path in sorted(by_pool):
        queue = sorted(by_pool[path], key=lambda g: (-g.priority, g.seq))  # Peloton's priority FIFO
        for position, g in enumerate(queue[:limit], 1):
            tasks = g.gang.get("tasks", [])
            rows.append({"pool": path, "position": position, "gang_id": g.gang_id, "job_id": g.gang.get("job_id", ""),
                         "priority": g.priority, "tasks": len(tasks), "task_ids": [t["task_id"] for t in tasks],
                         "demand": gang_demand(g.gang).to_record() if tasks else None, "kind": gang_kind(g.gang),
                         "queued_ms": g.gang.get("created_ms"), "not_before_ms": g.not_before_ms or None})
    return rows
