"""Real network faults on a cluster of network hosts (tests/integration/network_cluster.py): while
a job runs, one agent's link is slowed (tc tbf: 512 kbit/s; this kernel has no netem) and the
other agent's link is cut. The job still succeeds, and the hosts' own records (each run's
stdout, in its agent's sandboxes) show that no instance ever ran twice at once: a run of the cut
host ended (or was fenced) before its replacement started, and one that ran to its end unheard
is recorded LOST."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from peloton.store import open_store
from pelotonctl.dev.netns import available
from tests.integration.network_cluster import AGENTS, NetworkCluster, runs_recorded

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]

TICKING = """name: ticking
type: BATCH
instanceCount: 4
sla: {maximumUnavailableInstances: 4}
defaultConfig:
  resource: {cpuLimit: 1, memLimitMb: 32, diskLimitMb: 10}
  command:
    value: 'for i in $(seq 12); do echo "tick $(date +%s.%N)"; sleep 1; done; echo "end $(date +%s.%N)"'
"""


def test_a_job_outlives_a_slow_link_and_a_cut_host_and_no_instance_runs_twice_at_once(tmp_path: Path) -> None:
    why = available()
    if why:
        pytest.fail(why)
    cluster = NetworkCluster(tmp_path, subnet=79)
    try:
        cluster.start()
        cluster.wait_for("both agents UP", lambda: cluster.up_hosts() == set(AGENTS), 180)
        (tmp_path / "ticking.yaml").write_text(TICKING)
        made = cluster.ctl("job", "create", "/DefaultResPool", str(tmp_path / "ticking.yaml"))
        assert made.returncode == 0, made.stderr
        job = made.stdout.split()[1]

        cluster.wait_for("every instance running", lambda: len(runs_recorded(cluster, job)) == 4, 120)
        cluster.net.throttle("agent-0", 512)  # this kernel has no netem: a slow link, not a delayed one
        cluster.net.cut("agent-1")
        final = cluster.wait_for("the job to end", lambda: _ended(cluster, job), 240)
        assert final == "SUCCEEDED", cluster.ctl("job", "status", job).stdout
        cluster.net.restore("agent-1")
        cluster.net.unslow("agent-0")

        runs = runs_recorded(cluster, job)
        assert sorted(runs) == [0, 1, 2, 3]
        store = open_store(cluster.store_url)
        lost = {e["instance"] for e in store.task_events(job) if e["state"] == "LOST"}
        store.close()
        assert lost, "the cut host's runs were never reported lost"
        for instance, recorded in runs.items():
            # One run to its end, or more where the host of an earlier one was cut before it could
            # say so: that run is recorded LOST, and ran again (at least once, never at once).
            ended = sorted((r for r in recorded if r[3]), key=lambda r: r[1])
            assert len(ended) == 1 or instance in lost and all(r[0] == "agent-1" for r in ended[:-1]), recorded
            ordered = sorted(recorded, key=lambda r: r[1])
            for before, after in zip(ordered, ordered[1:], strict=False):
                # a run's last line is at most a second before it stopped: its successor started later
                assert after[1] > before[2] + 1.0, (instance, ordered)
        assert all(r[0] == "agent-0" for i in lost for r in sorted(runs[i], key=lambda r: r[1])[1:]), runs
    finally:
        cluster.stop()


def _ended(cluster: NetworkCluster, job: str) -> str | None:
    done = cluster.ctl("job", "status", job, "--json")
    if done.returncode:
        return None
    state = json.loads(done.stdout)["state"]
    return state if state in ("SUCCEEDED", "FAILED", "KILLED") else None
