"""Host agents as processes of their own, on a real broker: tasks outlive the host manager, an
agent that dies has its runs lost and run elsewhere, and an agent that comes back after a
SIGKILL adopts what it left running, and kills it if its lease ran out while it was away."""

from __future__ import annotations

import ast
import contextlib
import os
import re
import signal
import time
from pathlib import Path

import pytest

from peloton.runtime.membership import group_members
from peloton.topics import Catalogue, partition_for
from pelotonctl.admin import UserError
from pelotonctl.bench.pipeline import settled
from tests.integration.helpers import processes_of, sleepers

pytestmark = pytest.mark.integration

def agent_hierarchy(p, name: str):
    """Where the pipeline's agent `name` makes its tasks' cgroups, as find_hierarchy answers (the
    agents run in this process's cgroup)."""
    from peloton.host.cgroups import agent_cgroup_name, find_hierarchy
    from stages.agent.agent import agent_state_dir

    return find_hierarchy(agent_cgroup_name(name, agent_state_dir(p.home, name)))


def wait_running(p, job_id: str, count: int, timeout: float = 40) -> None:
    p.wait_for(f"{count} tasks of {job_id} RUNNING", lambda: p.counts(job_id).get("RUNNING", 0) >= count, timeout)


def shards_held(p, instance: str) -> set[int]:
    """The host shards (placements partitions) a launch instance holds now, from its log's
    assigned, revoked and lost lines in order: an "agent joined" line may be from a shard the
    instance held at start and gave away when the other instance joined."""
    held: set[int] = set()
    for line in p.log(instance).read_text().splitlines():
        m = re.search(r" peloton\.runtime: \S+ (assigned|revoked|lost) (\[.*\])$", line)
        if m:
            shards = {part for topic, part in ast.literal_eval(m.group(2)) if topic == "placements"}
            held = held | shards if m.group(1) == "assigned" else held - shards
    return held


def test_a_killed_host_manager_leaves_every_task_running_on_its_first_run(pipeline_factory) -> None:
    # The runs outlast the agents' timeout after the kill, so a survivor that failed to adopt them
    # would call them lost; the lease (the timeout less 2 s) outlasts a loaded shared broker's slow
    # answers (with 3 s, agents fenced themselves and killed all 40 runs, twice).
    p = pipeline_factory(hosts="agent:6:cpu=4,mem_mb=1024,disk_mb=1000", agent_timeout_s=8.0)
    p.start_all(instances=2)
    p.wait_for("both launch instances hold shards", lambda: all(shards_held(p, f"launch-{i}") for i in (0, 1)), 30)
    # and still do once the group has settled: an instance that held shards first may have lost
    # them in a rebalance at start, and killing one that serves nothing would prove nothing
    group = Catalogue(p.settings.topic_prefix).group("launch")
    p.wait_for("the launch group settled with both instances holding shards",
               lambda: settled(group_members(p.settings, group), 2), 60)
    job = p.submit(sleepers(40, 12))
    wait_running(p, job, 40)
    hosts_before = {t.instance: t.host_id for t in p.store.tasks_of_job(job)}
    # the instance serving the hosts that run the most tasks
    count = Catalogue(p.settings.topic_prefix)["placements"].partitions
    held = {i: shards_held(p, f"launch-{i}") for i in (0, 1)}
    served = {i: {h for h in set(hosts_before.values()) if partition_for(h, count) in held[i]} for i in (0, 1)}
    victim, survivor = sorted((0, 1), key=lambda i: -sum(h in served[i] for h in hosts_before.values()))
    assert served[victim], "the killed instance served no host with tasks; the test would prove nothing"
    p.procs[f"launch-{victim}"].send_signal(signal.SIGKILL)
    p.procs[f"launch-{victim}"].wait()

    assert p.wait_job(job, timeout=90) == "SUCCEEDED"
    tasks = p.store.tasks_of_job(job)
    assert [t.run_id for t in tasks] == [1] * 40, "a task ran again: the host manager's death cost a run"
    assert p.store.launch_counts(job) == {i: 1 for i in range(40)}
    assert {t.instance: t.host_id for t in tasks} == hosts_before
    adopted = [int(n) for n in re.findall(r"adopted (\d+) runs", p.log(f"launch-{survivor}").read_text())]
    assert sum(adopted) > 0, f"the survivor adopted no run ({adopted}): the test proved nothing"
    assert processes_of(job) == []


def test_a_killed_agents_runs_end_with_its_lease_run_elsewhere_and_their_ends_are_told_when_it_returns(
        pipeline_factory) -> None:
    p = pipeline_factory(hosts="agent:3:cpu=2,mem_mb=1024,disk_mb=1000", agent_timeout_s=5.0,
                         agent_heartbeat_s=0.5)
    p.start_all()
    # Runs long enough to outlast the agent's restart: on a loaded machine it took 12 s from the
    # SIGKILL, and 10 s runs had ended by then (nothing left to adopt and kill).
    job = p.submit(sleepers(9, 30))
    wait_running(p, job, 9)
    victim = "agent-0"
    on_victim = {t.instance for t in p.store.tasks_of_job(job) if t.host_id == victim}
    assert on_victim, "nothing ran on the agent to kill; the test would prove nothing"
    first_runs = {f"{job}-{i}-1" for i in on_victim}
    p.procs[victim].send_signal(signal.SIGKILL)  # its tasks go on running, orphaned, while its lease lasts
    killed_at = time.monotonic()
    p.procs[victim].wait()
    # Their executors hold the dead agent's lease: they end them when it runs out, before the host
    # manager calls the host DOWN and runs them elsewhere.
    p.wait_for("its runs ended by their executors", lambda: not _task_ids_running() & first_runs, 20)
    ended_after = time.monotonic() - killed_at
    p.wait_for("its runs lost", lambda: {e["instance"] for e in p.store.task_events(job) if e["state"] == "LOST"}
               == on_victim, 20)
    assert ended_after < p.settings.agent_timeout_s, ended_after
    # Back with the same name: it finds how its old runs ended (fenced by their executors) and says so.
    p.start_agent(victim)

    assert p.wait_job(job, timeout=90) == "SUCCEEDED"
    tasks = {t.instance: t for t in p.store.tasks_of_job(job)}
    for i in on_victim:
        assert tasks[i].run_id == 2 and tasks[i].host_id != victim, (i, tasks[i].run_id, tasks[i].host_id)
    lost = [(e["instance"], e["run_id"], e["reason"]) for e in p.store.task_events(job) if e["state"] == "LOST"]
    # each run on the victim: lost when its agent went silent, then its stale copy's end
    assert sorted(lost) == sorted([(i, 1, r) for i in on_victim for r in ("REASON_AGENT_DISCONNECTED",
                                                                          "REASON_AGENT_FENCED")]), lost
    assert "reports again: UP" in p.log("launch-0").read_text()
    p.wait_for("no process of the job left", lambda: processes_of(job) == [], 30)


def test_an_agent_restarted_with_sigkill_adopts_its_running_tasks_and_the_job_succeeds(pipeline_factory) -> None:
    p = pipeline_factory(hosts="agent:1:cpu=4,mem_mb=1024,disk_mb=1000", agent_timeout_s=20.0)
    p.start_all()
    # Runs that outlast the new agent's start: with 6 s, a loaded machine's new agent came up
    # after they had ended (the full suite, once), and had nothing to adopt.
    job = p.submit(sleepers(3, 20))
    wait_running(p, job, 3)
    p.procs["agent-0"].send_signal(signal.SIGKILL)
    p.procs["agent-0"].wait()
    time.sleep(1)
    p.start_agent("agent-0")  # within the timeout: the host never goes down

    assert p.wait_job(job, timeout=60) == "SUCCEEDED"
    assert p.log("agent-0").read_text().count("adopted run") == 3
    # Adopted runs are watched, and killed when asked, and their executors say how they ended: each
    # is reported as it ended, and runs once. Before, their exit codes went with the agent that had
    # waited for them: each was reported lost when it ended, and ran again.
    assert p.log("agent-0").read_text().count("ended after its agent restarted: TASK_FINISHED") == 3
    assert [e for e in p.store.task_events(job) if e["state"] == "LOST"] == []
    assert p.store.launch_counts(job) == {0: 1, 1: 1, 2: 1}
    assert processes_of(job) == []
    # Nor their cgroups: the adopted runs' stayed behind when they ended (the agent that made them
    # had died), until the new agent cleared what no run holds.
    hierarchy, _ = agent_hierarchy(p, "agent-0")
    if hierarchy is not None:
        assert [n for n in hierarchy.leftovers(set()) if n.startswith(job)] == []


def test_an_agent_restarted_with_sighup_hands_its_runs_over_and_each_task_runs_once(pipeline_factory) -> None:
    """A restart (SIGHUP, as `dev restart agent-0` sends): the runs go on under their executors,
    the next agent adopts them and reports them as they end. Before, the agent's stop ended them
    (reported lost), and each ran again."""
    p = pipeline_factory(hosts="agent:1:cpu=4,mem_mb=1024,disk_mb=1000", agent_timeout_s=20.0)
    p.start_all()
    job = p.submit(sleepers(3, 12))
    wait_running(p, job, 3)
    p.procs["agent-0"].send_signal(signal.SIGHUP)
    assert p.procs["agent-0"].wait(30) == 0
    assert "handing 3 runs over to the next agent" in p.log("agent-0").read_text()
    assert len(processes_of(job)) >= 3  # the runs go on with no agent
    p.start_agent("agent-0")
    assert p.wait_job(job, timeout=60) == "SUCCEEDED"
    log = p.log("agent-0").read_text()
    assert log.count("adopted run") == 3 and log.count("ended after its agent restarted: TASK_FINISHED") == 3
    assert [e for e in p.store.task_events(job) if e["state"] == "LOST"] == []
    assert p.store.launch_counts(job) == {0: 1, 1: 1, 2: 1}
    assert processes_of(job) == []


def test_runs_handed_over_to_an_agent_that_never_returns_are_killed_by_their_lease_and_run_elsewhere(
        pipeline_factory) -> None:
    """The restart does not come: each executor kills its run when the lease runs out, before the
    host manager calls the host down and runs the task elsewhere: never two live copies."""
    p = pipeline_factory(hosts="agent:2:cpu=2,mem_mb=1024,disk_mb=1000", agent_timeout_s=8.0,
                         agent_heartbeat_s=0.5)
    p.start_all()
    job = p.submit(sleepers(4, 40))
    wait_running(p, job, 4)
    tasks = p.store.tasks_of_job(job)
    victim = tasks[0].host_id
    on_victim = {t.instance for t in tasks if t.host_id == victim}
    first_runs = {f"{job}-{i}-1" for i in on_victim}
    p.procs[victim].send_signal(signal.SIGHUP)
    assert p.procs[victim].wait(30) == 0
    handed_at = time.monotonic()
    assert f"handing {len(on_victim)} runs over" in p.log(victim).read_text()
    deadline = handed_at + 60
    gone_at = None
    while time.monotonic() < deadline:
        alive = _task_ids_running() & first_runs
        if not alive and gone_at is None:
            gone_at = time.monotonic()
        again = {t.instance for t in p.store.tasks_of_job(job) if t.instance in on_victim and t.run_id == 2
                 and t.state in ("RUNNING", "SUCCEEDED")}
        assert not (again and alive), f"runs {sorted(again)} run again while {sorted(alive)} still live"
        if len(again) == len(on_victim):
            break
        time.sleep(0.1)
    assert gone_at is not None and gone_at - handed_at < p.settings.agent_lease() + 3, "not killed at the lease"
    assert p.wait_job(job, timeout=90) == "SUCCEEDED"
    lost = {(e["instance"], e["reason"]) for e in p.store.task_events(job) if e["state"] == "LOST"}
    assert lost == {(i, "REASON_AGENT_DISCONNECTED") for i in on_victim}, lost


def _task_ids_running() -> set[str]:
    """PELOTON_TASK_ID of every live process that has one."""
    found = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            for entry in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                if entry.startswith(b"PELOTON_TASK_ID="):
                    found.add(entry.split(b"=", 1)[1].decode())
        except OSError:
            continue
    return found


def test_runs_that_ended_while_their_agent_could_not_report_run_once_after_it_is_killed_and_started_again(
        kafka_cluster, tmp_path) -> None:
    """The broker away, the runs end and their agent cannot report it; the agent is SIGKILLed
    before the broker returns. The next agent reports the endings it kept (stages/agent/endings.py):
    the job succeeds with each task run once. Before, it reported them lost, and each ran again."""
    from stages.agent.agent import agent_state_dir
    from tests.integration.conftest import Pipeline

    cluster = kafka_cluster(1)
    # A lease longer than the outage: a fenced agent's runs are lost by design (test_kafka_failures).
    p = Pipeline(cluster.bootstrap, tmp_path / "p", "agent:1:cpu=4,mem_mb=1024,disk_mb=1000", agent_timeout_s=60.0)
    try:
        p.start_all()
        job = p.submit(sleepers(3, 3))
        wait_running(p, job, 3)
        cluster.kill(1, signal.SIGKILL)
        journal = agent_state_dir(p.home, "agent-0") / "endings.jsonl"
        p.wait_for("the three endings kept",
                   lambda: journal.exists() and len(journal.read_text().splitlines()) == 3, 30)
        p.procs["agent-0"].send_signal(signal.SIGKILL)
        p.procs["agent-0"].wait()
        cluster.start_node(1)
        p.start_agent("agent-0")
        assert p.wait_job(job, timeout=120) == "SUCCEEDED"
        assert p.store.launch_counts(job) == {0: 1, 1: 1, 2: 1}
        assert [e for e in p.store.task_events(job) if e["state"] == "LOST"] == []
        assert p.log("agent-0").read_text().count("ended before the agent restarted") == 3
    finally:
        p.stop()


def test_an_agent_upgraded_from_cgroups_named_by_its_name_alone_removes_them_as_its_adopted_runs_end(
        pipeline_factory) -> None:
    from peloton.host.cgroups import Limits, find_hierarchy

    p = pipeline_factory(hosts="agent:1:cpu=4,mem_mb=1024,disk_mb=1000", agent_timeout_s=20.0)
    hierarchy, said = agent_hierarchy(p, "agent-0")
    if hierarchy is None:
        pytest.skip(said)
    p.start_all()
    job = p.submit(sleepers(2, 6))
    wait_running(p, job, 2)
    p.procs["agent-0"].send_signal(signal.SIGKILL)
    p.procs["agent-0"].wait()
    # The runs go where an agent of the release before 36457f0 made them: under its name alone.
    former, _ = find_hierarchy("agent-0")
    runs = [n for n in hierarchy.leftovers(set()) if n.startswith(job)]
    assert len(runs) == 2, runs
    try:
        for task_id in runs:
            moved = former.make(task_id, Limits())
            # Until none is left: the run's executor may fork its command while its pids are read.
            for _ in range(100):
                left = hierarchy.task(task_id).pids()
                if not left:
                    break
                for pid in left:
                    with contextlib.suppress(OSError):  # ended meanwhile
                        moved.enter(pid)
            hierarchy.task(task_id).destroy(wait_s=0)
        p.start_agent("agent-0")
        assert p.wait_job(job, timeout=60) == "SUCCEEDED"
        assert p.log("agent-0").read_text().count("adopted run") == 2
        p.wait_for("the former cgroups removed", lambda: not any(d.exists() for d in former.parent_directories()), 10)
    finally:
        for task_id in runs:
            former.task(task_id).destroy(wait_s=0)
        former.close()


def test_maintenance_drains_a_host_its_tasks_run_elsewhere_and_complete_brings_it_back(pipeline_factory) -> None:
    import json

    p = pipeline_factory(hosts="agent:2:cpu=2,mem_mb=1024,disk_mb=1000")
    p.start_all()
    job = p.submit(sleepers(4, 300))
    wait_running(p, job, 4)
    busy = p.store.tasks_of_job(job)[0].host_id
    drained = {t.instance for t in p.store.tasks_of_job(job) if t.host_id == busy}
    assert p.ctl("host", "maintenance", "start", "nowhere").returncode == 3
    done = p.ctl("host", "maintenance", "start", busy)
    assert done.returncode == 0, done.stderr

    def state_of(host: str) -> str:
        out = p.ctl("-j", "host", "list")  # Peloton's global form of --json
        return {h["host_id"]: h["state"] for h in json.loads(out.stdout)["hosts"]}.get(host, "?")

    p.wait_for(f"{busy} DOWN after its drain", lambda: state_of(busy) == "DOWN", 40)
    other = next(h for h in ("agent-0", "agent-1") if h != busy)
    refused = p.ctl("host", "maintenance", "start", other)  # the last UP host: every task would stop
    assert refused.returncode == 2 and "last UP host" in refused.stderr and "--force" in refused.stderr, refused.stderr
    wait_running(p, job, 4)
    tasks = {t.instance: t for t in p.store.tasks_of_job(job)}
    for i in drained:  # killed for the maintenance, and running again elsewhere, no failure counted
        assert (tasks[i].run_id, tasks[i].failures) == (2, 0) and tasks[i].host_id != busy
    reasons = {e["reason"] for e in p.store.task_events(job) if e["state"] == "KILLED"}
    assert reasons == {"HOST_MAINTENANCE"}
    assert p.ctl("host", "maintenance", "complete", busy).returncode == 0
    p.wait_for(f"{busy} UP again", lambda: state_of(busy) == "UP", 20)
    assert p.ctl("job", "stop", job).returncode == 0
    assert p.wait_job(job, timeout=60) == "KILLED"
    p.wait_for("no process of the job left", lambda: processes_of(job) == [], 20)


def test_a_drain_of_two_hosts_never_has_more_of_a_job_down_than_its_budget(pipeline_factory) -> None:
    import json

    from pelotonctl.admin import with_drain_waits
    from stages.admit.drain import down

    p = pipeline_factory(hosts="agent:4:cpu=2,mem_mb=1024,disk_mb=1000")
    p.start_all()
    job = p.submit(sleepers(4, 300, cpu=1) + "sla: {maximumUnavailableInstances: 1}\n")
    wait_running(p, job, 4)
    busy = sorted({t.host_id for t in p.store.tasks_of_job(job)})
    assert len(busy) == 2, busy  # packed, two to a host (PACK_HOST)
    started = p.ctl("host", "maintenance", "start", ",".join(busy))  # Peloton's list of hosts
    assert started.returncode == 0, started.stderr
    assert started.stdout.splitlines() == [f"host {h}: maintenance started (DRAINING)" for h in busy]
    most, told = 0, ""
    deadline = time.monotonic() + 60
    while True:
        tasks = p.store.tasks_of_job(job)
        most = max(most, down(tasks))  # sampled: a short stretch down can fall between two looks
        if all(t.state == "RUNNING" and t.host_id not in busy for t in tasks):
            break
        if not told:  # why the runs left on a draining host wait, as `host list` shows it (in
            # process: the command line takes over a second, longer than some stretches it could see)
            rows = with_drain_waits(p.settings, p.store, [{"host_id": h, "state": "DRAINING"} for h in busy])
            told = " ".join(why for r in rows for why in r["waiting"])
        assert time.monotonic() < deadline, [(t.instance, t.state, t.host_id) for t in tasks]
        time.sleep(0.05)
    assert most <= 1, f"{most} instances down at once, with sla.maximumUnavailableInstances 1"
    # The events say it whole: an instance is down from its first run's kill to its second run's
    # RUNNING; at most one such stretch at any moment (an end before a start at the same ms).
    edges = []
    for e in p.store.task_events(job):
        if e["run_id"] == 1 and e["state"] in ("KILLING", "KILLED"):
            edges.append((e["timestamp_ms"], 1, e["instance"]))
        elif e["run_id"] == 2 and e["state"] == "RUNNING":
            edges.append((e["timestamp_ms"], 0, e["instance"]))
    stretches, down_now, most = {}, set(), 0
    for at, starts, instance in sorted(edges):
        if starts and instance not in stretches:
            stretches[instance] = at
            down_now.add(instance)
        elif not starts:
            down_now.discard(instance)
        most = max(most, len(down_now))
    assert sorted(stretches) == [0, 1, 2, 3] and most == 1, (most, sorted(edges))
    assert "sla.maximumUnavailableInstances 1 down" in told, told
    tasks = p.store.tasks_of_job(job)
    assert {(t.run_id, t.failures) for t in tasks} == {(2, 0)}  # moved once each, no failure counted
    assert {e["reason"] for e in p.store.task_events(job) if e["state"] == "KILLED"} == {"HOST_MAINTENANCE"}

    def states() -> dict:
        return {h["host_id"]: h["state"] for h in json.loads(p.ctl("host", "list", "--json").stdout)["hosts"]}
    p.wait_for("both hosts DOWN after their drains", lambda: all(states()[h] == "DOWN" for h in busy), 30)


def test_one_agent_process_serves_many_simulated_hosts_over_the_same_protocol(pipeline_factory) -> None:
    p = pipeline_factory(hosts="simagent:200:cpu=2,mem_mb=1024,disk_mb=1000", sim_task_seconds=0.2)
    p.start_all()
    assert [name for name in p.procs if name.startswith("agent")] == ["agent-simagent"]
    job = p.submit(sleepers(300, 0, cpu=1))
    assert p.wait_job(job, timeout=120) == "SUCCEEDED"
    hosts = {t.host_id for t in p.store.tasks_of_job(job)}
    assert len(hosts) > 10 and all(h.startswith("simagent-") for h in hosts)  # 2 cpu each: spread over many
    from pelotonctl.admin import list_hosts

    listed = list_hosts(p.settings)
    assert len(listed) == 200 and {h["state"] for h in listed} == {"UP"}  # every one joined by its reports
    assert "killing them" not in p.log("launch-0").read_text()


@pytest.mark.skipif(__import__("os").geteuid() != 0, reason="only root switches users")
def test_a_job_runs_as_its_command_user_where_the_agent_allows_it(pipeline_factory) -> None:
    p = pipeline_factory(hosts="agent:1:cpu=4,mem_mb=1024,disk_mb=1000", task_users="bin")
    p.start_all()
    as_user = """
name: as-{user}
instancecount: 2
defaultconfig:
  resource: {{cpulimit: 0.1, memlimitmb: 8, disklimitmb: 1}}
  restartpolicy: {{maxfailures: 0}}
  command: {{shell: true, value: 'test "$(id -un)" = {user}', user: {user}}}
"""
    allowed = p.submit(as_user.format(user="bin"))
    # One the cluster does not allow is refused at submission, saying why (no host would run it).
    with pytest.raises(UserError, match=r"'daemon' is not allowed in this cluster \(PELOTON_TASK_USERS='bin'"):
        p.submit(as_user.format(user="daemon"))
    # No user named: a uid of the job's own (PELOTON_TASK_UIDS), its group alike, and no account's name.
    default = p.submit(as_user.format(user="nobody").replace(
        """'test "$(id -un)" = nobody', user: nobody""",
        """'test "$(id -u)" -ge 61184 && test "$(id -g)" = "$(id -u)" && test "$USER" = "peloton-$(id -u)"'"""))
    assert p.wait_job(allowed, timeout=60) == "SUCCEEDED"
    assert p.wait_job(default, timeout=60) == "SUCCEEDED"
