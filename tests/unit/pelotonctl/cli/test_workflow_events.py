"""Peloton's `job stateless workflow events JOB [INSTANCE]`: the events of the job's most recent
workflow, newest first, derived from the workflow's record (its state, not its history) as the
gRPC API's GetWorkflowEvents derives them."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from pelotonctl.cli import app
from pelotonctl.cli.main import peloton_json_flag
from pelotonctl.cli.stateless import latest_workflow, workflow_events
from pelotonctl.shapes import update_info
from stages.admit.workflow import UpdateOptions, new_workflow, steer

runner = CliRunner()
CREATED, LATER = 1_700_000_000_000, 1_700_000_060_000


def _workflow(kind: str = "UPDATE", start_paused: bool = False, **now) -> dict:
    """A workflow over instances 0-4 as `update get` shows it, changed by `now` at LATER."""
    wf = new_workflow("u1", "j1", kind, [0, 1, 2, 3, 4], UpdateOptions(batch_size=2, start_paused=start_paused),
                      1, 2, "alice", CREATED)
    if now:
        wf = {**wf, **now, "updated_ms": LATER}
    return update_info(wf)


def _event(state: str, ms: int, kind: str = "UPDATE") -> dict:
    return {"state": state, "type": kind, "timestamp_ms": ms}


def test_a_new_workflow_has_one_event_the_state_it_began_in() -> None:
    assert workflow_events(_workflow()) == [_event("ROLLING_FORWARD", CREATED)]
    assert workflow_events(_workflow(start_paused=True)) == [_event("PAUSED", CREATED)]
    assert workflow_events(_workflow(kind="RESTART")) == [_event("ROLLING_FORWARD", CREATED, "RESTART")]


def test_a_workflow_in_another_state_now_shows_it_first_at_its_last_change() -> None:
    paused, _ = steer(_workflow(), "PAUSE", "bob", LATER)
    assert workflow_events(paused) == [_event("PAUSED", LATER), _event("ROLLING_FORWARD", CREATED)]
    ended = _workflow(state="SUCCEEDED", remaining=[], done=[0, 1, 2, 3, 4], completed_ms=LATER)
    assert workflow_events(ended) == [_event("SUCCEEDED", LATER), _event("ROLLING_FORWARD", CREATED)]


def test_an_instance_is_begun_when_the_workflow_began_then_done_failed_or_in_flight_as_of_its_last_change() -> None:
    wf = _workflow(state="PAUSED", paused_from="ROLLING_FORWARD", done=[0], failed=[1], in_flight=[2],
                   remaining=[3, 4])
    begun = _event("ROLLING_FORWARD", CREATED)
    assert workflow_events(wf, 0) == [_event("SUCCEEDED", LATER), begun]
    assert workflow_events(wf, 1) == [_event("FAILED", LATER), begun]
    assert workflow_events(wf, 2) == [_event("PAUSED", LATER), begun]
    assert workflow_events(wf, 3) == [begun]  # not reached yet
    assert workflow_events(wf, 9) == []  # not one it takes
    rolling = _workflow(in_flight=[0, 1], remaining=[2, 3, 4])
    assert workflow_events(rolling, 1) == [begun]  # in flight while rolling forward: nothing since
    aborted = _workflow(state="ABORTED", done=[0, 1], remaining=[2, 3, 4], completed_ms=LATER)
    assert workflow_events(aborted, 3) == []  # ended before reaching it


def test_the_latest_workflow_is_the_one_in_progress_else_the_newest() -> None:
    older_active, newest_ended = {"update_id": "a", "state": "ROLLING_FORWARD"}, {"update_id": "b", "state": "ABORTED"}
    assert latest_workflow([newest_ended, older_active]) is older_active
    assert latest_workflow([newest_ended, {"update_id": "c", "state": "SUCCEEDED"}]) is newest_ended
    assert latest_workflow([]) is None


def test_the_events_are_those_the_grpc_api_gives_for_the_same_workflow() -> None:
    from peloton.api.v1alpha.job.stateless import stateless_pb2
    from pelotonctl.api.rpc import convert
    from pelotonctl.api.rpc.v1_shapes import instance_workflow_events
    from pelotonctl.api.rpc.v1_shapes import workflow_events as api_events

    def plain(events) -> list[dict]:
        return [{"state": stateless_pb2.WorkflowState.Name(e.state).removeprefix("WORKFLOW_STATE_"),
                 "type": stateless_pb2.WorkflowType.Name(e.type).removeprefix("WORKFLOW_TYPE_"),
                 "timestamp": e.timestamp} for e in events]

    def ours(events: list[dict]) -> list[dict]:
        return [{"state": e["state"], "type": e["type"], "timestamp": convert.rfc3339(e["timestamp_ms"])}
                for e in events]

    workflows = [
        _workflow(), _workflow(start_paused=True), _workflow(kind="RESTART", in_flight=[0, 1], remaining=[2, 3, 4]),
        _workflow(state="PAUSED", paused_from="ROLLING_FORWARD", done=[0], failed=[1], in_flight=[2], remaining=[3, 4]),
        _workflow(state="ROLLING_BACKWARD", done=[0], in_flight=[1], remaining=[2]),
        _workflow(state="FAILED", failed=[0, 1], remaining=[2, 3, 4], completed_ms=LATER),
        _workflow(state="SUCCEEDED", remaining=[], done=[0, 1, 2, 3, 4], completed_ms=LATER),
        {**_workflow(in_flight=[5]), "added": [5]},
    ]
    for wf in workflows:
        assert ours(workflow_events(wf)) == plain(api_events(wf)), wf
        for instance in range(7):
            assert ours(workflow_events(wf, instance)) == plain(instance_workflow_events(wf, instance)), (wf, instance)


class _Cluster:
    def __init__(self, workflows: list[dict]) -> None:
        self.workflows = workflows

    def updates(self, job_id: str) -> list[dict]:
        from pelotonctl.admin import NotFound

        if job_id != "j1":
            raise NotFound(f"no job {job_id}")
        return self.workflows


@pytest.fixture
def cluster(monkeypatch) -> _Cluster:
    answer = _Cluster([_workflow(state="PAUSED", paused_from="ROLLING_FORWARD", done=[0], in_flight=[1],
                                 remaining=[2, 3, 4])])
    monkeypatch.setattr("pelotonctl.cli.stateless.client", lambda: answer)
    return answer


def test_workflow_events_answers_json_with_the_update_it_read_and_takes_pelotons_leading_j(cluster) -> None:
    args = peloton_json_flag(["-j", "job", "stateless", "workflow", "events", "j1", "0"])
    shown = runner.invoke(app, args)
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout) == {
        "job_id": "j1", "instance": 0, "update_id": "u1", "type": "UPDATE", "state": "PAUSED",
        "events": [_event("SUCCEEDED", LATER), _event("ROLLING_FORWARD", CREATED)]}
    whole = json.loads(runner.invoke(app, ["job", "stateless", "workflow", "events", "j1", "--json"]).stdout)
    assert whole["instance"] is None and [e["state"] for e in whole["events"]] == ["PAUSED", "ROLLING_FORWARD"]


def test_workflow_events_prints_a_table_and_says_when_there_is_nothing_to_show(cluster) -> None:
    shown = runner.invoke(app, ["job", "stateless", "workflow", "events", "j1", "1"])
    assert shown.exit_code == 0, shown.output
    assert "update u1 (update of job j1): PAUSED; instance 1" in shown.stdout
    assert shown.stdout.index("PAUSED", shown.stdout.index("state")) < shown.stdout.index("ROLLING_FORWARD")
    untouched = runner.invoke(app, ["job", "stateless", "workflow", "events", "j1", "9"])
    assert untouched.exit_code == 0 and "no events: instance 9 is not one this workflow takes" in untouched.stdout
    cluster.workflows = []
    none = runner.invoke(app, ["job", "stateless", "workflow", "events", "j1"])
    assert none.exit_code == 0 and "job j1 has had no workflow" in none.stdout
    assert json.loads(runner.invoke(app, ["job", "stateless", "workflow", "events", "j1", "--json"]).stdout) == {
        "job_id": "j1", "instance": None, "update_id": None, "type": None, "state": None, "events": []}


def test_workflow_events_refuses_a_negative_instance_and_names_an_unknown_job(cluster) -> None:
    negative = runner.invoke(app, ["job", "stateless", "workflow", "events", "j1", "--", "-1"])
    assert negative.exit_code == 2 and "instance" in negative.stderr
    unknown = runner.invoke(app, ["job", "stateless", "workflow", "events", "nope"])
    assert unknown.exit_code == 3 and "no job nope" in unknown.stderr
