"""What operators watch, through the API, so `pelotonctl lag`, `dead-letters` and `cluster status`
need a token and not the broker's or ZooKeeper's credentials:

  GET  /v1/lag                          the stage groups' consumer lag (any known user: offsets and
                                        queued demand per pool, no job's content)
  GET  /v1/dead-letters[/{number}]      the dead letters (admins: a letter holds the message it
                                        parks, a job's config and environment included)
  POST /v1/dead-letters/{number}/replay a letter sent again, fixed or not (admins; job commands
                                        only: the API writes no stage's topic)
  GET  /v1/cluster/instances            the instances registered in ZooKeeper (admins)

The API's own Kafka user may read what these need (pelotonctl/principals.py)."""

from __future__ import annotations

import threading
from typing import Annotated

from fastapi import FastAPI, Query
from pydantic import BaseModel, Field

from peloton.registry import RegistryUnavailable
from pelotonctl.api.identity import Creds
from pelotonctl import deadletters
from pelotonctl.lag import STAGES, stage_of
from pelotonctl.lag_child import LagInChild

# How many samples the API keeps per partition: a caller's --window is at most this.
LAG_WINDOW = 60
# The topics a replay through the API may write: the API writes job commands and no stage's topic.
REPLAYABLE = frozenset({"job-commands"})


class Replay(BaseModel):
    value: dict | None = Field(None, description="The whole fixed record (as GET shows under original.value)")
    set: dict[str, str] = Field({}, description="Fields of the record to replace, FIELD: VALUE (JSON for "
                                                "fields that are not strings)")
    schema_name: str | None = Field(None, alias="schema", description="The record's schema, when the original "
                                                                      "cannot be decoded (e.g. peloton.JobCommand)")


class Unavailable(Exception):
    """What is behind the API (the broker, ZooKeeper) did not answer; a 503 with this message."""


class Operations:
    """One lag monitor per API instance, kept across requests so the status words see movement;
    every caller's sample adds to the same windows."""

    def __init__(self, settings):
        self.settings = settings
        self._lock = threading.Lock()
        self._lag: LagInChild | None = None

    def lag(self, stages: tuple[str, ...], window: int) -> dict:
        with self._lock:
            if self._lag is None:
                self._lag = LagInChild(self.settings, LAG_WINDOW)  # an abort in librdkafka ends only it
            return self._lag.sample(stages, window)

    def close(self) -> None:
        with self._lock:
            if self._lag is not None:
                self._lag.close()
                self._lag = None


def add_operations(app: FastAPI, door, refused) -> Operations:
    """The routes above, on `app`, deciding with `door` (pelotonctl.api.app.Door); `refused(status,
    reason)` makes the error the API answers with."""
    settings = door.settings
    ops = Operations(settings)

    def or_503(fn, *args, **kwargs):
        """fn's answer; what was behind it (broker, lag sampler) not answering is a 503 saying why."""
        try:
            return fn(*args, **kwargs)
        except (TimeoutError, ConnectionError) as exc:
            raise refused(503, str(exc)) from None

    @app.get("/v1/lag", tags=["operations"], summary="Consumer lag per stage group, in Burrow's manner")
    def lag(creds: Creds,
            stage: Annotated[list[str], Query(description="A stage (admit, entitle, place, launch) or its group; "
                                                          "repeat for several (default: every stage)")] = [],
            window: Annotated[int, Query(ge=1, le=LAG_WINDOW, description="Samples the status word looks "
                                                                          "back over")] = 10) -> dict:
        door.allow(door.who(creds, "lag.read", "groups"), "lag.read", "groups")
        stages = []
        for name in stage or STAGES:
            found = stage_of(settings, name)
            if found is None:
                raise refused(400, f"stage {name!r}: not a stage group (stages: {', '.join(STAGES)})")
            stages.append(found)
        return or_503(ops.lag, tuple(stages), window)

    @app.get("/v1/dead-letters", tags=["operations"], summary="Every dead letter, oldest first (admins)")
    def list_letters(creds: Creds, since_ms: int | None = None, stage: str | None = None) -> dict:
        door.allow(door.who(creds, "dead_letter.read", "dead-letters"), "dead_letter.read", "dead-letters")
        return {"letters": or_503(deadletters.list_letters, settings, since_ms, stage)}

    @app.get("/v1/dead-letters/{number}", tags=["operations"],
             summary="One dead letter whole, its original decoded where possible (admins)")
    def show_letter(number: str, creds: Creds) -> dict:
        what = f"dead-letter {number}"
        door.allow(door.who(creds, "dead_letter.read", what), "dead_letter.read", what)
        return deadletters.show(or_503(deadletters.find_letter, settings, number))

    @app.post("/v1/dead-letters/{number}/replay", tags=["operations"],
              summary="Send a dead job command again, fixed or as it was (admins)")
    def replay_letter(number: str, creds: Creds, body: Replay = Replay()) -> dict:
        what = f"dead-letter {number}"
        door.allow(door.who(creds, "dead_letter.replay", what), "dead_letter.replay", what)
        letter = or_503(deadletters.find_letter, settings, number)
        # Through the API's producer: a job command goes signed by the API, for the admin who asked.
        return or_503(door.send, deadletters.replay, settings, letter, body.value, body.set, body.schema_name,
                            writable=REPLAYABLE)

    @app.get("/v1/cluster/instances", tags=["operations"],
             summary="Every instance registered in ZooKeeper, on any machine (admins)")
    def instances(creds: Creds,
                  timeout: Annotated[float, Query(gt=0, le=30, description="Seconds to wait for ZooKeeper")] = 5.0
                  ) -> dict:
        door.allow(door.who(creds, "cluster.read", "instances"), "cluster.read", "instances")
        from peloton.registry import Registry

        hosts = settings.zookeeper.strip()
        if not hosts:
            raise refused(503, "this API has no PELOTON_ZOOKEEPER: the cluster's instances register in ZooKeeper, "
                               "and the API must be started with its address to list them")
        try:
            with Registry(hosts, timeout=timeout, auth=settings.zookeeper_auth) as registry:
                return {"instances": registry.instances()}
        except RegistryUnavailable as exc:
            raise refused(503, str(exc)) from None

    return ops
