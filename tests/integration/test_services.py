"""Services on a real broker with real processes: Peloton's stateless job spec run as written;
update workflows: an update paused, resumed and aborted where it is; an update whose new runs fail
rolled back to the old config on every instance it touched. Driven through `pelotonctl`, as a
user would."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES

pytestmark = pytest.mark.integration

SERVICE = """
name: {name}
type: SERVICE
instancecount: {count}
sla: {{preemptible: false}}
defaultconfig:
  resource: {{cpulimit: 0.1, memlimitmb: 8, disklimitmb: 1}}
  killgraceperiodseconds: {grace}
  command: {{shell: true, value: '{command}'}}
"""
# A run that ignores SIGTERM holds its instance for the whole grace period when it is replaced:
# every batch takes 4 s, time for a pause or an abort to land between two batches.
STUBBORN = "trap \"\" TERM; sleep 300 & wait"


def update_of(p, update_id: str) -> dict:
    answer = p.ctl("update", "get", update_id, "--json")
    assert answer.returncode == 0, answer.stderr
    return json.loads(answer.stdout)


def running_service(p, name: str, count: int, command: str, grace: int) -> tuple[str, str]:
    """A SERVICE of `count` instances submitted and RUNNING: (its config, its job id)."""
    text = SERVICE.format(name=name, count=count, command=command, grace=grace)
    job = p.submit(text)
    p.wait_for(f"{count} instances running", lambda: p.counts(job).get("RUNNING", 0) == count, 60)
    return text, job


def rolled_back(p, job: str, config: Path, retries: int, timeout_s: int) -> tuple[str, str]:
    """An update of `job` to `config`, a batch of one, rolled back once an instance failed
    `retries` times; waited for to its end, which must be ROLLED_BACK: (its id, what update get said)."""
    sent = p.ctl("job", "update", job, str(config), "--batch-size", "1", "--max-instance-retries", str(retries),
                 "--max-failure-instances", "1", "--rollback-on-failure", "--json")
    assert sent.returncode == 0, sent.stderr
    update_id = json.loads(sent.stdout)["update_id"]
    ended = p.ctl("update", "get", update_id, "--wait", "--timeout", str(timeout_s))
    assert ended.returncode == 1 and "ROLLED_BACK" in ended.stdout, ended.stdout + ended.stderr
    return update_id, ended.stdout


def runs(p, job: str) -> dict[int, tuple[int, str]]:
    return {t.instance: (t.run_id, t.state) for t in p.store.tasks_of_job(job)}


@pytest.mark.long
def test_an_update_pauses_between_batches_resumes_to_the_end_and_another_aborts_where_it_is(
        pipeline_factory, tmp_path) -> None:
    p = pipeline_factory(hosts="local:2:cpu=4,mem_mb=4096,disk_mb=10000")
    p.start_all()
    # The pause must reach the job manager within instance 0's grace: with 4 s, a loaded machine's
    # CLI process once came after it, and the second batch had started (the full suite).
    text, job = running_service(p, "svc", 3, STUBBORN, 8)
    changed = tmp_path / "changed.yaml"
    changed.write_text(text.replace("memlimitmb: 8", "memlimitmb: 9"))
    sent = p.ctl("job", "update", job, str(changed), "--batch-size", "1", "--start-paused", "--json")
    assert sent.returncode == 0, sent.stderr
    update_id = json.loads(sent.stdout)["update_id"]
    assert update_of(p, update_id)["state"] == "PAUSED"
    time.sleep(2)
    assert {i: r for i, (r, _) in runs(p, job).items()} == {0: 1, 1: 1, 2: 1}  # paused: nothing replaced

    assert p.ctl("update", "resume", update_id).returncode == 0
    paused = p.ctl("update", "pause", update_id)  # while instance 0 is in its grace period
    assert paused.returncode == 0, paused.stderr
    p.wait_for("the batch in flight settled", lambda: update_of(p, update_id)["instances_current"] == [], 60)
    held = runs(p, job)
    time.sleep(5)
    assert runs(p, job) == held and update_of(p, update_id)["state"] == "PAUSED"  # the next batch waits
    assert held == {0: (2, "RUNNING"), 1: (1, "RUNNING"), 2: (1, "RUNNING")}
    # Peloton's `job stateless workflow events JOB INSTANCE`, newest first: where the paused
    # workflow is with the instance it replaced, and with one it has not reached.
    def events(instance: int) -> list[str]:
        shown = p.ctl("-j", "job", "stateless", "workflow", "events", job, str(instance))
        assert shown.returncode == 0, shown.stderr
        return [e["state"] for e in json.loads(shown.stdout)["events"]]
    assert events(0) == ["SUCCEEDED", "ROLLING_FORWARD"] and events(2) == ["ROLLING_FORWARD"]

    assert p.ctl("update", "resume", update_id).returncode == 0
    done = p.ctl("update", "get", update_id, "--wait", "--timeout", "90")
    assert done.returncode == 0 and "SUCCEEDED" in done.stdout, done.stdout + done.stderr
    assert runs(p, job) == {0: (2, "RUNNING"), 1: (2, "RUNNING"), 2: (2, "RUNNING")}

    again = tmp_path / "again.yaml"
    again.write_text(text.replace("memlimitmb: 8", "memlimitmb: 10"))
    second = json.loads(p.ctl("job", "update", job, str(again), "--batch-size", "1", "--json").stdout)["update_id"]
    # Aborted while its first batch is in flight (instance 0's old run in its 8 s grace): waiting
    # for that batch to be done first let a loaded machine's next two batches start before the
    # abort arrived.
    p.wait_for("the first batch in flight", lambda: update_of(p, second)["instances_current"] != [], 60)
    aborted = p.ctl("update", "abort", second)
    assert aborted.returncode == 0, aborted.stderr
    p.wait_for("the update ABORTED", lambda: update_of(p, second)["state"] == "ABORTED", 30)
    p.wait_for("what was in flight running", lambda: all(s == "RUNNING" for _, s in runs(p, job).values()), 60)
    where = runs(p, job)
    time.sleep(3)
    assert runs(p, job) == where and where[2] == (2, "RUNNING")  # the last instance was never replaced
    listed = json.loads(p.ctl("update", "list", job, "--json").stdout)
    assert [(u["update_id"], u["state"]) for u in listed] == [(second, "ABORTED"), (update_id, "SUCCEEDED")]
    assert "aborted by" in listed[0]["message"]
    assert p.ctl("job", "stop", job, "--wait").returncode == 0


def test_an_update_whose_new_runs_fail_rolls_back_to_the_old_config_everywhere(pipeline_factory, tmp_path) -> None:
    p = pipeline_factory(hosts="local:2:cpu=4,mem_mb=4096,disk_mb=10000", service_backoff_base_s=0.2)
    p.start_all()
    text, job = running_service(p, "rb", 3, "sleep 300 & wait", 1)
    broken = tmp_path / "broken.yaml"
    broken.write_text(text.replace("sleep 300 & wait", "exit 3"))
    update_id, said = rolled_back(p, job, broken, retries=2, timeout_s=120)
    assert "max-failure-instances 1: rolling back" in said
    p.wait_for("every instance running", lambda: p.counts(job) == {"RUNNING": 3}, 60)
    tasks = p.store.tasks_of_job(job)
    assert all("exit 3" not in json.dumps(t.spec) for t in tasks), [t.spec for t in tasks]
    wf = update_of(p, update_id)
    assert wf["rolled_back"] and set(wf["rolled_back"]) <= {0, 1, 2} and wf["to_version"] == 3
    # The versions: 1 the original, 2 the broken one, 3 the original again.
    v2 = json.loads(p.ctl("job", "get", job, "--version", "2", "--json").stdout)
    assert v2["config"]["defaultconfig"]["command"]["value"] == "exit 3"
    current = json.loads(p.ctl("job", "get", job, "--json").stdout)
    assert current["runtime"]["config_version"] == 3 and current["runtime"]["update"] is None
    assert current["config"]["defaultconfig"]["command"]["value"] == "sleep 300 & wait"
    # The untouched instance never ran the broken config.
    untouched = set(range(3)) - set(wf["rolled_back"])
    assert all(t.run_id == 1 for t in tasks if t.instance in untouched)
    assert p.ctl("job", "stop", job, "--wait").returncode == 0


HEALTHY_BUDGETED = """
name: {name}
type: SERVICE
instancecount: 3
sla: {{preemptible: false, maximumUnavailableInstances: 1}}
defaultconfig:
  resource: {{cpulimit: 0.1, memlimitmb: 8, disklimitmb: 1}}
  killgraceperiodseconds: 1
  command: {{shell: true, value: '{command}'}}
  healthcheck:
    enabled: true
    type: COMMAND
    initialintervalsecs: 1
    intervalsecs: 1
    maxconsecutivefailures: 2
    timeoutsecs: 1
    commandcheck: {{command: 'test -f ready'}}
"""


def test_an_update_whose_new_runs_never_become_healthy_rolls_back_under_its_disruption_budget(
        pipeline_factory, tmp_path) -> None:
    """The instance to roll back is the one the broken update left down, and the budget (one
    instance down) is full with it: the rollback replaces it at no cost, where it waited for ever."""
    p = pipeline_factory(hosts="local:2:cpu=4,mem_mb=4096,disk_mb=10000", service_backoff_base_s=0.2)
    p.start_all()
    text = HEALTHY_BUDGETED.format(name="hb", command="touch ready; sleep 300 & wait")
    job = p.submit(text)
    p.wait_for("3 instances healthy", lambda: sum(t.health == "HEALTHY" for t in p.store.tasks_of_job(job)) == 3, 90)
    broken = tmp_path / "never-ready.yaml"
    broken.write_text(text.replace("touch ready; sleep 300 & wait", "rm -f ready; sleep 300 & wait"))
    rolled_back(p, job, broken, retries=1, timeout_s=150)
    p.wait_for("3 instances healthy again", lambda: sum(
        t.health == "HEALTHY" for t in p.store.tasks_of_job(job)) == 3, 90)
    assert p.ctl("job", "stop", job, "--wait").returncode == 0


STATELESS = EXAMPLES / "stateless" / "testspec.yaml"


def test_pelotons_stateless_spec_runs_as_written(pipeline_factory) -> None:
    p = pipeline_factory(hosts="local:1:cpu=4,mem_mb=4096,disk_mb=10000")
    p.start_all()
    made = p.ctl("job", "create", "/test", str(STATELESS), "--json")
    assert made.returncode == 0, made.stderr
    job = json.loads(made.stdout)["job_id"]
    p.wait_for("its 3 instances running", lambda: p.counts(job) == {"RUNNING": 3}, 60)
    assert p.store.get_job(job).type == "SERVICE"
    p.wait_for("its loop printing", lambda: "running 3" in p.ctl("task", "logs", job, "2").stdout, 30)
    assert p.ctl("job", "stop", job, "--wait").returncode == 0


def test_a_shrink_from_4_to_2_instances_stops_instances_2_and_3(pipeline_factory, tmp_path) -> None:
    p = pipeline_factory(hosts="local:1:cpu=4,mem_mb=4096,disk_mb=10000")
    p.start_all()
    text, job = running_service(p, "shrink", 4, "sleep 300", 2)
    fewer = tmp_path / "fewer.yaml"
    fewer.write_text(text.replace("instancecount: 4", "instancecount: 2"))
    sent = p.ctl("job", "update", job, str(fewer))
    assert sent.returncode == 0 and "instances 2-3 removed" in sent.stdout, (sent.stdout, sent.stderr)
    p.wait_for("instances 2 and 3 DELETED", lambda: runs(p, job) == {
        0: (1, "RUNNING"), 1: (1, "RUNNING"), 2: (1, "DELETED"), 3: (1, "DELETED")}, 30)
    shown = json.loads(p.ctl("job", "get", job, "--json").stdout)
    assert shown["runtime"]["state"] == "RUNNING", shown["runtime"]
    assert p.ctl("job", "stop", job).returncode == 0
    assert p.wait_job(job, timeout=60) == "KILLED"


def test_a_rolling_stop_and_start_go_a_batch_at_a_time(pipeline_factory) -> None:
    p = pipeline_factory(hosts="local:1:cpu=4,mem_mb=4096,disk_mb=10000")
    p.start_all()
    _text, job = running_service(p, "rolling", 3, STUBBORN, 2)  # each stop takes its 2 s grace
    sent = p.ctl("job", "stop", job, "--batch-size", "1", "--json")
    assert sent.returncode == 0, sent.stderr
    update_id = json.loads(sent.stdout)["update_id"]
    most = 0
    while update_of(p, update_id)["state"] == "ROLLING_FORWARD":
        most = max(most, sum(1 for _r, state in runs(p, job).values() if state == "KILLING"))
        time.sleep(0.1)
    assert update_of(p, update_id)["state"] == "SUCCEEDED" and most == 1, most
    assert p.wait_job(job, timeout=30) == "KILLED"
    # Peloton's form: `job rolling-start JOB BATCH-SIZE -r FROM:TO` (half-open ranges).
    started = p.ctl("job", "rolling-start", job, "2", "-r", "0:2", "--json")
    assert started.returncode == 0, started.stderr
    assert json.loads(started.stdout)["instances"] == [0, 1]
    waited = p.ctl("update", "get", json.loads(started.stdout)["update_id"], "--wait")
    assert waited.returncode == 0, waited.stdout + waited.stderr
    assert runs(p, job) == {0: (2, "RUNNING"), 1: (2, "RUNNING"), 2: (1, "KILLED")}
    started = p.ctl("job", "start", job, "--batch-size", "2", "--json")
    assert started.returncode == 0, started.stderr
    waited = p.ctl("update", "get", json.loads(started.stdout)["update_id"], "--wait")
    assert waited.returncode == 0, waited.stdout + waited.stderr
    assert runs(p, job) == {i: (2, "RUNNING") for i in range(3)}
    stopped = p.ctl("job", "rolling-stop", job, "1", "--json")
    assert stopped.returncode == 0 and json.loads(stopped.stdout)["instances"] == [0, 1, 2], stopped.stderr


CHECKED = """
name: checked
type: SERVICE
instancecount: 2
sla: {preemptible: false}
defaultconfig:
  resource: {cpulimit: 0.1, memlimitmb: 8, disklimitmb: 1}
  killgraceperiodseconds: 1
  command: {shell: true, value: 'sleep 300'}
  healthcheck:
    enabled: true
    type: COMMAND
    initialintervalsecs: 1
    intervalsecs: 1
    maxconsecutivefailures: 2
    timeoutsecs: 2
    commandcheck: {command: 'test "$PELOTON_INSTANCE_ID" = 0'}
"""


def test_a_service_whose_health_check_fails_is_unhealthy_and_runs_again_while_a_healthy_one_runs_on(
        pipeline_factory) -> None:
    # On agent hosts: the agent runs the checks and its reports carry the health to the job manager.
    p = pipeline_factory(hosts="agent:2:cpu=4,mem_mb=1024,disk_mb=1000")
    p.start_all()
    job = p.submit(CHECKED)

    def tasks() -> dict[int, dict]:
        return {t["instance"]: t for t in json.loads(p.ctl("task", "list", job, "--json").stdout)}

    p.wait_for("instance 0 HEALTHY", lambda: tasks()[0]["health"] == "HEALTHY", 60)
    p.wait_for("instance 1 run again", lambda: tasks()[1]["run_id"] >= 2, 60)
    assert tasks()[0]["run_id"] == 1 and tasks()[0]["state"] == "RUNNING"  # the healthy one runs on
    events = json.loads(p.ctl("task", "events", job, "1", "--json").stdout)
    first = [e for e in events if e["run_id"] == 1]
    assert any(e["state"] == "RUNNING" and (e["message"] or "").startswith("UNHEALTHY: health check failed 2 times")
               for e in first), first
    ended = [e for e in first if e["state"] == "FAILED"]
    assert ended and ended[-1]["reason"] == "REASON_TASK_UNHEALTHY", first
    listed = p.ctl("task", "list", job).stdout
    assert "health" in listed and "HEALTHY" in listed, listed
    shown = json.loads(p.ctl("task", "get", job, "0", "--json").stdout)
    assert shown["health"] == "HEALTHY", shown
    assert p.ctl("job", "stop", job, "--wait").returncode == 0


def test_an_in_place_restart_puts_each_instance_back_on_the_host_it_ran_on(pipeline_factory) -> None:
    p = pipeline_factory(hosts="local:3:cpu=4,mem_mb=4096,disk_mb=10000")
    p.start_all()

    def service(name: str, cpu: float) -> str:
        job = p.submit(SERVICE.format(name=name, count=1, command="sleep 300", grace=1).replace(
            "cpulimit: 0.1", f"cpulimit: {cpu}"))
        p.wait_for(f"{name} running", lambda: p.counts(job).get("RUNNING", 0) == 1, 60)
        return job

    def host_of(job: str) -> str:
        return p.store.tasks_of_job(job)[0].host_id

    # PACK places on the fullest host that fits. The service's host is made the emptier one
    # before its restart: a plain restart would move it to the fuller host, in place it stays.
    job, neighbour = service("placed", 1), service("neighbour", 2)
    home = host_of(job)
    assert host_of(neighbour) == home  # the fullest host that fits
    fuller = host_of(service("elsewhere", 2.5))  # does not fit beside the two
    assert fuller != home
    assert p.ctl("job", "stop", neighbour, "--wait").returncode == 0  # home: 3 cpus free, fuller: 1.5
    sent = p.ctl("job", "restart", job, "--in-place", "--json")
    assert sent.returncode == 0, sent.stderr
    waited = p.ctl("update", "get", json.loads(sent.stdout)["update_id"], "--wait", "--timeout", "60")
    assert waited.returncode == 0 and "SUCCEEDED" in waited.stdout, waited.stdout + waited.stderr
    [after] = p.store.tasks_of_job(job)
    assert (after.run_id, after.state, after.spec["prefer_host"]) == (2, "RUNNING", home)
    assert after.host_id == home  # back where it ran, though PACK alone would have taken the fuller host
    plain = p.ctl("job", "restart", job, "--json")
    assert p.ctl("update", "get", json.loads(plain.stdout)["update_id"], "--wait", "--timeout", "60").returncode == 0
    [moved] = p.store.tasks_of_job(job)
    assert (moved.run_id, moved.spec["prefer_host"], moved.host_id) == (3, "", fuller)  # the difference in-place makes
    assert p.ctl("job", "stop", job, "--wait").returncode == 0
