"""What a job's status says about its runs without a broker: the launched runs their agent has
not started yet."""

from __future__ import annotations

from peloton.config import Settings
from peloton.store import TaskRow
from pelotonctl.watch import late_start_s, not_started


def task(instance: int, state: str, updated_ms: int, host: str = "h1") -> TaskRow:
    return TaskRow(task_id=f"j-{instance}-1", job_id="j", instance=instance, run_id=1, pool="/p", gang_id="g",
                   state=state, spec=None, host_id=host, updated_ms=updated_ms)


def test_launched_runs_not_started_after_a_few_reports_are_named_longest_waiting_first() -> None:
    now = 100_000
    tasks = [task(0, "LAUNCHED", now - 4_000), task(1, "LAUNCHED", now - 9_000, "h2"),
             task(2, "LAUNCHED", now - 6_000), task(3, "RUNNING", now - 60_000), task(4, "PENDING", now - 60_000)]
    assert not_started(tasks, now, 5.0) == [
        {"instance": 1, "run_id": 1, "host_id": "h2", "seconds": 9.0},
        {"instance": 2, "run_id": 1, "host_id": "h1", "seconds": 6.0}]
    assert late_start_s(Settings()) == 5.0 and late_start_s(Settings(agent_heartbeat_s=3.0)) == 9.0
