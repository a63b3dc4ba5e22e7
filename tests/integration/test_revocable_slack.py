"""Revocable work on measured slack, on a real agent host: the agent measures what each run uses,
the host manager lends the cpu a non-revocable run holds but does not use to revocable runs, and
takes it back, youngest first, when non-revocable runs want it; the preempted run waits for slack
and runs again when there is some."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.integration

# Holds 2 of the host's 4 cpu and uses none of it: an idle service.
IDLE = """name: idle-owner
type: BATCH
instanceCount: 1
defaultConfig:
  resource: {cpuLimit: 2, memLimitMb: 64, diskLimitMb: 10}
  command: {value: 'sleep 600'}
"""

# Three revocable tasks of 1 cpu: more than the 2 cpu no run holds.
BORROWER = """name: borrower
type: BATCH
instanceCount: 3
sla: {preemptible: true, revocable: true}
defaultConfig:
  resource: {cpuLimit: 1, memLimitMb: 32, diskLimitMb: 10}
  command: {value: 'sleep 600'}
"""

# A non-revocable task that wants the host's unallocated cpu for a while.
OWNER = """name: owner
type: BATCH
instanceCount: 1
defaultConfig:
  resource: {cpuLimit: 2, memLimitMb: 32, diskLimitMb: 10}
  command: {value: 'sleep 6'}
"""


def test_revocable_tasks_run_on_measured_slack_and_yield_it_back(pipeline_factory) -> None:
    p = pipeline_factory(hosts="agent:1:cpu=4,mem_mb=2048,disk_mb=1000", pool_cpu=4)
    for stage in ("admit", "entitle", "place", "launch"):
        p.start(stage, wait=False)
    p.start_agent("agent-0")

    def create(name: str, text: str) -> str:
        (p.home / f"{name}.yaml").write_text(text)
        made = p.ctl("job", "create", "/test", str(p.home / f"{name}.yaml"))
        assert made.returncode == 0, made.stderr
        return made.stdout.split()[1]  # "Job <id> created"

    def states(job: str) -> list[str]:
        return [t.state for t in sorted(p.store.tasks_of_job(job), key=lambda t: t.instance)]

    def slack() -> dict:
        [host] = json.loads(p.ctl("host", "list", "--json").stdout)["hosts"]
        return host["slack"]

    idle = create("idle", IDLE)
    p.wait_for("the idle owner RUNNING", lambda: states(idle) == ["RUNNING"], 60)
    # Its agent measures it using nearly nothing of its 3 cpu: lent as slack.
    p.wait_for("the idle owner's cpu lent", lambda: slack()["lent_cpu"] >= 1.5, 30)

    borrower = create("borrower", BORROWER)
    # 2 + 3 cpu on a 4-cpu host: the revocable runs borrow what the idle owner does not use.
    p.wait_for("all three revocable tasks RUNNING beside the owner",
               lambda: states(borrower) == ["RUNNING"] * 3, 60)
    assert states(idle) == ["RUNNING"]
    said = slack()
    assert said["revocable_cpu"] == 3 and said["free_cpu"] <= 1 and said["lent_cpu"] > 1, said
    shown = p.ctl("host", "list").stdout
    assert "slack:" in shown and "held by revocable runs" in shown, shown

    owner = create("owner", OWNER)
    # The owner takes the host's 2 unallocated cpu, which revocable runs used: the slack is what
    # the idle owner lends, 2 cpu, so the youngest revocable run is preempted and two stay.
    p.wait_for("the owner RUNNING", lambda: states(owner) in (["RUNNING"], ["SUCCEEDED"]), 60)
    p.wait_for("one revocable run preempted", lambda: sum(
        1 for e in p.store.task_events(borrower)
        if e["reason"] == "PREEMPTED" and "need its cpu back" in (e["message"] or "")) >= 1, 30)
    preempted = {e["instance"] for e in p.store.task_events(borrower) if e["reason"] == "PREEMPTED"}
    assert len(preempted) == 1, preempted
    assert states(idle) == ["RUNNING"]
    assert sorted(states(borrower)).count("RUNNING") == 2

    # The owner ends: the slack is back, and the preempted task runs again on it.
    assert p.wait_job(owner, timeout=60) == "SUCCEEDED"
    p.wait_for("the preempted task running again", lambda: states(borrower) == ["RUNNING"] * 3, 60)
    [again] = [t for t in p.store.tasks_of_job(borrower) if t.instance in preempted]
    assert again.run_id == 2 and again.failures == 0

    assert p.ctl("job", "stop", borrower).returncode == 0
    assert p.ctl("job", "stop", idle).returncode == 0
    assert p.wait_job(borrower, timeout=60) == "KILLED"
