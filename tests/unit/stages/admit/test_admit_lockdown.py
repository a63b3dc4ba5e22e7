"""The job manager keeps the cluster's lockdown for commands from any sender (a producer's as the
API's): a locked Write refuses creates and changes with who locked it, a locked Kill refuses
stops, and what is not locked goes on."""

from __future__ import annotations

from tests.builders.stages import JOB, command, control


def create(job_id: str, command_id: str):
    r = command(job_id, JOB.format(name=job_id, count=1, gang=0, cpu=1))
    r.value["command_id"] = command_id
    return r


def test_locked_components_refuse_their_commands_until_unlocked(admit, store) -> None:
    stage, out = admit
    stage.handle([command("a", JOB.format(name="a", count=1, gang=0, cpu=1))])
    store.set_lockdown("Write", True, 10, "ops")
    stage.lockdown.next_read = 0.0  # read at most once a second: as if a second had passed
    stage.handle([create("b", "c-b"),
                  control("STOP", "a", command_id="c-stop")])
    assert store.get_job("b") is None and store.get_job("a").state == "KILLING"  # a stop is a Kill, not a Write
    refused = store.command_outcome("c-b")
    assert refused["state"] == "refused" and "locked down for Write by ops" in refused["reason"]
    store.set_lockdown("Write", False, 20, "ops")
    store.set_lockdown("Kill", True, 20, "ops")
    stage.lockdown.next_read = 0.0
    stage.handle([create("b", "c-b2"),
                  control("START", "a", command_id="c-start"), control("STOP", "a", command_id="c-stop2")])
    assert store.get_job("b") is not None
    assert "locked down for Kill" in store.command_outcome("c-stop2")["reason"]
    out.take()
