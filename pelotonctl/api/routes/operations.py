"""What operators watch, through the API, so `pelotonctl lag`, `dead-letters` and `cluster status`
need a token and not the broker's or ZooKeeper's credentials:

  GET  /v1/lag                          the stage groups' consumer lag, as the API's lag sampler last
                                        saw it (any known user: offsets and queued demand per pool,
                                        no job's content)
  GET  /v1/dead-letters[/{number}]      the dead letters (admins: a letter holds the message it
                                        parks, a job's config and environment included)
  POST /v1/dead-letters/{number}/replay a letter sent again, fixed or not (admins; job commands
                                        only: the API writes no stage's topic)
  GET  /v1/cluster/instances            the instances registered in ZooKeeper (admins)
  GET  /v1/admin/lockdown               the components locked down (admins)
  POST /v1/admin/lock, /v1/admin/unlock lock or unlock components: Read, Write, Kill (admins)

The API's own Kafka user may read what these need (pelotonctl/principals.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, Field

from peloton.registry import RegistryUnavailable
from pelotonctl import deadletters, lockdown
from pelotonctl.api.door import DoorDep, Refused
from pelotonctl.api.identity import Creds
from pelotonctl.api.operations import LAG_WINDOW, REPLAYABLE, Operations, operations_of
from pelotonctl.lag import STAGES, stage_of

router = APIRouter(tags=["operations"])


class Replay(BaseModel):
    value: dict | None = Field(None, description="The whole fixed record (as GET shows under original.value)")
    set: dict[str, str] = Field({}, description="Fields of the record to replace, FIELD: VALUE (JSON for "
                                                "fields that are not strings)")
    schema_name: str | None = Field(None, alias="schema", description="The record's schema, when the original "
                                                                      "cannot be decoded (e.g. peloton.JobCommand)")


def or_503(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """fn's answer; what was behind it (broker, lag sampler) not answering is a 503 saying why."""
    try:
        return fn(*args, **kwargs)
    except (TimeoutError, ConnectionError) as exc:
        raise Refused(503, str(exc)) from None


@router.get("/v1/lag", summary="Consumer lag per stage group, in Burrow's manner")
def lag(creds: Creds, door: DoorDep, ops: Annotated[Operations, Depends(operations_of)],
        stage: Annotated[list[str], Query(description="A stage (admit, entitle, place, launch) or its group; "
                                                      "repeat for several (default: every stage)")] = [],
        window: Annotated[int, Query(ge=1, le=LAG_WINDOW, description="Kept for older clients and not used: "
                                     "every caller reads the one sampler's status words, over its own window "
                                     "(under `sampler` in the answer)")] = 10) -> dict:
    """The last sample of the API's lag sampler (taken every second from the brokers), each group
    with its status word, since when it has had it and why (`status_since_ms`, `detail`): the
    status the dashboard, `job status` and the peloton_group_status series tell too."""
    door.allow(door.who(creds, "lag.read", "groups"), "lag.read", "groups")
    stages = []
    for name in stage or STAGES:
        found = stage_of(door.settings, name)
        if found is None:
            raise Refused(400, f"stage {name!r}: not a stage group (stages: {', '.join(STAGES)})")
        stages.append(found)
    return or_503(ops.lag, tuple(stages))


@router.get("/v1/dead-letters", summary="Every dead letter, oldest first (admins)")
def list_letters(creds: Creds, door: DoorDep, since_ms: int | None = None, stage: str | None = None) -> dict:
    door.allow(door.who(creds, "dead_letter.read", "dead-letters"), "dead_letter.read", "dead-letters")
    return {"letters": or_503(deadletters.list_letters, door.settings, since_ms, stage)}


@router.get("/v1/dead-letters/{number}", summary="One dead letter whole, its original decoded where possible (admins)")
def show_letter(number: str, creds: Creds, door: DoorDep) -> dict:
    what = f"dead-letter {number}"
    door.allow(door.who(creds, "dead_letter.read", what), "dead_letter.read", what)
    return deadletters.show(or_503(deadletters.find_letter, door.settings, number))


@router.post("/v1/dead-letters/{number}/replay", summary="Send a dead job command again, fixed or as it was (admins)")
def replay_letter(number: str, creds: Creds, door: DoorDep, body: Replay = Replay()) -> dict:
    what = f"dead-letter {number}"
    door.allow(door.who(creds, "dead_letter.replay", what), "dead_letter.replay", what)
    letter = or_503(deadletters.find_letter, door.settings, number)
    # Through the API's producer: a job command goes signed by the API, for the admin who asked.
    return or_503(door.send, deadletters.replay, door.settings, letter, body.value, body.set, body.schema_name,
                  writable=REPLAYABLE)


@router.get("/v1/cluster/instances", summary="Every instance registered in ZooKeeper, on any machine (admins)")
def instances(creds: Creds, door: DoorDep,
              timeout: Annotated[float, Query(gt=0, le=30, description="Seconds to wait for ZooKeeper")] = 5.0
              ) -> dict:
    door.allow(door.who(creds, "cluster.read", "instances"), "cluster.read", "instances")
    from peloton.registry import Registry

    hosts = door.settings.zookeeper.strip()
    if not hosts:
        raise Refused(503, "this API has no PELOTON_ZOOKEEPER: the cluster's instances register in ZooKeeper, "
                           "and the API must be started with its address to list them")
    try:
        with Registry(hosts, timeout=timeout, auth=door.settings.zookeeper_auth) as registry:
            return {"instances": registry.instances()}
    except RegistryUnavailable as exc:
        raise Refused(503, str(exc)) from None


class Components(BaseModel):
    components: list[str] = Field(..., description="Peloton's components: Read, Write, Kill (GoalStateEngine "
                                                   "and Launch answer a failure with why)")


@router.get("/v1/admin/lockdown", summary="The components locked down, by whom and since when (admins)")
def get_lockdown(creds: Creds, door: DoorDep) -> dict:
    door.allow(door.who(creds, "cluster.lockdown", "lockdown"), "cluster.lockdown", "lockdown")
    return {"locked": lockdown.lockdown(door.store)}


@router.post("/v1/admin/lock", summary="Lock down components: their calls and commands refused until unlocked "
                                       "(admins)")
def lock(body: Components, creds: Creds, door: DoorDep) -> dict:
    return set_locks(body, creds, door, True)


@router.post("/v1/admin/unlock", summary="Lift a lockdown (admins)")
def unlock(body: Components, creds: Creds, door: DoorDep) -> dict:
    return set_locks(body, creds, door, False)


def set_locks(body: Components, creds: Any, door: Any, locked: bool) -> dict:
    who = door.who(creds, "cluster.lockdown", ",".join(body.components))
    door.allow(who, "cluster.lockdown", ",".join(body.components))
    answer = lockdown.set_locks(door.store, body.components, locked, who.user)
    door.locks(fresh=True)  # this API's own door sees it at once
    return answer
