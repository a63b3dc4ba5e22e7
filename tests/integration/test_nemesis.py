"""The nemesis (`make soak`; SOAK_MINUTES, 30 by default, 5 for the short form): a cluster of
network hosts (network_cluster.py) runs batch jobs a generator submits while faults are mixed in
at random: SIGKILL and a restart of any stage, SIGSTOP pauses of a stage or an agent, an agent's
link cut, a one-way partition from a stage to a broker, and once a whole-broker-cluster restart.
Then the faults heal and a checker reads the history: every job the broker accepted reached a
final state, each SUCCEEDED job's tasks ran to their end (more than once only where a run was
recorded LOST), no instance ever ran twice at once (the hosts' own records), and no process
exited on its own. It prints a table of the faults injected and the invariants held."""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from peloton.store import open_store
from pelotonctl.dev.processes import end_group
from tests.integration.network_cluster import AGENTS, BROKERS, STAGES, NetworkCluster, runs_recorded

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MINUTES = float(os.environ.get("SOAK_MINUTES") or 30)
SHORT_JOB = """name: nemesis-{n}
type: BATCH
instanceCount: 3
sla: {{maximumUnavailableInstances: 3}}
defaultConfig:
  resource: {{cpuLimit: 0.5, memLimitMb: 32, diskLimitMb: 10}}
  command:
    value: 'for i in 1 2 3 4; do echo "tick $(date +%s.%N)"; sleep 1; done; echo "end $(date +%s.%N)"'
"""


@pytest.mark.timeout(int(MINUTES * 60 + 900))
def test_the_nemesis_breaks_things_for_a_while_and_every_invariant_holds(tmp_path: Path) -> None:
    rng = random.Random(int(os.environ.get("SOAK_SEED") or time.time()))
    cluster = NetworkCluster(tmp_path, subnet=81, agent_resources="cpu=4,mem_mb=2048,disk_mb=4000")
    faults: Counter[str] = Counter()
    accepted: list[str] = []
    stop = threading.Event()
    try:
        cluster.start()
        cluster.wait_for("both agents UP", lambda: cluster.up_hosts() == set(AGENTS), 180)

        def generate() -> None:  # a job every few seconds, through the operator's pelotonctl
            n = 0
            while not stop.is_set():
                n += 1
                path = tmp_path / f"job-{n}.yaml"
                path.write_text(SHORT_JOB.format(n=n))
                made = cluster.ctl("job", "create", "/DefaultResPool", str(path), timeout=120)
                if made.returncode == 0:
                    accepted.append(made.stdout.split()[1])
                stop.wait(3)

        generator = threading.Thread(target=generate, daemon=True)
        generator.start()
        deadline = time.monotonic() + MINUTES * 60
        brokers_restarted = False
        while time.monotonic() < deadline:
            stop.wait(rng.uniform(8, 15))
            if not brokers_restarted and time.monotonic() > deadline - MINUTES * 30:
                restart_brokers(cluster)
                faults["whole broker cluster restarted"] += 1
                brokers_restarted = True
                continue
            fault = rng.choice(["kill", "pause", "cut", "partition"])
            if fault == "kill":
                stage = rng.choice(STAGES)
                cluster.procs[stage].send_signal(signal.SIGKILL)
                cluster.procs[stage].wait(10)
                cluster.restart(stage)
                faults[f"SIGKILL and restart of {stage}"] += 1
            elif fault == "pause":
                name = rng.choice([*STAGES, *AGENTS])
                os.killpg(cluster.procs[name].pid, signal.SIGSTOP)
                stop.wait(rng.uniform(2, 8))
                os.killpg(cluster.procs[name].pid, signal.SIGCONT)
                faults[f"SIGSTOP pause of {name}"] += 1
            elif fault == "cut":
                agent = rng.choice(AGENTS)
                cluster.net.cut(agent)
                stop.wait(rng.uniform(3, 10))
                cluster.net.restore(agent)
                faults[f"link of {agent} cut"] += 1
            else:
                stage, broker = rng.choice(STAGES), rng.choice(BROKERS)
                cluster.net.drop(stage, broker)
                stop.wait(rng.uniform(3, 10))
                cluster.net.undrop(stage, broker)
                faults[f"one-way partition {stage} -> {broker}"] += 1
        stop.set()
        generator.join(150)

        # Healed: every accepted job ends.
        def all_ended() -> dict[str, str] | None:
            states = {job: _state(cluster, job) for job in accepted}
            return states if all(s in ("SUCCEEDED", "FAILED", "KILLED") for s in states.values()) else None

        states = cluster.wait_for("every accepted job to end", all_ended, 600)
        store = open_store(cluster.store_url)
        lost = {(e["job_id"], e["instance"]) for job in accepted for e in store.task_events(job)
                if e["state"] == "LOST"}
        store.close()
        overlaps, extra_ends = [], []
        for job in accepted:
            for instance, recorded in runs_recorded(cluster, job).items():
                ordered = sorted(recorded, key=lambda r: r[1])
                overlaps += [(job, instance) for a, b in zip(ordered, ordered[1:], strict=False) if b[1] <= a[2] + 1.0]
                if sum(r[3] for r in recorded) > 1 and (job, instance) not in lost:
                    extra_ends.append((job, instance))
        exited = {name: proc.returncode for name, proc in cluster.procs.items() if proc.poll() is not None}
        held = {
            "every accepted job reached a final state": len(states) == len(accepted),
            "every job SUCCEEDED": all(s == "SUCCEEDED" for s in states.values()),
            "no instance ran twice at once": not overlaps,
            "a task ran to its end twice only after a recorded loss": not extra_ends,
            "no process exited on its own": not exited,
        }
        print(f"\nnemesis: {MINUTES:g} minutes, {len(accepted)} jobs ({Counter(states.values())}), "
              f"{sum(faults.values())} faults")
        for fault, n in sorted(faults.items()):
            print(f"  {n:4d}  {fault}")
        for invariant, ok in held.items():
            print(f"  {'held' if ok else 'BROKEN':6}  {invariant}")
        assert all(held.values()), {"overlaps": overlaps[:5], "extra ends": extra_ends[:5], "exited": exited,
                                    "states": Counter(states.values())}
    finally:
        stop.set()
        cluster.stop()


def restart_brokers(cluster: NetworkCluster) -> None:
    """Every broker stopped cleanly at once, then started again on its log."""
    for broker in BROKERS:
        os.killpg(cluster.procs[broker].pid, signal.SIGTERM)
    for broker in BROKERS:
        end_group(cluster.procs[broker].pid, signal.SIGTERM, cluster.procs[broker], timeout=60)
    for broker in BROKERS:
        cluster.restart(broker)


def _state(cluster: NetworkCluster, job: str) -> str:
    done = cluster.ctl("job", "status", job, "--json")
    return json.loads(done.stdout)["state"] if done.returncode == 0 else "UNKNOWN"
