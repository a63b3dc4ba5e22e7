"""Update workflows: every job update and restart is one, with an id (its command's) and Peloton's
states, replacing a job's instances a batch at a time. Pure: no Kafka, no store. The job manager
keeps an active workflow in its job's row and every workflow in the updates table.

A workflow moves on when its batch has settled: each replaced instance's new run is RUNNING and,
where a health check is set, HEALTHY (or ended well, or was stopped), or it has failed. An
instance fails when its new runs failed `max_instance_retries` times (0: never counted, retried
for ever, as Peloton's maxInstanceAttempts) or ended FAILED or LOST for good. Instances already
done stay watched while the workflow is active, since a run that crashes just after RUNNING
showed nothing wrong yet, and it does not end while one of them is not running well (between a
failed run and its next, or unhealthy). Once `max_failure_instances` instances failed (0: no
limit, Peloton's maxFailureInstances) the update FAILED, or, with `rollback_on_failure`, rolls
back: the previous config again on every instance it touched."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from peloton.model.health import serving
from peloton.model.states import TASK_TERMINAL, UPDATE_ACTIONS
from peloton.store import TaskRow
from stages.admit.drain import down, is_down
from stages.admit.lifecycle import RESTARTED

INITIALIZED = "INITIALIZED"
ROLLING_FORWARD = "ROLLING_FORWARD"
PAUSED = "PAUSED"
ROLLING_BACKWARD = "ROLLING_BACKWARD"
SUCCEEDED = "SUCCEEDED"
ABORTED = "ABORTED"
ROLLED_BACK = "ROLLED_BACK"
FAILED = "FAILED"
ACTIVE = frozenset({INITIALIZED, ROLLING_FORWARD, PAUSED, ROLLING_BACKWARD})
ENDED = frozenset({SUCCEEDED, ABORTED, ROLLED_BACK, FAILED})

UPDATE, RESTART = "UPDATE", "RESTART"  # workflows that replace runs
START, STOP = "START", "STOP"  # rolling start and stop: a batch at a time (a --batch-size given)
ACTIONS = UPDATE_ACTIONS  # the job commands that steer one


@dataclass(frozen=True, slots=True)
class UpdateOptions:
    """Peloton's update spec (v1alpha names): how a workflow replaces instances and when it fails."""

    batch_size: int = 0  # instances replaced at a time (0: all at once)
    max_instance_retries: int = 0  # failed new runs before an instance counts as failed (0: never)
    max_failure_instances: int = 0  # failed instances before the update fails (0: never)
    rollback_on_failure: bool = False
    start_paused: bool = False
    in_place: bool = False  # each replacement prefers the host of the run it replaces


def options_problem(options: UpdateOptions) -> str | None:
    for name in ("batch_size", "max_instance_retries", "max_failure_instances"):
        if getattr(options, name) < 0:
            return f"{name.replace('_', '-')} {getattr(options, name)}: must be 0 or more"
    return None


def new_workflow(update_id: str, job_id: str, kind: str, instances: list[int], options: UpdateOptions,
                 from_version: int, to_version: int, requested_by: str, now: int,
                 added: list[int] | None = None, removed: list[int] | None = None) -> dict:
    """A workflow over `instances`, before its first batch (advance() picks it)."""
    paused = options.start_paused and bool(instances)
    return {
        "update_id": update_id, "job_id": job_id, "kind": kind,
        "state": PAUSED if paused else ROLLING_FORWARD, "paused_from": ROLLING_FORWARD if paused else "",
        "options": asdict(options), "from_version": from_version, "to_version": to_version,
        "instances": sorted(instances), "added": sorted(added or []), "removed": sorted(removed or []),
        "remaining": sorted(instances), "in_flight": [], "done": [], "failed": [],
        "runs": {}, "failures": {},  # per instance in this phase: the run replaced, its failures then
        "message": f"started paused by {requested_by}" if paused else "",
        "requested_by": requested_by, "created_ms": now, "updated_ms": now, "completed_ms": None,
    }


def legacy_workflow(rollout: dict, job_id: str, version: int) -> dict:
    """A rollout stored before workflows had ids (a job row of an older release), as a workflow."""
    if "update_id" in rollout:
        return rollout
    kind = RESTART if rollout.get("reason") == "RESTARTED" else UPDATE
    in_flight = list(rollout.get("in_flight", []))
    wf = new_workflow(f"{job_id}-rollout", job_id, kind, in_flight + list(rollout.get("remaining", [])),
                      UpdateOptions(batch_size=rollout.get("batch", 0)), version, version, "an earlier release", 0)
    wf.update(in_flight=in_flight, remaining=list(rollout.get("remaining", [])), runs=dict(rollout.get("runs", {})))
    return wf


def _settled_well(task: TaskRow, old_run: int, kind: str = UPDATE) -> bool:
    """A replaced (or started) instance is done once its new run runs, HEALTHY where it has a
    health check (or ended well), or it was stopped; a stopped one once its run ended."""
    if kind == STOP:
        return task.state in TASK_TERMINAL
    if task.state in ("KILLED", "SUCCEEDED"):
        return task.run_id > old_run or kind != START
    return task.run_id > old_run and serving(task.state, task.health)


def _failed(task: TaskRow, old_run: int, failures_then: int, retries: int, kind: str = UPDATE) -> bool:
    if task.run_id <= old_run or kind == STOP:
        return False
    if task.state in ("FAILED", "LOST"):
        return True
    return retries > 0 and task.failures - failures_then >= retries


@dataclass(frozen=True, slots=True)
class Step:
    replace: list[int]  # instances whose current runs go now (the next batch)
    workflow: dict
    roll_back: bool = False  # failed with rollback_on_failure: restore the old config, then begin_rollback()


def advance(wf: dict, tasks: dict[int, TaskRow], now: int, budget: int = 0) -> Step:
    """The workflow after what its instances' tasks show now: failures counted, a settled batch
    followed by the next one (unless paused), the end reached. `budget`: the job's
    sla.maximumUnavailableInstances (0: none); a batch takes down no more instances than leaves
    the job within it, counting those down for any other reason, and waits while none may go."""
    if wf["state"] not in ACTIVE:
        return Step([], wf)
    wf = {**wf, "runs": dict(wf["runs"]), "failures": dict(wf["failures"])}
    opts = wf["options"]
    failed = list(wf["failed"])
    watched: dict[str, list[int]] = {"in_flight": [], "done": []}
    for part in ("in_flight", "done"):
        for i in wf[part]:
            task = tasks.get(i)
            if task is None:
                continue  # gone with its job: nothing to wait for
            key = str(i)
            if _failed(task, wf["runs"][key], wf["failures"][key], opts["max_instance_retries"], wf["kind"]):
                failed.append(i)
            else:
                watched[part].append(i)
    in_flight = [i for i in watched["in_flight"] if not _settled_well(tasks[i], wf["runs"][str(i)], wf["kind"])]
    done = watched["done"] + [i for i in watched["in_flight"] if i not in in_flight]
    wf.update(in_flight=in_flight, done=sorted(done), failed=sorted(failed))
    limit = opts["max_failure_instances"]
    if limit > 0 and len(failed) >= limit and wf["state"] != PAUSED:
        why = f"{len(failed)} instance{'s' if len(failed) > 1 else ''} failed ({', '.join(map(str, failed))}), " \
              f"max-failure-instances {limit}"
        if wf["state"] == ROLLING_FORWARD and opts["rollback_on_failure"] and wf["kind"] == UPDATE \
                and not wf["added"] and not wf.get("removed"):
            wf["message"] = f"{why}: rolling back"
            return Step([], wf, roll_back=True)
        return Step([], _end(wf, FAILED, f"{why}" + (" while rolling back" if wf["state"] == ROLLING_BACKWARD else ""),
                             now))
    if wf["state"] == PAUSED or in_flight:
        return Step([], _touch(wf, now))
    remaining = [i for i in wf["remaining"] if i in tasks]
    batch: list[int] = []
    replace: list[int] = []
    size = opts["batch_size"] or len(remaining)
    room = len(remaining)  # instances that serve now which the batch may take down
    if budget > 0 and remaining and wf["kind"] != STOP:  # a stop is what its user asked to be down
        already = down(tasks.values())
        room = budget - already
        # An instance down already goes at no cost to the budget, as a drain moves one: waiting for
        # it to serve would hold a rollout, or its rollback, behind the very instance it replaces.
        if room <= 0 and not any(is_down(tasks[i]) for i in remaining):
            why = f"waits: {already} instance{'s' if already > 1 else ''} down, sla.maximumUnavailableInstances " \
                  f"{budget}"
            return Step([], _touch({**wf, "message": why}, now))
    if wf["message"].startswith("waits: "):
        wf["message"] = ""  # it waited for the budget, and goes on now
    later: list[int] = []  # instances the budget leaves for a later batch, in their order
    while remaining and len(batch) < size:
        i = remaining.pop(0)
        task = tasks[i]
        if wf["kind"] == START:
            if task.state != "KILLED":
                wf["done"] = sorted(wf["done"] + [i])  # running again already: nothing to start
                continue
        elif task.state in TASK_TERMINAL or (task.state == "KILLING" and task.reason != RESTARTED):
            wf["done"] = sorted(wf["done"] + [i])  # ended or being stopped: it starts with the new config
            continue
        if not is_down(task):  # one more instance down (a start's: until it runs)
            if room <= 0:
                later.append(i)
                continue
            room -= 1
        batch.append(i)
        if task.state != "KILLING":  # one being replaced already reruns with the job's config as it is now
            replace.append(i)
        wf["runs"][str(i)], wf["failures"][str(i)] = task.run_id, task.failures
    remaining = later + remaining
    wf.update(remaining=remaining, in_flight=batch)
    if not batch:
        # The last batch settled; a run it started that has failed since (its next run waits out
        # the backoff) decides yet: it runs again, or fails its instance by its retries.
        again = [i for i in wf["done"] if str(i) in wf["runs"] and i in tasks
                 and not _settled_well(tasks[i], wf["runs"][str(i)], wf["kind"])]
        if again:
            why = f"waits: not running well since their new runs started: instances {', '.join(map(str, again))}"
            return Step([], _touch({**wf, "message": why}, now))
        end = SUCCEEDED if wf["state"] == ROLLING_FORWARD else ROLLED_BACK
        return Step([], _end(wf, end, wf["message"] if end == ROLLED_BACK else "", now))
    return Step(replace, _touch(wf, now))


def begin_rollback(wf: dict, rollback_version: int, now: int) -> dict:
    """The rollback of a workflow whose job has its previous config again (as `rollback_version`):
    every instance it touched is replaced once more, in the same batches."""
    touched = sorted({int(i) for i in wf["runs"]} | set(wf["failed"]))
    return {**wf, "state": ROLLING_BACKWARD, "paused_from": "", "to_version": rollback_version,
            "remaining": touched, "in_flight": [], "done": [], "failed": [], "runs": {}, "failures": {},
            "rolled_back": touched, "updated_ms": now}


def steer(wf: dict, action: str, who: str, now: int) -> tuple[dict, str | None]:
    """A user's PAUSE, RESUME, ABORT or ROLLBACK: (the workflow after it, why it cannot apply).
    A ROLLBACK answers with the workflow unchanged: the caller restores the config, then
    begin_rollback()."""
    name = f"update {wf['update_id']}"
    if wf["state"] in ENDED:
        return wf, f"{name} is {wf['state']} already: nothing to {action.lower()}"
    if action == "PAUSE":
        if wf["state"] == PAUSED:
            return wf, f"{name} is paused already"
        return {**wf, "state": PAUSED, "paused_from": wf["state"], "message": f"paused by {who}",
                "updated_ms": now}, None
    if action == "RESUME":
        if wf["state"] != PAUSED:
            return wf, f"{name} is {wf['state']}, not paused: nothing to resume"
        return {**wf, "state": wf["paused_from"] or ROLLING_FORWARD, "paused_from": "",
                "message": f"resumed by {who}", "updated_ms": now}, None
    if action == "ABORT":
        return _end(wf, ABORTED, f"aborted by {who}", now), None
    if action == "ROLLBACK":
        forward = wf["state"] == ROLLING_FORWARD or wf["paused_from"] == ROLLING_FORWARD
        if wf["kind"] != UPDATE:
            return wf, f"{name} is a restart: it has no earlier config to go back to"
        if not forward:
            return wf, f"{name} is rolling back already"
        if wf["added"] or wf.get("removed"):
            which = ("added", wf["added"]) if wf["added"] else ("removed", wf["removed"])
            return wf, f"{name} {which[0]} instances {which[1][0]}-{which[1][-1]}: rolling back a change " \
                       "of instance count is not supported yet (abort it, then update the job to the old config)"
        return {**wf, "message": f"rolled back by {who}"}, None
    return wf, f"unknown update action {action!r} (known: {', '.join(ACTIONS)})"


def abort(wf: dict, why: str, now: int) -> dict:
    """A workflow another one replaces, or whose job was stopped."""
    return _end(wf, ABORTED, why, now) if wf["state"] in ACTIVE else wf


def _touch(wf: dict, now: int) -> dict:
    wf["updated_ms"] = now
    return wf


def _end(wf: dict, state: str, message: str, now: int) -> dict:
    return {**wf, "state": state, "paused_from": "", "message": message, "updated_ms": now, "completed_ms": now}


def summary(wf: dict) -> dict:
    """What `update get` and the API show: counts with the instance lists."""
    return {**{k: v for k, v in wf.items() if k not in ("runs", "failures")},
            "instances_total": len(wf["instances"]), "instances_done": len(wf["done"]),
            "instances_failed": len(wf["failed"]), "instances_current": wf["in_flight"]}
