"""`make bench`: the whole pipeline at cluster scale on simulated hosts, in a throwaway stack, beside
a baseline of the same broker (a 4-hop relay).

Figures are printed, never asserted: these machines are shared and noisy."""

from __future__ import annotations

import itertools
import math
import os
import shutil
import signal
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from peloton.config import Settings
from peloton.model.resources import Resources
from peloton.model.states import JOB_TERMINAL
from peloton.store import open_store
from peloton.topics import Catalogue, partition_for
from pelotonctl.admin import create_pool, emitter, host_capacities, list_hosts, submit_job
from pelotonctl.bench.cpu_cap import CpuCaps
from pelotonctl.bench.relay import HOPS, run_relay
from pelotonctl.dev.stack import DevStack
from stages.launch.inventory import parse_inventory

BENCH_HOST = "cpu=64,mem_mb=262144,disk_mb=1000000"  # one simulated host

BENCH_POOL = """
name: bench-{index}
resources:
- {{kind: cpu, reservation: {cpu:.0f}, limit: {cpu:.0f}, share: 1}}
- {{kind: memory, reservation: {mem:.0f}, limit: {mem:.0f}, share: 1}}
- {{kind: disk, reservation: {disk:.0f}, limit: {disk:.0f}, share: 1}}
"""

BENCH_JOB = """
name: bench-{index}
instancecount: {tasks}
defaultconfig:
  resource: {{cpulimit: 0.1, memlimitmb: 2, disklimitmb: 1}}
  command: {{shell: true, value: 'true'}}
"""

# A run's steps on its way to RUNNING, set by entitle, place, launch and the host (the latency to
# each is reported). READY and PLACED come only for runs whose gang waited for admission or for
# hosts: a step no run took is left out of the figures.
STEPS = ("READY", "PLACED", "LAUNCHING", "RUNNING")

# The stages whose CPU and records are reported, in pipeline order; then the broker, a Cassandra node, agents.
STAGES = ("admit", "entitle", "place", "launch")


@dataclass(frozen=True)
class BenchPlan:
    hosts: str = "10000"  # a number of simulated hosts, or an inventory
    jobs: int = 50
    tasks_per_job: int = 1000
    pools: int = 5
    instances: int = 1
    task_seconds: float = 0.0
    store: str = "sqlite"
    relay_messages: int = 100_000  # 0: no relay baseline
    rate: float = 0.0  # offered load, tasks/s: jobs submitted at this pace; 0: as fast as one producer can
    cpu_per_instance: float = 0.0  # each stage instance capped at this share of a core (cpu_cap.py); 0: not capped
    # With a rate: the jobs due in the first warmup_s seconds are offered like the rest but left out
    # of the latency percentiles (their own p99 is reported beside). A stack just started is slow
    # for its first half-minute at a steady load (its broker's JVM compiling, above all): at 6,100
    # tasks/s, p50 0.8-1.6 s for the first 25 s, then 0.14-0.30 s for the next 75 s.
    warmup_s: float = 0.0

    @property
    def inventory(self) -> str:
        """--hosts as an inventory: a bare number is that many simulated hosts of BENCH_HOST."""
        return f"sim:{int(self.hosts)}:{BENCH_HOST}" if self.hosts.strip().isdigit() else self.hosts

    @property
    def tasks(self) -> int:
        return self.jobs * self.tasks_per_job

    def due_s(self, job: int) -> float:
        """When the job-th job is submitted, in seconds from the first: at once without a rate;
        with one, when its tasks are due at that steady load."""
        return job * self.tasks_per_job / self.rate if self.rate else 0.0

    def warming(self, job: int) -> bool:
        """Whether the job-th job is offered in the warm-up (left out of the percentiles)."""
        return bool(self.rate) and self.due_s(job) < self.warmup_s


def key_on(partition: int, partitions: int, keys: Iterator[str]) -> str:
    """The next of `keys` that lands on `partition` (the keys it passes over are used up)."""
    return next(key for key in keys if partition_for(key, partitions) == partition)


def pool_names(count: int, partitions: int) -> list[str]:
    """`count` pool paths (/bench-N) on the partitions of the pool-keyed topics in turn, so that
    every instance of entitle and place gets its share of the pools. Named /bench-0 to /bench-4,
    five pools hash onto three of four partitions (three of them onto one), and a second instance
    of either stage would get one pool of five."""
    names = (f"/bench-{n}" for n in itertools.count())
    return [key_on(i % partitions, partitions, names) for i in range(count)]


def job_id_on(partition: int, partitions: int) -> str:
    """A new job id whose job-commands (and task-status) partition is `partition`: the bench's jobs
    go to the partitions in turn, so that every admit instance gets its share (20 random ids over
    four partitions are rarely even: one run's two admit instances were held back 11.8 and 3.1 s)."""
    return key_on(partition, partitions, iter(lambda: str(uuid.uuid4()), None))


def _interrupted(signum, _frame) -> None:
    raise SystemExit(128 + signum)


def run_pipeline_bench(console, plan: BenchPlan) -> dict:
    """Start a throwaway stack, measure the relay baseline on its broker, submit the jobs as fast
    as one producer can, wait for every task to end, and return the figures."""
    home = Path(tempfile.mkdtemp(prefix="peloton-bench-"))
    # A bench stopped by SIGTERM (a timeout, a kill) must still take its stack down: Python's
    # default would end the process at once, leaving the broker, the store and the stages running.
    signal.signal(signal.SIGTERM, _interrupted)
    stack = DevStack(Settings.from_env(home=home, store=str(home / "peloton.db"), hosts=plan.inventory,
                                       sim_task_seconds=plan.task_seconds))
    # Checked before the stack starts: a cap that cannot be set stops the run before it costs anything.
    caps = CpuCaps.make(plan.cpu_per_instance) if plan.cpu_per_instance else None
    # The broker at full compilation (dev/jvm.py): it serves the whole run at load.
    stack.up(progress=lambda m: console.print(m, highlight=False), store=plan.store, instances=plan.instances,
             jvm="full")
    try:
        # The jobs go straight to Kafka, signed with the stack's admin token.
        settings = replace(stack.settings, command_token=(stack.read() or {}).get("command_token", ""))
        store = open_store(settings.store)
        expected = len(parse_inventory(plan.inventory, 4))
        hosts = _wait_for_hosts(settings, expected, console)
        relay = {}
        if plan.relay_messages:
            console.print(f"relay baseline: {plan.relay_messages:,} messages of 200 bytes through {HOPS} hops ...",
                          highlight=False)
            relay = run_relay(settings, plan.relay_messages)
        cluster = sum((h for h in hosts), Resources())
        catalogue = Catalogue(settings.topic_prefix)
        pools = pool_names(plan.pools, catalogue["task-demand"].partitions)
        for i, pool in enumerate(pools):  # the cluster shared equally: every pool can use its share at once
            create_pool(settings, store, pool, BENCH_POOL.format(
                index=i, cpu=cluster.cpu / plan.pools, mem=cluster.mem_mb / plan.pools,
                disk=cluster.disk_mb / plan.pools))
        _wait_for_groups(settings, catalogue, plan.instances, console)
        components = stack.status()
        if caps is not None:
            for c in components:
                if c["component"] in STAGES and c.get("pid"):
                    caps.cap(c.get("instance") or c["component"], c["pid"])
        cpu_before = {c["pid"]: _cpu_seconds(c["pid"]) for c in components}
        records_before = _records_handled(components)
        out = emitter(settings)
        distinct = host_capacities(settings)
        submitted: dict[str, int] = {}  # job id -> submission time (ms)
        warming: set[str] = set()  # the jobs of the warm-up
        started, started_ms = time.monotonic(), _now_ms()
        job_partitions = catalogue["job-commands"].partitions
        for i in range(plan.jobs):
            time.sleep(max(0.0, started + plan.due_s(i) - time.monotonic()))
            job_id = submit_job(settings, store, pools[i % plan.pools],
                                BENCH_JOB.format(index=i, tasks=plan.tasks_per_job),
                                job_id=job_id_on(i % job_partitions, job_partitions), out=out, hosts=distinct)
            submitted[job_id] = _now_ms()
            if plan.warming(i):
                warming.add(job_id)
        console.print(f"submitted {plan.jobs} jobs of {plan.tasks_per_job:,} tasks over {plan.pools} pools in "
                      f"{time.monotonic() - started:.1f}s", highlight=False)
        states = _wait(store, list(submitted), plan, console)
        elapsed = time.monotonic() - started
        cpu = {c["pid"]: _cpu_seconds(c["pid"]) - cpu_before.get(c["pid"], 0.0) for c in components}
        records = _records_handled(components)
        running_at, succeeded_at, latencies, steps = _task_times(store, submitted, warming)
        figures = _figures(plan, states, elapsed, started_ms, running_at, succeeded_at, latencies["measured"], relay)
        if warming:
            figures["warmup_jobs"] = len(warming)
            figures["warmup_p99_ms"] = _percentile(latencies["warmup"], 99)
            figures["p99_ms_with_warmup"] = _percentile(latencies["measured"] + latencies["warmup"], 99)
        figures["steps_ms"] = {state: {"p50": _percentile(v, 50), "p99": _percentile(v, 99), "runs": len(v)}
                               for state, v in steps.items() if v}
        figures["stages"] = _per_stage(components, cpu, records_before, records, elapsed, plan.tasks)
        # CPU per task moves far less than tasks per second when other work shares the machine.
        figures["cpu_ms_per_task"] = round(sum(r["cpu_seconds"] for r in figures["stages"]) * 1000 / plan.tasks, 3)
        if caps is not None:
            figures["cpu_per_instance"] = plan.cpu_per_instance
            figures["throttled_s"] = caps.throttled()
        _print(console, plan, figures)
        return figures
    finally:
        stack.down(progress=lambda m: None)
        if caps is not None:
            caps.close()
        shutil.rmtree(home, ignore_errors=True)


def _now_ms() -> int:
    return int(time.time() * 1000)


def _wait_for_hosts(settings: Settings, expected: int, console, timeout: float = 120.0) -> list[Resources]:
    """Every simulated host in host-state (place sees them all before the first job)."""
    deadline = time.monotonic() + timeout
    while True:
        hosts = [Resources.from_record(h["total"]) for h in list_hosts(settings, wait_s=10) if h["state"] == "UP"]
        if len(hosts) >= expected or time.monotonic() > deadline:
            console.print(f"hosts: {len(hosts):,} up", highlight=False)
            return hosts
        time.sleep(1)


def settled(desc: dict | None, instances: int) -> bool:
    """Whether a stage's group, as group_members describes it, has settled with every instance in
    it holding a partition (every instance counts once it has one: a run that starts sooner
    measures one instance doing the work while the other joins)."""
    if desc is None or desc["state"] != "STABLE" or len(desc["client_ids"]) < instances:
        return False
    return all(n > 0 for n in desc["partitions"].values())


def _wait_for_groups(settings: Settings, catalogue: Catalogue, instances: int, console, timeout: float = 90.0) -> None:
    """With several instances of each stage, until each stage's group has settled with all of them
    holding partitions (a join can take seconds after the hosts are up)."""
    if instances < 2:
        return
    from peloton.runtime.membership import group_members

    deadline = time.monotonic() + timeout
    waiting = list(STAGES)
    while waiting and time.monotonic() < deadline:
        waiting = [s for s in waiting if not settled(group_members(settings, catalogue.group(s)), instances)]
        if waiting:
            time.sleep(1)
    console.print(f"groups: {instances} instances of each stage, each holding partitions" if not waiting else
                  f"groups: {', '.join(waiting)} not settled after {timeout:g}s; measuring anyway", highlight=False)


def _wait(store, job_ids: list[str], plan: BenchPlan, console) -> dict[str, int]:
    """Until every job has ended (or a generous timeout): one progress bar over all tasks."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    deadline = time.monotonic() + max(300.0, plan.tasks / 100)
    with Progress(TextColumn("tasks"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[detail]}"),
                  TimeElapsedColumn(), console=console) as progress:
        bar = progress.add_task("tasks", total=plan.tasks, detail="")
        while True:
            counts: dict[str, int] = {}
            for per_job in store.task_state_counts(job_ids).values():
                for state, n in per_job.items():
                    counts[state] = counts.get(state, 0) + n
            ended = sum(counts.get(s, 0) for s in ("SUCCEEDED", "FAILED", "KILLED", "LOST"))
            progress.update(bar, completed=ended, detail=f"running {counts.get('RUNNING', 0):,}")
            jobs = {j: store.get_job(j) for j in job_ids} if ended >= plan.tasks else {}
            if (jobs and all(j is not None and j.state in JOB_TERMINAL for j in jobs.values())) \
                    or time.monotonic() > deadline:
                break
            # Counting is a query over every task: with a million of them, not twice a second.
            time.sleep(max(0.5, plan.tasks / 200_000))
    states: dict[str, int] = {}
    for job_id in job_ids:
        job = store.get_job(job_id)
        state = job.state if job else "MISSING"
        states[state] = states.get(state, 0) + 1
    return states


def _task_times(store, submitted: dict[str, int], warming: set[str] = frozenset()
                ) -> tuple[list[int], list[int], dict[str, list[int]], dict[str, list[int]]]:
    """Each task's first RUNNING and SUCCEEDED time (ms), its latency from its job's submission to
    RUNNING (those of the warm-up's jobs apart), and to each step before it (where the latency
    goes; the measured jobs' only)."""
    running_at, succeeded_at = [], []
    latencies: dict[str, list[int]] = {"measured": [], "warmup": []}
    steps: dict[str, list[int]] = {s: [] for s in STEPS}
    for job_id, at in submitted.items():
        first: dict[tuple[int, str], int] = {}
        for e in store.task_events(job_id):
            key = (e["instance"], e["state"])
            if key not in first:
                first[key] = e["timestamp_ms"]
        warm = job_id in warming
        for (_instance, state), t in first.items():
            if state in steps and not warm:
                steps[state].append(t - at)
            if state == "RUNNING":
                running_at.append(t)
                latencies["warmup" if warm else "measured"].append(t - at)
            elif state == "SUCCEEDED":
                succeeded_at.append(t)
    return running_at, succeeded_at, latencies, steps


def _figures(plan: BenchPlan, states: dict[str, int], elapsed: float, started_ms: int, running_at: list[int],
             succeeded_at: list[int], latencies: list[int], relay: dict) -> dict:
    to_running = (max(running_at) - started_ms) / 1000 if running_at else None
    to_succeeded = (max(succeeded_at) - started_ms) / 1000 if succeeded_at else None
    per_s_running = round(len(running_at) / to_running, 1) if to_running else 0.0
    relay_rate = relay.get("msgs_per_s") or 0.0
    return {
        "hosts": plan.inventory, "jobs": plan.jobs, "tasks_per_job": plan.tasks_per_job, "pools": plan.pools,
        "instances": plan.instances, "task_seconds": plan.task_seconds, "store": plan.store,
        "tasks": plan.tasks, "offered_tasks_per_s": plan.rate or None, "job_states": states,
        "seconds": round(elapsed, 2),
        "tasks_running": len(running_at), "tasks_succeeded": len(succeeded_at),
        "tasks_per_s_running": per_s_running,
        "tasks_per_s_succeeded": round(len(succeeded_at) / to_succeeded, 1) if to_succeeded else 0.0,
        "p50_ms": _percentile(latencies, 50), "p90_ms": _percentile(latencies, 90),
        "p99_ms": _percentile(latencies, 99),
        "relay_msgs_per_s": relay_rate, "relay": relay,
        "ratio": round(per_s_running / relay_rate, 3) if relay_rate else None,
    }


def _per_stage(components: list[dict], cpu: dict[int, float], before: dict[str, float], after: dict[str, float],
               elapsed: float, tasks: int) -> list[dict]:
    """Per stage (its instances together), then the broker, a Cassandra store's node and the
    agents: records handled per second, CPU seconds used during the run, and the peak memory of
    its largest process."""
    rows = []
    # Cassandra's work is all in its one process, as SQLite's is in the stages: counted, so CPU per
    # task compares across stores. PostgreSQL's is in its backends, children the postmaster's pid misses.
    for name in (*STAGES, "broker", "cassandra", "agent"):
        procs = [c for c in components if c["component"] == name and c.get("pid")]
        if not procs:
            continue
        handled = after.get(name, 0.0) - before.get(name, 0.0)
        cpu_seconds = sum(cpu.get(c["pid"], 0.0) for c in procs)
        rows.append({"component": name, "processes": len(procs),
                     "records_per_s": round(handled / elapsed, 1) if name in STAGES else None,
                     "cpu_seconds": round(cpu_seconds, 1),
                     "cpu_ms_per_task": round(cpu_seconds * 1000 / tasks, 3),
                     "peak_mb": round(max(_peak_mb(c["pid"]) for c in procs), 1)})
    return rows


def _print(console, plan: BenchPlan, f: dict) -> None:
    from rich.table import Table

    console.print(
        f"pipeline: {plan.jobs} jobs x {plan.tasks_per_job:,} tasks over {plan.pools} pools on {plan.inventory} "
        f"({plan.instances} instance(s) per stage, {plan.store} store, sim task {plan.task_seconds:g}s): "
        f"jobs {f['job_states']} in {f['seconds']:.1f}s", highlight=False)
    if plan.cpu_per_instance:
        console.print(f"  each stage instance capped at {plan.cpu_per_instance:g} of a core; seconds its quota held it "
                      "back: " + ", ".join(f"{name} {s:g}" for name, s in f.get("throttled_s", {}).items()),
                      highlight=False)
    if plan.rate:
        console.print(f"  offered load: {plan.rate:,.0f} tasks/s (a job of {plan.tasks_per_job:,} tasks every "
                      f"{plan.tasks_per_job / plan.rate:.2f}s)", highlight=False)
    console.print(f"  to RUNNING:   [bold]{f['tasks_per_s_running']:,.0f} tasks/s[/bold]   "
                  f"latency submit->RUNNING p50 {f['p50_ms'] / 1000:.2f}s  p90 {f['p90_ms'] / 1000:.2f}s  "
                  f"p99 {f['p99_ms'] / 1000:.2f}s", highlight=False)
    if f.get("warmup_jobs"):
        console.print(f"  (the {f['warmup_jobs']} jobs of the first {plan.warmup_s:g}s left out as warm-up: their p99 "
                      f"{f['warmup_p99_ms'] / 1000:.2f}s; p99 of all jobs {f['p99_ms_with_warmup'] / 1000:.2f}s)",
                      highlight=False)
    measured = f["tasks"] - f.get("warmup_jobs", 0) * plan.tasks_per_job
    console.print("  latency submit->step p50/p99: " + ", ".join(
        f"{state} {v['p50'] / 1000:.2f}/{v['p99'] / 1000:.2f}s"
        + (f" ({v['runs']:,} runs)" if v["runs"] < measured else "")  # a step only some runs took
        for state, v in f.get("steps_ms", {}).items()),
        highlight=False)
    console.print(f"  to SUCCEEDED: [bold]{f['tasks_per_s_succeeded']:,.0f} tasks/s[/bold]", highlight=False)
    if f["relay_msgs_per_s"]:
        console.print(f"  relay baseline ({HOPS} hops, same broker): {f['relay_msgs_per_s']:,.0f} msgs/s; "
                      f"ratio {f['ratio']:.3f}", highlight=False)
    console.print(f"  CPU per task, all processes: {f['cpu_ms_per_task']:.2f} ms", highlight=False)
    table = Table("component", "processes", "records/s", "cpu s", "cpu ms/task", "peak MB")
    for r in f["stages"]:
        table.add_row(r["component"], str(r["processes"]),
                      "" if r["records_per_s"] is None else f"{r['records_per_s']:,.0f}",
                      f"{r['cpu_seconds']:.1f}", f"{r['cpu_ms_per_task']:.3f}", f"{r['peak_mb']:,.0f}")
    console.print(table)


def _percentile(values: list[int], q: float) -> float:
    """The q-th percentile (0-100), nearest rank."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))])


def _cpu_seconds(pid: int) -> float:
    """User and system CPU seconds a process has used (its children not counted)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _peak_mb(pid: int) -> float:
    """The most resident memory a process has had (VmHWM), in MB."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _records_handled(components: list[dict]) -> dict[str, float]:
    """peloton_records_handled_total per stage, summed over its instances, from their metrics."""
    totals: dict[str, float] = {}
    for c in components:
        if not c.get("metrics") or c["component"] not in STAGES:
            continue
        try:
            with urllib.request.urlopen(c["metrics"], timeout=5) as answer:
                text = answer.read().decode()
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith("peloton_records_handled_total{"):
                totals[c["component"]] = totals.get(c["component"], 0.0) + float(line.rsplit(" ", 1)[1])
    return totals
