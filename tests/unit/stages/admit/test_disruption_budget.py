"""A job's disruption budget (sla.maximumUnavailableInstances) as drains and update workflows
apply it: pure, with tasks as plain objects."""

from __future__ import annotations

from types import SimpleNamespace

from stages.admit.drain import down, plan_drain
from stages.admit.workflow import UPDATE, UpdateOptions, advance, new_workflow


def task(i: int, state: str = "RUNNING", host: str = "h1", run: int = 1) -> SimpleNamespace:
    return SimpleNamespace(instance=i, state=state, health="", host_id=host, task_id=f"j-{i}-{run}", run_id=run,
                           failures=0, reason="")


def test_what_counts_as_down_is_what_should_run_and_does_not() -> None:
    tasks = [task(0), task(1, "PENDING"), task(2, "KILLING"), task(3, "SUCCEEDED"), task(4, "KILLED"),
             task(5, "INITIALIZED"), task(6, "LAUNCHED")]
    assert down(tasks) == 3  # pending, being killed, launched; not the ended ones nor those held back


def test_a_drain_moves_as_many_running_instances_as_the_budget_leaves_and_says_why_the_rest_wait() -> None:
    tasks = [task(0), task(1), task(2, host="h2"), task(3, host="h2"), task(4, host="h3")]
    plan = plan_drain("j", tasks, {"h1", "h2"}, budget=1)
    assert [t.instance for t in plan.kill] == [0]
    assert sorted(plan.waiting) == ["j-1-1", "j-2-1", "j-3-1"]
    assert plan.waiting["j-2-1"] == "drain of host h2 waits: job j has 1 of its sla.maximumUnavailableInstances 1 down"
    # One instance already down elsewhere: nothing more may go.
    tasks[4].state = "PENDING"
    assert plan_drain("j", tasks, {"h1", "h2"}, budget=1).kill == []
    # A run on a draining host that does not run yet is down already: it moves at no cost.
    tasks[1].state = "LAUNCHED"
    assert [t.instance for t in plan_drain("j", tasks, {"h1"}, budget=2).kill] == [1]
    # No budget: everything on the draining hosts goes at once.
    assert len(plan_drain("j", tasks, {"h1", "h2"}, budget=0).kill) == 4
    assert plan_drain("j", tasks, {"h9"}, budget=1).kill == []


def test_an_update_batch_takes_down_no_more_than_the_budget_and_waits_while_none_may_go() -> None:
    tasks = {i: task(i) for i in range(4)}
    wf = new_workflow("u", "j", UPDATE, [0, 1, 2, 3], UpdateOptions(batch_size=3), 1, 2, "me", 0)
    step = advance(wf, tasks, 1, budget=2)
    assert step.replace == [0, 1]  # batch size 3, but only 2 may be down at once
    # Instance 4, which the update leaves alone, is down for another reason: the next batch is one.
    tasks.update({0: task(0, run=2), 1: task(1, run=2), 4: task(4, "PENDING")})
    step = advance(step.workflow, tasks, 2, budget=2)
    assert step.replace == [2] and step.workflow["remaining"] == [3]
    # Every instance it may take is down: it waits, and says why.
    tasks.update({2: task(2, run=2), 0: task(0, "PENDING", run=3)})
    waiting = advance(step.workflow, tasks, 3, budget=2)
    assert waiting.replace == [] and waiting.workflow["message"] == \
        "waits: 2 instances down, sla.maximumUnavailableInstances 2"
    tasks[0] = task(0, run=3)
    last = advance(waiting.workflow, tasks, 4, budget=2)
    assert last.replace == [3] and last.workflow["message"] == ""  # room again: it goes on
    tasks[3] = task(3, run=2)
    assert advance(last.workflow, tasks, 5, budget=2).workflow["state"] == "SUCCEEDED"


def test_an_instance_down_already_is_replaced_at_no_cost_to_the_budget() -> None:
    """A rollback whose instance to restore is the one down (its new config never became healthy)
    waited for ever behind the budget that instance itself filled."""
    tasks = {0: task(0), 1: task(1), 2: task(2)}
    tasks[2].health = "UNHEALTHY"
    wf = new_workflow("u", "j", UPDATE, [0, 1, 2], UpdateOptions(batch_size=2), 1, 2, "me", 0)
    step = advance(wf, tasks, 1, budget=1)
    assert step.replace == [2] and step.workflow["remaining"] == [0, 1]  # those serving wait their turn
    tasks[2] = task(2, run=2)
    step = advance(step.workflow, tasks, 2, budget=1)
    assert step.replace == [0]
