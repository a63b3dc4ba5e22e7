"""Job control on a real broker: stop (whole job and instance ranges), start, delete, get, query,
task events; a stop survives the admit instance that was handling it."""

from __future__ import annotations

import json
import signal
import time
from itertools import pairwise

import pytest

from tests.integration.helpers import processes_of

pytestmark = pytest.mark.integration

LONG = """
name: {name}
instancecount: {count}
labels: [{{key: team, value: {team}}}]
sla: {{preemptible: true}}
defaultconfig:
  resource: {{cpulimit: 0.1, memlimitmb: 8, disklimitmb: 1}}
  # A child of its own, so that a stop must end the whole process group.
  command: {{shell: true, value: 'sleep 300 & wait'}}
"""


def test_a_stopped_100_instance_job_ends_killed_with_no_process_left(pipeline_factory) -> None:
    p = pipeline_factory(hosts="local:4:cpu=4,mem_mb=4096,disk_mb=10000")
    p.start_all()
    job = p.submit(LONG.format(name="big", count=100, team="a"))
    p.wait_for("100 tasks running", lambda: p.counts(job).get("RUNNING", 0) == 100, 120)
    assert len(processes_of(job)) >= 100
    stopped = p.ctl("job", "stop", job, "--wait", "--json")
    assert stopped.returncode == 0, stopped.stderr
    assert len(json.loads(stopped.stdout)["instances"]) == 100
    p.wait_for("the job KILLED", lambda: p.store.get_job(job).state == "KILLED", 30)
    assert p.counts(job) == {"KILLED": 100}
    p.wait_for("no process of the job left", lambda: not processes_of(job), 10)
    events = json.loads(p.ctl("task", "events", job, "7", "--json").stdout)
    assert [e["state"] for e in events][-2:] == ["KILLING", "KILLED"]
    assert events[-1]["reason"] == "STOPPED" and events[-1]["host_id"]
    # the pool holds nothing for it any more
    p.wait_for("its allocation released", lambda: not [a for a in p.store.allocations() if a.task_id.startswith(job)],
               10)


def test_stop_and_start_instance_ranges_then_delete_and_query(pipeline_factory) -> None:
    p = pipeline_factory(hosts="local:2:cpu=4,mem_mb=4096,disk_mb=10000")
    p.start_all()
    job = p.submit(LONG.format(name="ranges", count=4, team="blue"))
    other = p.submit(LONG.format(name="other", count=1, team="red"))
    p.wait_for("4 tasks running", lambda: p.counts(job).get("RUNNING", 0) == 4, 60)

    assert p.ctl("job", "stop", job, "--instances", "0-1", "--wait").returncode == 0
    tasks = {t.instance: t for t in p.store.tasks_of_job(job)}
    assert [tasks[i].state for i in range(4)] == ["KILLED", "KILLED", "RUNNING", "RUNNING"]
    bad = p.ctl("job", "stop", job, "--instances", "3-9")
    assert bad.returncode == 2 and "the job has instances 0-3" in bad.stderr, bad.stderr

    assert p.ctl("job", "start", job, "--instances", "0-1").returncode == 0
    p.wait_for("the stopped instances running again as new runs",
               lambda: all(t.state == "RUNNING" and t.run_id == 2 for t in p.store.tasks_of_job(job) if t.instance < 2),
               60)
    assert p.store.get_job(job).state == "RUNNING"

    running = p.ctl("job", "delete", job)
    assert running.returncode == 2 and "only a terminal job is deleted" in running.stderr, running.stderr
    assert p.ctl("job", "delete", "no-such-job").returncode == 3

    by_label = json.loads(p.ctl("job", "query", "--label", "team=blue", "--json").stdout)
    assert [j["job_id"] for j in by_label] == [job]
    by_state = json.loads(p.ctl("job", "query", "--state", "running", "--pool", "/test", "--json").stdout)
    assert sorted(j["job_id"] for j in by_state) == sorted([job, other])

    assert p.ctl("job", "stop", job, "--wait").returncode == 0
    p.wait_for("the job KILLED", lambda: p.store.get_job(job).state == "KILLED", 30)
    assert json.loads(p.ctl("job", "query", "--state", "KILLED", "--json").stdout)[0]["job_id"] == job
    deleted = p.ctl("job", "delete", job)
    assert deleted.returncode == 0, deleted.stderr
    p.wait_for("the job gone", lambda: p.store.get_job(job) is None, 30)
    assert p.store.task_events(job) == []
    # its id stays taken: a new job under it would have the old runs' ids, which the stages still hold
    config = p.home / "again.yaml"
    config.write_text(LONG.format(name="again", count=1, team="blue"))
    again = p.ctl("job", "create", "-i", job, "/test", str(config))
    assert again.returncode == 2 and f"job {job} was deleted at" in again.stderr, again.stderr
    assert p.ctl("job", "stop", other, "--wait").returncode == 0


def test_a_job_that_ended_is_deleted_after_its_retention(pipeline_factory) -> None:
    # Long enough for `job get` to start and answer first: a CLI process took more than 3 s to
    # start on a loaded machine, and found the job already deleted.
    p = pipeline_factory(hosts="local:1:cpu=2,mem_mb=1024,disk_mb=1000", job_retention_s=12)
    p.start_all()
    job = p.submit(LONG.format(name="brief", count=1, team="a").replace("'sleep 300 & wait'", "'true'"))
    assert p.wait_job(job, 60) == "SUCCEEDED"
    kept = json.loads(p.ctl("job", "get", job, "--json").stdout)["runtime"]
    assert kept["kept_until_ms"] == kept["completed_ms"] + 12_000
    p.wait_for("the job deleted", lambda: p.store.get_job(job) is None, 30)
    assert p.store.tasks_of_job(job) == [] and job in p.store.deleted_jobs([job])
    assert p.ctl("job", "get", job).returncode == 3


def test_a_stop_survives_the_admit_instance_killed_while_handling_it(pipeline_factory) -> None:
    p = pipeline_factory(hosts="local:2:cpu=4,mem_mb=4096,disk_mb=10000")
    for stage in ("entitle", "place", "launch"):
        p.start(stage, wait=False)
    admit = p.start("admit", "admit-a")
    job = p.submit(LONG.format(name="survivor", count=6, team="a"))
    p.wait_for("6 tasks running", lambda: p.counts(job).get("RUNNING", 0) == 6, 60)
    assert p.ctl("job", "stop", job).returncode == 0
    admit.send_signal(signal.SIGKILL)  # at once: it may or may not have read the command
    admit.wait()
    p.start("admit", "admit-b")
    p.wait_for("the job KILLED after the takeover", lambda: p.store.get_job(job).state == "KILLED", 60)
    p.wait_for("no process of the job left", lambda: not processes_of(job), 10)


SERVICE = """
name: web
type: SERVICE
instancecount: 1
sla: {preemptible: true}
defaultconfig:
  resource: {cpulimit: 0.1, memlimitmb: 8, disklimitmb: 1}
  command: {shell: true, value: 'echo "run of $PELOTON_TASK_ID"; sleep 0.3; exit 3'}
"""


def test_a_service_task_that_exits_runs_again_after_its_backoff_until_stopped(pipeline_factory) -> None:
    p = pipeline_factory(hosts="local:1:cpu=2,mem_mb=1024,disk_mb=1000", service_backoff_base_s=1.0)
    p.start_all()
    job = p.submit(SERVICE)
    p.wait_for("a third run launched", lambda: any(e["run_id"] == 3 and e["state"] == "LAUNCHED"
                                                   for e in p.store.task_events(job)), 60)
    events = p.store.task_events(job)
    ended = {e["run_id"]: e["timestamp_ms"] for e in events if e["state"] == "FAILED"}
    started = {e["run_id"]: e["timestamp_ms"] for e in events if e["state"] == "LAUNCHED"}
    assert started[2] - ended[1] >= 1000, "the first restart came before its 1 s backoff"
    assert started[3] - ended[2] >= 2000, "the second restart came before its 2 s backoff"
    assert p.store.get_job(job).state not in ("SUCCEEDED", "FAILED")
    logs = p.ctl("task", "logs", job, "0", "--run", "1")
    assert logs.returncode == 0 and f"run of {job}-0-1" in logs.stdout, logs.stderr
    assert p.ctl("job", "stop", job, "--wait").returncode == 0
    p.wait_for("the service KILLED", lambda: p.store.get_job(job).state == "KILLED", 30)


def test_update_starts_new_instances_and_restart_replaces_runs_in_batches(pipeline_factory, tmp_path) -> None:
    p = pipeline_factory(hosts="local:2:cpu=4,mem_mb=4096,disk_mb=10000")
    p.start_all()
    text = LONG.format(name="grow", count=3, team="a")
    job = p.submit(text)
    p.wait_for("3 tasks running", lambda: p.counts(job).get("RUNNING", 0) == 3, 60)
    grown = tmp_path / "grown.yaml"
    grown.write_text(text.replace("instancecount: 3", "instancecount: 4") + "changelog: {version: 1}\n")
    updated = p.ctl("job", "update", job, str(grown))
    assert updated.returncode == 0, updated.stderr
    assert "1 new instance (3), 0 tasks to replace" in updated.stdout, updated.stdout
    p.wait_for("the fourth instance running", lambda: p.counts(job).get("RUNNING", 0) == 4, 60)
    assert {t.instance: t.run_id for t in p.store.tasks_of_job(job)} == {0: 1, 1: 1, 2: 1, 3: 1}
    stale = p.ctl("job", "update", job, str(grown))
    assert stale.returncode == 2 and "is not the job's current version 2" in stale.stderr, stale.stderr

    assert p.ctl("job", "restart", job, "--batch-size", "2").returncode == 0
    p.wait_for("every instance on its second run, running",
               lambda: all(t.run_id == 2 and t.state == "RUNNING" for t in p.store.tasks_of_job(job)), 90)
    # Never more than 2 replaced at once: the second batch was killed after the first ran again.
    events = p.store.task_events(job)
    killing = sorted((e["timestamp_ms"], e["instance"]) for e in events if e["state"] == "KILLING")
    running_again = sorted(e["timestamp_ms"] for e in events if e["state"] == "RUNNING" and e["run_id"] == 2)
    assert [i for _, i in killing] == [0, 1, 2, 3]
    assert killing[2][0] >= running_again[1], "the second batch went before the first was running again"
    assert p.store.get_job(job).rollout is None
    assert p.ctl("job", "stop", job, "--wait").returncode == 0


def test_a_run_beyond_max_running_time_ends_killed_and_the_maximum_running_holds(pipeline_factory) -> None:
    p = pipeline_factory(hosts="local:2:cpu=4,mem_mb=4096,disk_mb=10000", deadline_check_s=0.5)
    p.start_all()
    text = LONG.format(name="timed", count=4, team="a").replace(
        "sla: {preemptible: true}", "sla: {preemptible: true, maxRunningTime: 2, maximumRunningInstances: 2}")
    job = p.submit(text)
    p.wait_for("2 tasks running, 2 held back", lambda: p.counts(job) == {"RUNNING": 2, "INITIALIZED": 2}, 60)
    assert p.wait_job(job, timeout=60) == "KILLED"  # Peloton's deadline: killed, not failed
    tasks = p.store.tasks_of_job(job)
    assert {t.state for t in tasks} == {"KILLED"} and {t.reason for t in tasks} == {"DEADLINE_EXCEEDED"}
    starts = sorted(e["timestamp_ms"] for e in p.store.task_events(job) if e["state"] == "RUNNING")
    ends = sorted(e["timestamp_ms"] for e in p.store.task_events(job) if e["state"] == "KILLED")
    assert starts[2] >= ends[0], "a third task ran while two were still running"
    p.wait_for("no process of the job left", lambda: not processes_of(job), 10)


FAILING4 = """
name: failing
instancecount: 1
defaultconfig:
  resource: {cpulimit: 0.1, memlimitmb: 8, disklimitmb: 1}
  restartpolicy: {maxfailures: 4}
  command: {shell: true, value: 'exit 5'}
"""


def test_a_failing_job_ends_failed_after_exactly_4_runs_and_a_repeated_status_changes_nothing(pipeline_factory) -> None:
    from peloton.model.events import task_status
    from pelotonctl.admin import emitter

    p = pipeline_factory(hosts="local:2:cpu=2,mem_mb=1024,disk_mb=1000")
    p.start_all()
    job = p.submit(FAILING4)
    assert p.wait_job(job) == "FAILED"
    assert p.store.launch_counts(job) == {0: 4}
    history = json.loads(p.ctl("task", "events", job, "0", "--json").stdout)
    failed = [e for e in history if e["state"] == "FAILED"]
    assert [e["run_id"] for e in failed] == [1, 2, 3, 4]
    assert all(e["exit_code"] == 5 for e in failed)
    hosts = [e["host_id"] for e in failed]
    assert all(a != b for a, b in pairwise(hosts)), f"a rerun went back to the host it failed on: {hosts}"
    # every run went through every state Peloton's job manager shows, in order (READY only while a
    # gang waits for admission, PLACING and PLACED while it waits for hosts, and this one need not)
    assert [e["state"] for e in history if e["run_id"] == 2 and e["state"] not in ("READY", "PLACING", "PLACED")] == [
        "LAUNCHING", "LAUNCHED", "STARTING", "RUNNING", "FAILED"]
    # The last run's end, delivered again (a producer retry): nothing moves.
    before = (p.store.tasks_of_job(job), p.store.get_job(job).state, len(p.store.task_events(job)))
    out = emitter(p.settings)
    for _ in range(2):
        out.emit("task-status", job, "peloton.TaskStatus",
                 task_status(job, 0, 4, f"{job}-0-4", "local-0", "TASK_FAILED", "", "again", 5))
        out.emit("task-status", job, "peloton.TaskStatus",
                 task_status(job, 0, 2, f"{job}-0-2", "local-0", "TASK_FAILED", "", "an old run", 5))
    out.flush(10)
    time.sleep(3)
    assert (p.store.tasks_of_job(job), p.store.get_job(job).state, len(p.store.task_events(job))) == before


CONTROLLED = """
name: {name}
instancecount: 2
sla: {{preemptible: true}}
defaultconfig:
  resource: {{cpulimit: 1, memlimitmb: 8, disklimitmb: 1}}
  command: {{shell: true, value: 'exit 1'}}
instanceconfig:
  0:
    controller: true
    command: {{shell: true, value: 'sleep {seconds}; exit 0'}}
"""

CONTROLLER_POOL = """
resources:
- {kind: cpu, reservation: 10, limit: 10, share: 1}
- {kind: memory, reservation: 4096, limit: 4096, share: 1}
- {kind: disk, reservation: 1000, limit: 1000, share: 1}
controllerlimit: {maxpercent: 10}
"""


def test_a_controller_decides_its_job_and_a_second_waits_for_the_controller_limit(pipeline_factory) -> None:
    from pelotonctl.admin import create_pool

    p = pipeline_factory(hosts="local:2:cpu=4,mem_mb=4096,disk_mb=10000")
    create_pool(p.settings, p.store, "/ctl", CONTROLLER_POOL)
    p.start_all()
    # The first controller runs long enough for the second job's wait to be seen through the CLI
    # (a process of its own: seconds on a loaded machine, where 6 s once ran out first).
    first = p.submit(CONTROLLED.format(name="first", seconds=15), pool="/ctl")
    p.wait_for("the first controller running",
               lambda: any(t.instance == 0 and t.state == "RUNNING" for t in p.store.tasks_of_job(first)), 60)
    second = p.submit(CONTROLLED.format(name="second", seconds=1), pool="/ctl")
    deadline = time.monotonic() + 12
    while True:
        first_runs = any(t.instance == 0 and t.state == "RUNNING" for t in p.store.tasks_of_job(first))
        controller = [t.state for t in p.store.tasks_of_job(second) if t.instance == 0]  # none until admitted
        assert not first_runs or controller in ([], ["PENDING"]), \
            "a second controller ran beyond the pool's controller limit (1 cpu)"
        status = json.loads(p.ctl("job", "status", second, "--json").stdout)
        if any("controller limit" in w["reason"] for w in status.get("waiting", [])):
            break
        assert time.monotonic() < deadline, f"the second job does not say it waits for the controller limit: {status}"
        time.sleep(0.5)
    # The first job's other instance failed, but its controller succeeded: the job SUCCEEDED.
    assert p.wait_job(first) == "SUCCEEDED"
    assert {t.instance: t.state for t in p.store.tasks_of_job(first)} == {0: "SUCCEEDED", 1: "FAILED"}
    assert p.wait_job(second) == "SUCCEEDED"


def test_peloton_s_forms_task_ranges_and_a_bulk_stop_by_owner_and_labels(pipeline_factory) -> None:
    # Peloton's CLI syntax as its help shows it: `task stop|start|restart JOB -r FROM:TO`,
    # `task list JOB -r FROM:TO`, `task logs JOB INSTANCE [TASK-ID] -f FILE`, `job stop --owner O
    # --labels k=v -f` stopping exactly the matching jobs.
    p = pipeline_factory(hosts="local:2:cpu=4,mem_mb=4096,disk_mb=10000")
    p.start_all()
    owned = LONG.replace("name: {name}", "name: {name}\nowningteam: {owner}")
    job = p.submit(owned.format(name="web", count=4, team="blue", owner="ops"))
    same_team = p.submit(owned.format(name="web2", count=1, team="blue", owner="ops"))
    other_label = p.submit(owned.format(name="db", count=1, team="red", owner="ops"))
    other_owner = p.submit(owned.format(name="cache", count=1, team="blue", owner="dev"))
    every = (job, same_team, other_label, other_owner)
    p.wait_for("every task running", lambda: all(p.counts(j).get("RUNNING") == len(p.store.tasks_of_job(j))
                                                 for j in every), 60)

    stopped = p.ctl("task", "stop", job, "-r", "1:3")
    assert stopped.returncode == 0, stopped.stderr
    p.wait_for("instances 1 and 2 KILLED", lambda: [t.state for t in p.store.tasks_of_job(job)] ==
               ["RUNNING", "KILLED", "KILLED", "RUNNING"], 30)
    listed = json.loads(p.ctl("task", "list", job, "-r", "1:3", "--json").stdout)
    assert [(t["instance"], t["state"]) for t in listed] == [(1, "KILLED"), (2, "KILLED")]
    shown = json.loads(p.ctl("jobmgr", "instance-availability", job, "--json").stdout)["instance_availability"]
    assert shown == {"0": "AVAILABLE", "1": "KILLED", "2": "KILLED", "3": "AVAILABLE"}
    assert p.ctl("jobmgr", "instance-availability", job, "-i", "0,x").returncode == 2
    assert p.ctl("task", "start", job, "-r", "1:2").returncode == 0
    p.wait_for("instance 1 running again", lambda: p.store.tasks_of_job(job)[1].state == "RUNNING", 30)
    assert p.ctl("task", "restart", job, "-r", "0:1").returncode == 0
    p.wait_for("instance 0 replaced", lambda: p.store.tasks_of_job(job)[0].run_id == 2
               and p.store.tasks_of_job(job)[0].state == "RUNNING", 30)
    logs = p.ctl("task", "logs", job, "0", f"{job}-0-2", "-f", "stderr")
    assert logs.returncode == 0, logs.stderr
    assert p.ctl("task", "logs", job, "0", "-f", "syslog").returncode == 2

    pod_lines = p.ctl("watch", "pod", job, f"{job}-0", "--for", "2", "--json").stdout.splitlines()
    assert [json.loads(line)["state"] for line in pod_lines] == ["RUNNING"], pod_lines
    job_lines = p.ctl("watch", "job", "--labels", "team:blue", "--for", "2", "--json").stdout.splitlines()
    assert sorted(json.loads(line)["job_id"] for line in job_lines) == sorted([job, same_team, other_owner])

    (p.home / "grown.yaml").write_text(owned.format(name="web", count=6, team="blue", owner="ops"))
    diff = p.ctl("job", "stateless", "replace-diff", job, str(p.home / "grown.yaml"), "/test", "1-0-0", "--json")
    assert json.loads(diff.stdout) == {"instances_added": [4, 5], "instances_removed": [], "instances_updated": [],
                                       "instances_unchanged": [0, 1, 2, 3]}, diff.stderr

    refused = p.ctl("job", "stop", "--labels", "team=blue", "-f")
    assert refused.returncode == 2 and "--owner" in refused.stderr
    bulk = p.ctl("job", "stop", "--owner", "ops", "--labels", "team=blue", "-f", "--json")
    assert bulk.returncode == 0, bulk.stderr
    assert sorted(json.loads(bulk.stdout)["stopped"]) == sorted([job, same_team])
    for j in (job, same_team):
        assert p.wait_job(j, timeout=60) == "KILLED"
    assert {p.store.get_job(j).state for j in (other_label, other_owner)} == {"RUNNING"}
    for j in (other_label, other_owner):
        assert p.ctl("job", "stop", j).returncode == 0

    def hosts(*args: str) -> list[str]:
        answer = p.ctl("hostmgr", "hosts", *args, "--json")
        assert answer.returncode == 0, answer.stderr
        return sorted(h["host_id"] for h in json.loads(answer.stdout)["hosts"])
    assert hosts("-c", "1") == ["local-0", "local-1"] == hosts("--less", "-c", "100", "--mem", "1000000")
    assert hosts("-c", "100") == [] and hosts("--hosts", "local-1", "--mem", "16") == ["local-1"]
