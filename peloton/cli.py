"""pelotonctl: topics, stages, the dev stack, pools and jobs.

Exit codes: 0 success; 1 the job ended but did not succeed; 2 invalid input (bad file, unknown
pool, bad arguments); 3 not found; 4 timed out waiting; 5 the broker or stack is unavailable.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from peloton.config import Settings

JSON_HELP = "Print JSON (for scripts) instead of a table."


def _commands(help: str, **options) -> typer.Typer:
    """A command group. Its help is plain text (rich_markup_mode=None): no markup or emoji codes
    are read into it, so that 'sim:100:cpu=32' shows as written."""
    return typer.Typer(rich_markup_mode=None, help=help, no_args_is_help=True, **options)


# add_completion gives --install-completion and --show-completion (bash, zsh, fish, PowerShell).
app = _commands("Peloton-style cluster scheduler on Kafka.", add_completion=True)
topics_app = _commands("Topics of the pipeline (topics.yaml).")
stage_app = _commands("Run pipeline stages.")
dev_app = _commands("The embedded dev stack: broker, stages and hosts on this machine.")
job_app = _commands("Jobs: validate, create, status, stop, start, delete, get, query, list.")
task_app = _commands("Tasks of a job.")
pool_app = _commands("Resource pools.")
host_app = _commands("Hosts: list them, drain them for maintenance.")
maintenance_app = _commands("Host maintenance: drain a host, bring it back.")
host_app.add_typer(maintenance_app, name="maintenance")
agent_app = _commands("Host agents: the process on each host that runs its tasks.")
letters_app = _commands("The dead-letter topic: messages a stage could not use, with the reason.")
cluster_app = _commands("The cluster's instances on every machine, from ZooKeeper (PELOTON_ZOOKEEPER).")
app.add_typer(topics_app, name="topics")
app.add_typer(stage_app, name="stage")
app.add_typer(dev_app, name="dev")
app.add_typer(job_app, name="job")
app.add_typer(task_app, name="task")
app.add_typer(pool_app, name="respool")
app.add_typer(cluster_app, name="cluster")
app.add_typer(agent_app, name="agent")
app.add_typer(host_app, name="host")
app.add_typer(letters_app, name="dead-letters")

# Piped or redirected, tables keep their full width: ids are copied from them, never cut at 80.
out = Console(soft_wrap=True, emoji=False, width=None if sys.stdout.isatty() else 400)
err = Console(stderr=True, emoji=False)

EXIT_FAILED, EXIT_INVALID, EXIT_NOT_FOUND, EXIT_TIMEOUT, EXIT_UNAVAILABLE = 1, 2, 3, 4, 5


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        out.print(f"pelotonctl {version('peloton-kafka')}", highlight=False)
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print the version and exit."),
) -> None:
    """Peloton-style cluster scheduler on Kafka."""


def _fail(message: str, code: int) -> None:
    err.print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def _settings() -> Settings:
    from peloton.config import SettingsError

    try:
        return Settings.from_env()
    except SettingsError as exc:
        _fail(str(exc), EXIT_INVALID)
        raise


def _store():
    from peloton.store import open_store

    return open_store(_settings().store)


def _print_json(data) -> None:
    sys.stdout.write(json.dumps(_rounded(data), indent=2, default=str) + "\n")


def _rounded(data):
    """Floats to 6 decimals, everywhere in a JSON answer: sums of resources carry binary noise
    (0.1 + 0.2 is 0.30000000000000004) that means nothing to a reader or a script."""
    if isinstance(data, float):
        return round(data, 6)
    if isinstance(data, dict):
        return {k: _rounded(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [_rounded(v) for v in data]
    return data


def _amount(x: float | None) -> str:
    """A resource amount for a table: whole numbers as they are (1024000, never 1.024e+06), others
    to 3 decimals at most; '?' when it is not known."""
    if x is None:
        return "?"
    if x != x or x in (float("inf"), float("-inf")):
        return str(x)
    if x == int(x):
        return str(int(x))
    return f"{x:.3f}".rstrip("0").rstrip(".")


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as exc:
        _fail(f"cannot read {path}: {exc.strerror}", EXIT_INVALID)
        raise


def _key_values(items: list[str], option: str) -> dict[str, str]:
    """KEY=VALUE options (repeated) as a dict; exit 2 naming the option for one without '='."""
    pairs = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            _fail(f"{option} {item!r}: expected KEY=VALUE", EXIT_INVALID)
        pairs[key] = value
    return pairs


def _broker_call(fn, *args):
    from confluent_kafka import KafkaException

    from peloton.registry import LockNotAcquired, RegistryUnavailable
    from peloton.runtime import BrokerUnavailable, DeliveryError

    try:
        return fn(*args)
    except (RegistryUnavailable, LockNotAcquired) as exc:
        _fail(str(exc), EXIT_UNAVAILABLE)
    except (KafkaException, DeliveryError, BrokerUnavailable) as exc:
        _fail(f"broker at {_settings().bootstrap} is unavailable (is `pelotonctl dev up` running, or "
              f"PELOTON_KAFKA_BOOTSTRAP set?): {exc}", EXIT_UNAVAILABLE)


# -- topics ------------------------------------------------------------------------------------
@topics_app.command("apply")
def topics_apply(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Create missing topics and set each one's config as topics.yaml gives it (idempotent)."""
    from peloton.admin import ensure_topics

    report = _broker_call(ensure_topics, _settings())
    if as_json:
        _print_json(report)
        return
    table = Table("topic", "partitions", "replicas", "cleanup", "status")
    for r in report:
        table.add_row(r["topic"], str(r["partitions"]), str(r["replicas"]), r["cleanup_policy"], r["status"])
    out.print(table)
    if any(r["status"].startswith("mismatch") for r in report):
        raise typer.Exit(EXIT_INVALID)


# -- stages ------------------------------------------------------------------------------------
@stage_app.command("run")
def stage_run(
    name: str = typer.Argument(..., help="admit, entitle, place or launch"),
    instance_id: Optional[str] = typer.Option(None, help="Client id of this instance (default: random)."),
    max_seconds: Optional[float] = typer.Option(None, help="Stop after this long (for tests and benchmarks)."),
) -> None:
    """Start one instance of a stage; it joins the stage's consumer group. SIGTERM stops it cleanly."""
    from stages.launch.inventory import InventoryError
    from stages.run import STAGES, run_stage

    if name not in STAGES:
        _fail(f"unknown stage {name!r}; stages are {', '.join(STAGES)}", EXIT_INVALID)
    try:
        run_stage(name, _settings(), instance_id, max_seconds)
    except InventoryError as exc:
        _fail(f"PELOTON_HOSTS: {exc}", EXIT_INVALID)


# -- host agents -------------------------------------------------------------------------------
@agent_app.command("run")
def agent_run(
    name: str = typer.Option(..., "--name", help="The host's id (unique in the cluster)."),
    resources: str = typer.Option("cpu=8,mem_mb=16384,disk_mb=100000,gpu=0", help="What the host offers."),
    attribute: list[str] = typer.Option([], "--attribute", help="A host label KEY=VALUE (repeatable)."),
    ports: str = typer.Option("31000-32000", "--ports", help="Ports the host gives its tasks: LOW-HIGH[,LOW-HIGH]."),
    simulate: int = typer.Option(0, "--simulate", min=0, max=100_000,
                                 help="Serve N simulated hosts NAME-0 .. NAME-(N-1) instead (tasks last "
                                      "PELOTON_SIM_TASK_SECONDS), for benchmarks."),
    max_seconds: Optional[float] = typer.Option(None, help="Stop after this long (for tests)."),
) -> None:
    """Run this host's agent: it registers with the host manager and runs the tasks placed here.
    SIGTERM stops it and its tasks (reported lost, so they run elsewhere); after a SIGKILL, a new
    agent of the same name adopts the tasks still running."""
    from stages.agent.agent import HOST_ID, AgentSpec, parse_port_ranges, parse_resources, run_agent

    if not HOST_ID.fullmatch(name):
        _fail(f"--name {name!r}: a host id is letters, digits, '.', '_' and '-' (at most 64)", EXIT_INVALID)
    try:
        capacity = parse_resources(resources)
    except ValueError as exc:
        _fail(f"--resources: {exc}", EXIT_INVALID)
    try:
        port_ranges = parse_port_ranges(ports)
    except ValueError as exc:
        _fail(f"--ports: {exc}", EXIT_INVALID)
    labels = _key_values(attribute, "--attribute")
    names = [f"{name}-{i}" for i in range(simulate)] if simulate else [name]
    specs = [AgentSpec(n, capacity, labels, port_ranges) for n in names]
    run_agent(_settings(), specs, simulate=bool(simulate), name=name, max_seconds=max_seconds)


# -- hosts -------------------------------------------------------------------------------------
@host_app.command("list")
def host_list(as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """Every host: state (UP, DRAINING, DRAINED, DOWN), free and total room, runs, labels. A host
    whose agent is silent shows '?' for its runs and free room: what still runs there is unknown."""
    from peloton.admin import list_hosts

    hosts = _broker_call(list_hosts, _settings())
    if as_json:
        _print_json({"hosts": hosts})
        return
    sys.stdout.write(f"{'HOST':<16} {'STATE':<9} {'TASKS':>5} {'CPU FREE/TOTAL':>15} {'MEM_MB FREE/TOTAL':>19}  LABELS\n")
    for h in hosts:
        labels = ",".join(f"{k}={v}" for k, v in sorted(h["labels"].items()) if k != "hostname")
        free = h["free"] or {}  # None: its agent is silent, its runs unknown ('?')
        cpu = f"{_amount(free.get('cpu'))}/{_amount(h['total']['cpu'])}"
        mem = f"{_amount(free.get('mem_mb'))}/{_amount(h['total']['mem_mb'])}"
        tasks = "?" if h["tasks"] is None else h["tasks"]
        sys.stdout.write(f"{h['host_id']:<16} {h['state']:<9} {tasks:>5} {cpu:>15} {mem:>19}  {labels}\n")


def _maintenance(host_id: str, action: str, force: bool = False) -> None:
    from peloton.admin import NotFound, UserError, request_maintenance

    try:
        _broker_call(request_maintenance, _settings(), host_id, action, "", force)
    except NotFound as exc:
        _fail(str(exc), EXIT_NOT_FOUND)
    except UserError as exc:
        _fail(str(exc), EXIT_INVALID)


@maintenance_app.command("start")
def maintenance_start(host_id: str, force: bool = typer.Option(
        False, "--force", help="Drain even the last UP host, or beyond PELOTON_MAX_DRAIN_SHARE of the hosts.")) -> None:
    """Drain HOST: it takes no new placements, its tasks are killed and run elsewhere, then it is
    DRAINED and DOWN (see `host list`). Refused for the last UP host, or when more than
    PELOTON_MAX_DRAIN_SHARE (50%) of the hosts would be in maintenance at once, unless --force."""
    _maintenance(host_id, "START", force)
    sys.stdout.write(f"host {host_id}: maintenance started (DRAINING)\n")


@maintenance_app.command("complete")
def maintenance_complete(host_id: str) -> None:
    """Bring HOST back UP after maintenance."""
    _maintenance(host_id, "COMPLETE")
    sys.stdout.write(f"host {host_id}: maintenance complete (UP)\n")


# -- dev stack ---------------------------------------------------------------------------------
@dev_app.command("up")
def dev_up(
    hosts: Optional[str] = typer.Option(None, help="Host inventory, e.g. 'agent:2:cpu=8;sim:100:cpu=32' (agent: a host agent process each)."),
    store: str = typer.Option("sqlite", help="sqlite (one file), or postgres: a local PostgreSQL and ZooKeeper "
                                             "of the stack's own, as on several machines."),
    instances: int = typer.Option(1, min=1, max=8, help="Instances of every stage."),
    brokers: int = typer.Option(1, min=1, max=5, help="Apache Kafka nodes (3: replication factor 3, "
                                                      "min.insync.replicas 2)."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Start Apache Kafka (unless PELOTON_KAFKA_BOOTSTRAP is set), apply topics, create the default
    pool and start one instance of each stage with its hosts."""
    from dataclasses import replace

    from peloton.devstack import DevStack, StackError
    from stages.launch.inventory import InventoryError, parse_inventory

    settings = _settings()
    if store not in ("sqlite", "postgres"):
        _fail(f"--store: {store!r} is neither sqlite nor postgres", EXIT_INVALID)
    try:
        parse_inventory(hosts or settings.hosts, 1)
    except InventoryError as exc:
        _fail(f"{'--hosts' if hosts else 'PELOTON_HOSTS'}: {exc}", EXIT_INVALID)
    stack = DevStack(replace(settings, hosts=hosts) if hosts else settings)
    try:
        state = stack.up(progress=(lambda m: None) if as_json else (lambda m: out.print(m, highlight=False)),
                         store=store, instances=instances, brokers=brokers)
    except StackError as exc:
        _fail(str(exc), EXIT_UNAVAILABLE)
    if as_json:
        _print_json(state)


@dev_app.command("restart")
def dev_restart(component: str = typer.Argument(..., help="What `dev status` lists: broker-1, admit-0, agent-0, "
                                                           "or every one of a kind: broker, admit.")) -> None:
    """Stop (if running) and start again a component of the dev stack on its existing data."""
    from peloton.devstack import DevStack, StackError

    try:
        DevStack(_settings()).restart(component, progress=lambda m: out.print(m, highlight=False))
    except StackError as exc:
        _fail(str(exc), EXIT_NOT_FOUND if "no component" in str(exc) else EXIT_UNAVAILABLE)


@dev_app.command("status")
def dev_status(as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """What the dev stack runs: component, pid, address, running."""
    from peloton.devstack import DevStack

    rows = DevStack(_settings()).status()
    if as_json:
        _print_json(rows)
    else:
        table = Table("component", "pid", "address", "running")
        for r in rows:
            table.add_row(r.get("instance") or r["component"], str(r["pid"]), r["address"],
                          "yes" if r["running"] else "[red]no[/red]")
        out.print(table if rows else "no dev stack is running")
    if not rows or not all(r["running"] for r in rows):
        raise typer.Exit(EXIT_UNAVAILABLE)


@dev_app.command("down")
def dev_down() -> None:
    """Stop the stages (each finishes its batch and commits), then the broker."""
    from peloton.devstack import DevStack

    DevStack(_settings()).down(progress=lambda m: out.print(m, highlight=False))


@dev_app.command("demo")
def dev_demo(
    keep: bool = typer.Option(False, help="Leave the stack running afterwards."),
    timeout: float = typer.Option(300, help="Seconds to wait for the jobs."),
) -> None:
    """Start the stack, run the example jobs to completion with live progress, print a summary."""
    from peloton.demo import run_demo

    raise typer.Exit(run_demo(_settings(), out, keep=keep, timeout=timeout))


@app.command("bench")
def bench(
    hosts: str = typer.Option("10000", help="Simulated hosts: a number, or an inventory "
                              "(sim:50:cpu=64,mem_mb=262144 or simagent:2000:...)."),
    jobs: int = typer.Option(50, help="Batch jobs to submit."),
    tasks_per_job: int = typer.Option(1000, help="Tasks in each job."),
    pools: int = typer.Option(5, help="Resource pools the jobs are spread over (the cluster shared equally)."),
    instances: int = typer.Option(1, help="Instances of each stage."),
    task_seconds: float = typer.Option(0.0, help="How long each simulated task runs."),
    store: str = typer.Option("sqlite", help="sqlite, or postgres (a throwaway PostgreSQL and ZooKeeper)."),
    relay: int = typer.Option(100_000, help="Messages through the 4-hop relay baseline (0: none)."),
    rate: float = typer.Option(0.0, help="Offered load in tasks/s: jobs are submitted at this pace, for the "
                               "latency at a steady load (0: as fast as one producer can, for throughput)."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Run JOBS jobs of TASKS_PER_JOB simulated tasks through a throwaway stack and print tasks per
    second to RUNNING and to SUCCEEDED, latency percentiles, per-stage records, CPU and memory, and
    the same broker's 4-hop relay rate for comparison. With --rate, the jobs arrive at that pace
    instead of all at once, and the percentiles tell the latency at that load."""
    from peloton.bench import BenchPlan, run_pipeline_bench

    if store not in ("sqlite", "postgres"):
        _fail(f"--store: {store!r} is neither sqlite nor postgres", EXIT_INVALID)
    for name, value in (("--jobs", jobs), ("--tasks-per-job", tasks_per_job), ("--pools", pools),
                        ("--instances", instances)):
        if value < 1:
            _fail(f"{name} {value}: must be at least 1", EXIT_INVALID)
    if rate < 0:
        _fail(f"--rate {rate:g}: must be 0 or more", EXIT_INVALID)
    plan = BenchPlan(hosts=hosts, jobs=jobs, tasks_per_job=tasks_per_job, pools=pools, instances=instances,
                     task_seconds=task_seconds, store=store, relay_messages=relay, rate=rate)
    from stages.launch.inventory import InventoryError, parse_inventory

    try:
        parse_inventory(plan.inventory, 4)
    except InventoryError as exc:
        _fail(f"--hosts: {exc}", EXIT_INVALID)
    figures = run_pipeline_bench(err if as_json else out, plan)
    if as_json:
        _print_json(figures)
    if set(figures["job_states"]) != {"SUCCEEDED"}:
        raise typer.Exit(EXIT_FAILED)


# -- pools -------------------------------------------------------------------------------------
def _pool_change(fn, *args) -> dict | None:
    from peloton.admin import NotFound, UserError

    try:
        return fn(_settings(), _store(), *args)
    except NotFound as exc:
        _fail(str(exc), EXIT_NOT_FOUND)
    except UserError as exc:
        _fail(str(exc), EXIT_INVALID)


@pool_app.command("create")
def respool_create(path: str, config: Path, as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """Create a resource pool at PATH (e.g. /team/batch) from a Peloton respool YAML."""
    from peloton.admin import create_pool

    pool = _broker_call(_pool_change, create_pool, path, _read(config))  # the ZooKeeper lock may be away
    if as_json:
        _print_json(pool)
    else:
        out.print(f"created resource pool {path}")


@pool_app.command("update")
def respool_update(path: str, config: Path, force: bool = typer.Option(
        False, "--force", help="Store it even if it breaks a rule of the tree (Peloton's --force)."),
        as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """Replace the config of the resource pool at PATH."""
    from peloton.admin import update_pool

    pool = _broker_call(_pool_change, update_pool, path, _read(config), force)
    if as_json:
        _print_json(pool)
    else:
        out.print(f"updated resource pool {path}")


@pool_app.command("delete")
def respool_delete(path: str) -> None:
    """Delete a leaf resource pool with no job left to run."""
    from peloton.admin import delete_pool

    _broker_call(_pool_change, delete_pool, path)
    out.print(f"deleted resource pool {path}")


KIND_NAMES = ("cpu", "gpu", "memory", "disk")


@pool_app.command("get")
def respool_get(path: str, as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """A pool's reservation, limit and share, and its entitlement, allocation and demand now."""
    from peloton.admin import pool_report

    report = _broker_call(_pool_change, pool_report, path)
    if as_json:
        _print_json(report)
        return
    out.print(f"resource pool {path}", highlight=False)
    figures = ("reservation", "limit", "share", "entitlement", "allocation", "demand")
    table = Table("kind", *figures)
    for kind in KIND_NAMES:
        table.add_row(kind, *(_amount(report[f][kind]) for f in figures))
    out.print(table)
    for gang in report.get("waiting", []):
        out.print(f"  waiting: job {gang['job_id']} ({gang['tasks']} tasks): {gang['reason']}", highlight=False)


@pool_app.command("dump")
def respool_dump(as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """The pool tree with every pool's config (YAML; --json for JSON)."""
    import yaml

    from peloton.model.pool import pool_tree

    tree = pool_tree(_store().list_pools())
    if as_json:
        _print_json(tree)
    else:
        sys.stdout.write(yaml.safe_dump(tree, sort_keys=False))


@pool_app.command("bench")
def respool_bench(fanout: int = typer.Option(10, help="Children per pool."),
                  levels: int = typer.Option(3, help="Levels of the tree (10 x 10 x 10: 1,000 leaves)."),
                  gangs: int = typer.Option(100_000, help="Gangs to admit."),
                  gang_size: int = typer.Option(1, help="Tasks per gang."),
                  as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """Benchmark the resource manager's decisions (no cluster): entitlement time for a pool
    tree, and admission throughput in gangs per second. Prints figures; asserts nothing."""
    from peloton.bench import run_resource_manager_bench

    figures = run_resource_manager_bench(err if as_json else out, fanout, levels, gangs, gang_size)
    if as_json:
        _print_json(figures)


@pool_app.command("entitlement")
def respool_entitlement(input_file: Path = typer.Option(..., "--input", help="capacity, pools and usage (YAML or JSON)"),
                        as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """Dry run of the entitlement calculation: no cluster needed. Every pool's entitlement,
    non-slack and slack entitlement, for the capacity, pools and usage in FILE."""
    from peloton.model.safe_yaml import YamlError, read_yaml
    from stages.entitle.entitlement import DryRunError, dry_run

    try:
        result = dry_run(read_yaml(_read(input_file)))
    except (YamlError, DryRunError) as exc:
        _fail(f"{input_file}: {exc}", EXIT_INVALID)
    if as_json:
        _print_json(result)
        return
    table = Table("pool", "kind", "entitlement", "non-slack", "slack")
    for path, shares in result.items():
        for kind in KIND_NAMES:
            table.add_row(path, kind, *(_amount(shares[f][kind]) for f in (
                "entitlement", "non_slack_entitlement", "slack_entitlement")))
    out.print(table)


# -- jobs --------------------------------------------------------------------------------------
@job_app.command("validate")
def job_validate(config: Path, as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """Check a Peloton job file; print what it asks for, or every problem in it (exit 2)."""
    from peloton.admin import UserError, validate_job
    from peloton.model.jobconfig import gang_instances

    try:
        spec = validate_job(_read(config), _settings())
    except UserError as exc:
        _fail(f"{config}: {exc}", EXIT_INVALID)
    summary = {
        "file": str(config), "valid": True, "name": spec.name, "type": spec.type,
        "instances": spec.instance_count, "gangs": len(gang_instances(spec)), "priority": spec.priority,
        "cpu": sum(t.resources.cpu for t in spec.tasks), "mem_mb": sum(t.resources.mem_mb for t in spec.tasks),
    }
    if as_json:
        _print_json(summary)
    else:
        out.print(f"{config}: valid {spec.type} job {spec.name!r}, {spec.instance_count} instances in "
                  f"{summary['gangs']} gangs, {_amount(summary['cpu'])} cpu and {_amount(summary['mem_mb'])} MB in all", highlight=False)


@job_app.command("create")
def job_create(
    pool: str = typer.Argument(..., help="Resource pool path, e.g. /DefaultResPool"),
    config: Path = typer.Argument(..., help="Peloton job YAML"),
    wait: bool = typer.Option(False, "--wait", help="Wait until the job ends, showing progress."),
    timeout: float = typer.Option(600, help="Seconds to wait with --wait."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Validate a job file and submit it to POOL; with --wait, follow it to the end."""
    from peloton.admin import UserError, submit_job

    try:
        job_id = _broker_call(submit_job, _settings(), _store(), pool, _read(config))
    except UserError as exc:
        _fail(f"{config}: {exc}", EXIT_INVALID)
    if not wait:
        _print_json({"job_id": job_id}) if as_json else out.print(job_id)
        return
    if not as_json:
        out.print(f"job {job_id} submitted to {pool}", highlight=False)
    _follow(job_id, timeout, as_json)


def _follow(job_id: str, timeout: float, as_json: bool) -> None:
    """Wait for a job to end with a progress bar; exit 0 SUCCEEDED, 1 other end, 4 timed out."""
    from peloton.model.states import JOB_TERMINAL
    from peloton.watch import wait_for_jobs

    results = wait_for_jobs(_store(), [job_id], timeout, None if as_json else out)
    state = results[job_id]["state"]
    if as_json:
        _print_json(results[job_id])
    else:
        out.print(f"job {job_id} {state}", highlight=False)
    if state not in JOB_TERMINAL:
        raise typer.Exit(EXIT_TIMEOUT)
    if state != "SUCCEEDED":
        raise typer.Exit(EXIT_FAILED)


@job_app.command("status")
def job_status(
    job_id: str,
    wait: bool = typer.Option(False, "--wait", help="Follow the job to its end, showing progress."),
    timeout: float = typer.Option(600, help="Seconds to wait with --wait."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """A job's state, its tasks' states, and why it waits; with --wait, follow it to the end."""
    from peloton.watch import job_summary

    store = _store()
    summary = job_summary(store, job_id, _settings())
    if summary is None:
        _fail(f"no job {job_id}", EXIT_NOT_FOUND)
    if wait:
        _follow(job_id, timeout, as_json)
        return
    if as_json:
        _print_json(summary)
        return
    out.print(f"job {summary['job_id']} ({summary['name']}) in {summary['pool']}: [bold]{summary['state']}[/bold]",
              highlight=False)
    out.print("tasks: " + ", ".join(f"{k} {v}" for k, v in sorted(summary["tasks"].items())), highlight=False)
    # Gangs of a job mostly wait for one reason: said once, with how many.
    same: dict[str, list[dict]] = {}
    for w in summary.get("waiting", []):
        same.setdefault(re.sub(r" for \d+(\.\d+)?s\b", "", w["reason"]), []).append(w)
    for reason, gangs in same.items():
        tasks = sum(w["tasks"] for w in gangs)
        which = f"gang {gangs[0]['gang_id']}" if len(gangs) == 1 else f"{len(gangs)} gangs from {gangs[0]['gang_id']}"
        out.print(f"waiting: {which} ({tasks} tasks): {reason if len(gangs) > 1 else gangs[0]['reason']}",
                  highlight=False)
    for u in summary.get("unplaced", []):
        out.print(f"instance {u['instance']} found no host: {u['message']}", highlight=False)
    for f in summary.get("failures", []):
        out.print(f"instance {f['instance']} run {f['run_id']} {f['state']}: {f['message'] or f['reason']}",
                  highlight=False)


def _control(kind: str, job_id: str, instances: str | None, batch_size: int = 0, config: str | None = None) -> dict:
    from peloton.admin import control_job

    return _broker_call(_pool_change, control_job, kind, job_id, instances, batch_size, config)


@job_app.command("stop")
def job_stop(job_id: str, instances: Optional[str] = typer.Option(None, "--instances", help="Ranges, e.g. 0-3,7."),
             wait: bool = typer.Option(False, "--wait", help="Wait until every stopped task has ended."),
             timeout: float = typer.Option(120, help="Seconds to wait with --wait."),
             as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """Stop a job (or some of its instances): their tasks are killed on their hosts, process and
    children, and their resources released; the job ends KILLED when every task has ended."""
    done = _control("STOP", job_id, instances)
    if wait:
        _wait_tasks(job_id, done["instances"], lambda t: t.state in ("KILLED", "SUCCEEDED", "FAILED", "LOST"),
                    timeout)
    if as_json:
        _print_json(done)
    else:
        out.print(f"job {job_id}: stopping {len(done['instances'])} tasks", highlight=False)


@job_app.command("start")
def job_start(job_id: str, instances: Optional[str] = typer.Option(None, "--instances", help="Ranges, e.g. 0-3,7."),
              as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """Run stopped (KILLED) instances of a job again, each as a new run."""
    done = _control("START", job_id, instances)
    if as_json:
        _print_json(done)
    else:
        out.print(f"job {job_id}: starting {len(done['instances'])} tasks again", highlight=False)


@job_app.command("restart")
def job_restart(job_id: str, instances: Optional[str] = typer.Option(None, "--instances", help="Ranges, e.g. 0-3,7."),
                batch_size: int = typer.Option(0, "--batch-size", help="Tasks replaced at a time (0: all at once)."),
                as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """Replace running tasks with new runs, BATCH-SIZE at a time: the next batch goes once the
    last one's new runs are running."""
    done = _control("RESTART", job_id, instances, batch_size)
    if as_json:
        _print_json(done)
    else:
        out.print(f"job {job_id}: restarting {len(done['instances'])} tasks", highlight=False)


@job_app.command("update")
def job_update(job_id: str, config: Path, batch_size: int = typer.Option(
        0, "--batch-size", help="Tasks replaced at a time when their config changed (default: updateConfig.batchSize, "
                                "else all at once)."),
               as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """A new config version for a job: more instances start, and tasks whose config changed are
    replaced by new runs in batches. name, type and pool cannot change; instanceCount only grows;
    changeLog.version, when given, must be the job's current version."""
    done = _control("UPDATE", job_id, None, batch_size, _read(config))
    if as_json:
        _print_json(done)
    else:
        added = done.get("added", [])
        new = f"{len(added)} new instance{'' if len(added) == 1 else 's'}"
        if added:
            new += f" ({added[0]}-{added[-1]})" if len(added) > 1 else f" ({added[0]})"
        out.print(f"job {job_id}: updating, {new}, {len(done['instances'])} tasks to replace", highlight=False)


@job_app.command("delete")
def job_delete(job_id: str) -> None:
    """Delete a terminal job with its tasks and their events."""
    _control("DELETE", job_id, None)
    out.print(f"job {job_id}: deleted", highlight=False)


def _wait_tasks(job_id: str, instances: list[int], done, timeout: float) -> None:
    import time

    store, wanted = _store(), set(instances)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(done(t) for t in store.tasks_of_job(job_id) if t.instance in wanted):
            return
        time.sleep(0.2)
    _fail(f"job {job_id}: tasks still running after {timeout:g}s", EXIT_TIMEOUT)


@job_app.command("get")
def job_get(job_id: str, as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """A job's config (as submitted) and runtime: state, times, task counts."""
    import yaml

    store = _store()
    job = store.get_job(job_id)
    if job is None:
        _fail(f"no job {job_id}", EXIT_NOT_FOUND)
    counts = store.task_state_counts([job_id])[job_id]
    runtime = {"state": job.state, "config_version": job.config_version, "rollout": job.rollout,
               "created_ms": job.created_ms, "updated_ms": job.updated_ms,
               "completed_ms": job.completed_ms, "tasks": counts}
    info = {"job_id": job_id, "name": job.name, "pool": job.pool, "type": job.type, "owner": job.owner,
            "instances": job.instance_count, "priority": job.priority, "preemptible": job.preemptible,
            "revocable": job.revocable, "runtime": runtime}
    try:
        info["config"] = yaml.safe_load(job.config_text)
    except yaml.YAMLError:
        info["config"] = job.config_text
    if as_json:
        _print_json(info)
    else:
        sys.stdout.write(yaml.safe_dump(info, sort_keys=False))


@job_app.command("query")
def job_query(state: list[str] = typer.Option([], "--state", help="A job state; repeat for several."),
              pool: Optional[str] = typer.Option(None, "--pool", help="Only jobs of this pool, e.g. /team."),
              owner: Optional[str] = typer.Option(None, "--owner", help="Only jobs of this owner (the config's owner)."),
              name: Optional[str] = typer.Option(None, "--name", help="Only jobs with this name."),
              label: list[str] = typer.Option([], "--label", help="KEY=VALUE; repeat for several (all must match)."),
              limit: int = typer.Option(100, "--limit", help="At most this many jobs."), as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """Jobs by state, pool, owner, name and labels, the most recent first."""
    from peloton.model.jobconfig import JobConfigError, parse_job_config
    from peloton.model.states import JOB_STATES

    states = [s.upper() for s in state]
    unknown = [s for s in states if s not in JOB_STATES]
    if unknown:
        _fail(f"--state {unknown[0]}: job states are {', '.join(JOB_STATES)}", EXIT_INVALID)
    wanted = _key_values(label, "--label")
    store = _store()
    # Labels live in the job's config: filter on them after the store's own filters.
    jobs = store.list_jobs(limit if not wanted else max(limit, 10_000), states=states or None, pool=pool,
                           owner=owner, name=name)
    if wanted:
        def labels_of(text: str) -> dict:
            try:
                return dict(parse_job_config(text).labels)
            except JobConfigError:
                return {}
        jobs = [j for j in jobs if wanted.items() <= labels_of(j.config_text).items()][:limit]
    rows = [{"job_id": j.job_id, "name": j.name, "pool": j.pool, "owner": j.owner, "state": j.state,
             "instances": j.instance_count, "created_ms": j.created_ms} for j in jobs]
    if as_json:
        _print_json(rows)
        return
    table = Table("job", "name", "pool", "owner", "state", "instances")
    for r in rows:
        table.add_row(r["job_id"], r["name"], r["pool"], r["owner"], r["state"], str(r["instances"]))
    out.print(table)


@job_app.command("list")
def job_list(limit: int = typer.Option(20, "--limit", help="At most this many jobs."), as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """The most recent jobs."""
    jobs = _store().list_jobs(limit)
    rows = [{"job_id": j.job_id, "name": j.name, "pool": j.pool, "state": j.state, "instances": j.instance_count,
             "created_ms": j.created_ms} for j in jobs]
    if as_json:
        _print_json(rows)
        return
    table = Table("job", "name", "pool", "state", "instances")
    for r in rows:
        table.add_row(r["job_id"], r["name"], r["pool"], r["state"], str(r["instances"]))
    out.print(table)


@task_app.command("list")
def task_list(job_id: str, as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """Every task of a job: instance, run, state, host, exit code, reason."""
    tasks = _store().tasks_of_job(job_id)
    if not tasks:
        _fail(f"no job {job_id}", EXIT_NOT_FOUND)
    rows = [{"instance": t.instance, "run_id": t.run_id, "task_id": t.task_id, "state": t.state, "host": t.host_id,
             "exit_code": t.exit_code, "reason": t.reason, "message": t.message} for t in tasks]
    if as_json:
        _print_json(rows)
        return
    table = Table("instance", "run", "state", "host", "exit", "message")
    for r in rows:
        table.add_row(str(r["instance"]), str(r["run_id"]), r["state"], r["host"],
                      "" if r["exit_code"] is None else str(r["exit_code"]), r["message"])
    out.print(table)


@task_app.command("get")
def task_get(job_id: str, instance: int, as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """One task: its current run, state, host, exit code, reason and message."""
    task = next((t for t in _store().tasks_of_job(job_id) if t.instance == instance), None)
    if task is None:
        _fail(f"no instance {instance} of job {job_id}", EXIT_NOT_FOUND)
    info = {"job_id": job_id, "instance": instance, "run_id": task.run_id, "task_id": task.task_id,
            "state": task.state, "host": task.host_id, "exit_code": task.exit_code, "signal": task.signal,
            "reason": task.reason, "message": task.message, "failures": task.failures,
            "max_failures": task.max_failures, "resources": task.spec.get("resources", {})}
    if as_json:
        _print_json(info)
    else:
        for key, value in info.items():
            out.print(f"{key:12} {value}", highlight=False)


@task_app.command("events")
def task_events(job_id: str, instance: int, as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """Every state change of every run of one task: time, run, state, host, reason, message, exit code."""
    import datetime

    store = _store()
    if store.get_job(job_id) is None:
        _fail(f"no job {job_id}", EXIT_NOT_FOUND)
    events = [e for e in store.task_events(job_id) if e["instance"] == instance]
    if as_json:
        _print_json(events)
        return
    table = Table("time", "run", "state", "host", "reason", "exit", "message")
    for e in events:
        at = datetime.datetime.fromtimestamp(e["timestamp_ms"] / 1000).strftime("%H:%M:%S.%f")[:-3]
        table.add_row(at, str(e["run_id"]), e["state"], e["host_id"] or "", e["reason"] or "",
                      "" if e["exit_code"] is None else str(e["exit_code"]), e["message"] or "")
    out.print(table)


@task_app.command("logs")
def task_logs(job_id: str, instance: int, run: Optional[int] = typer.Option(None, "--run", help="Run id (default: the current run)."),
              stderr: bool = typer.Option(False, "--stderr", help="Standard error instead of standard output."),
              tail: int = typer.Option(0, "--tail", help="Only the last N lines (0: all).")) -> None:
    """A task run's standard output (or error), from its sandbox on this machine."""
    from stages.launch.agents.local import sandbox_path

    settings = _settings()
    task = next((t for t in _store().tasks_of_job(job_id) if t.instance == instance), None)
    if task is None:
        _fail(f"no instance {instance} of job {job_id}", EXIT_NOT_FOUND)
    run_id = run or task.run_id
    if not 1 <= run_id <= task.run_id:
        _fail(f"instance {instance} of job {job_id} has runs 1-{task.run_id}", EXIT_NOT_FOUND)
    task_id = f"{job_id}-{instance}-{run_id}"
    path = sandbox_path(Path(settings.home) / "sandboxes", task_id) / ("stderr" if stderr else "stdout")
    if not path.exists():
        where = f" (it ran on host {task.host_id})" if task.host_id and run_id == task.run_id else ""
        _fail(f"no {'stderr' if stderr else 'stdout'} of task {task_id} on this machine{where}: a task that has not "
              "started, or ran on a simulated host or another machine, has none here", EXIT_NOT_FOUND)
    data = path.read_bytes()
    if tail > 0:
        data = b"\n".join(data.rstrip(b"\n").split(b"\n")[-tail:]) + b"\n"
    sys.stdout.buffer.write(data)


# -- operators ---------------------------------------------------------------------------------
_STATUS_STYLE = {"OK": "green", "WARN": "yellow", "STALL": "red", "STOP": "red", "ERR": "bold red"}


@app.command("lag")
def lag(
    group: list[str] = typer.Option([], "--group", help="A stage (admit, entitle, place, launch) or group name; "
                                    "repeat for several. Default: every stage."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
    watch: bool = typer.Option(False, "--watch", help="Refresh until Ctrl-C."),
    interval: float = typer.Option(2.0, help="Seconds between samples."),
    window: int = typer.Option(10, help="Samples the status word looks back over."),
) -> None:
    """Consumer lag per stage group, topic and partition: committed and log-end offsets, lag, lag in
    seconds, held messages, and a status word (OK, WARN, STALL, STOP, ERR) in Burrow's manner.

    Without --watch it samples twice, INTERVAL apart, so the status can see movement. Messages a
    stage holds back (gangs waiting for a host) are counted as held, and demand queued in a
    pool as queued: neither is a backlog."""
    import time

    from peloton.lag import STAGES, LagMonitor, stage_of

    settings = _settings()
    stages = []
    for g in group or STAGES:
        stage = stage_of(settings, g)
        if stage is None:
            _fail(f"--group {g!r}: not a stage group (stages: {', '.join(STAGES)})", EXIT_INVALID)
        stages.append(stage)
    monitor = _broker_call(LagMonitor, settings, tuple(stages), window)
    try:
        if not watch:
            _broker_call(monitor.sample)
            time.sleep(interval)
            report = _broker_call(monitor.sample)
            _print_json(report) if as_json else out.print(_lag_view(report))
            return
        from rich.live import Live

        with Live(console=out, auto_refresh=False) as live:
            while True:
                report = _broker_call(monitor.sample)
                if as_json:
                    print(json.dumps(report), flush=True)
                else:
                    live.update(_lag_view(report), refresh=True)
                time.sleep(interval)
    except KeyboardInterrupt:
        pass
    finally:
        monitor.close()


def _lag_view(report: dict):
    from rich.console import Group

    table = Table("group", "status", "topic", "partition", "current", "log end", "lag", "lag s", "held")
    for g in report["groups"]:
        style = _STATUS_STYLE.get(g["status"], "")
        table.add_row(f"[bold]{g['group']}[/bold]", f"[{style}]{g['status']}[/{style}]", "", "",
                      "", "", f"[bold]{g['total_lag']:,}[/bold]", f"{g['max_lag_seconds']:.1f}", f"{g['held']:,}")
        for p in g["partitions"]:
            if p["current_offset"] is None and p["log_end_offset"] == 0:
                continue  # never written to: nothing to say (--json lists it)

            def num(v):
                return "?" if v is None else f"{v:,}"
            table.add_row("", "", p["topic"], str(p["partition"]), num(p["current_offset"]), num(p["log_end_offset"]),
                          num(p["lag"]), "?" if p["lag_seconds"] is None else f"{p['lag_seconds']:.1f}", num(p["held"]))
    parts = [table]
    queued = [q for q in report["queued"] if q["queued_gangs"]]
    if queued:
        pools = Table("pool", "queued gangs", "queued cpu", "queued mem_mb", title="demand queued in pools (not lag)")
        for q in queued:
            pools.add_row(q["pool"], f"{q['queued_gangs']:,}", f"{q['demand']['cpu']:,.6g}", f"{q['demand']['mem_mb']:,.0f}")
        parts.append(pools)
    return Group(*parts)


@app.command("dashboard")
def dashboard(
    port: int = typer.Option(8080, help="Port to serve on (0: any free port)."),
    host: str = typer.Option("127.0.0.1", help="Address to serve on (0.0.0.0: every interface)."),
    every: float = typer.Option(2.0, "--every", help="Seconds between samples of lag, pools, jobs and hosts."),
) -> None:
    """A web page of the cluster: per-stage lag and throughput over time, pools' entitlement against
    allocation and demand, jobs and their tasks by state, hosts, and why pending tasks wait.
    It reads what the other commands read (the broker and the store). Ctrl-C stops it."""
    from peloton.dashboard.server import serve

    try:
        running = serve(_settings(), _store(), port=port, host=host, sample_every_s=every)
    except OSError as exc:
        _fail(f"cannot serve on {host}:{port}: {exc.strerror or exc}", EXIT_UNAVAILABLE)
    out.print(f"dashboard at {running.url} (Ctrl-C stops it)", highlight=False)
    try:
        running.wait()
    except KeyboardInterrupt:
        pass
    finally:
        running.close()


def _letters_call(fn, *args):
    from peloton.admin import NotFound, UserError

    try:
        return _broker_call(fn, *args)
    except NotFound as exc:
        _fail(str(exc), EXIT_NOT_FOUND)
    except UserError as exc:
        _fail(str(exc), EXIT_INVALID)
    except (TimeoutError, ConnectionError) as exc:
        _fail(str(exc), EXIT_UNAVAILABLE)


def _since(text: str | None) -> int | None:
    """--since: seconds, minutes, hours or days ago (30s, 10m, 2h, 1d), as epoch ms."""
    import time

    if text is None:
        return None
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    try:
        amount, unit = float(text[:-1]), units[text[-1]]
    except (KeyError, ValueError, IndexError):
        _fail(f"--since {text!r}: expected a number and a unit, as 30s, 10m, 2h or 1d", EXIT_INVALID)
    return int((time.time() - amount * unit) * 1000)


@letters_app.command("list")
def letters_list(
    since: Optional[str] = typer.Option(None, "--since", help="Only letters from this long ago: 30s, 10m, 2h, 1d."),
    stage: Optional[str] = typer.Option(None, "--stage", help="Only letters from this stage (admit, launch, ...)."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Every dead letter: number, time, stage, source topic, partition, offset, reason."""
    import datetime

    from peloton.deadletters import list_letters

    rows = _letters_call(list_letters, _settings(), _since(since), stage)
    if as_json:
        _print_json(rows)
        return
    if not rows:
        out.print("no dead letters" + (" matching" if since or stage else ""))
        return
    table = Table("#", "time", "stage", "source", "reason")
    for r in rows:
        at = datetime.datetime.fromtimestamp(r["time_ms"] / 1000).strftime("%Y-%m-%d %H:%M:%S")
        reason = r["reason"] if len(r["reason"]) <= 160 else r["reason"][:157] + "..."
        table.add_row(str(r["number"]), at, r["stage"], f"{r['source_topic']}[{r['partition']}]@{r['offset']}", reason)
    out.print(table)


@letters_app.command("show")
def letters_show(number: str, as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """One dead letter whole: where it came from, why, and the original message decoded where possible."""
    from peloton.deadletters import find_letter, show

    shown = show(_letters_call(find_letter, _settings(), number))
    if as_json:
        _print_json(shown)
        return
    for field in ("number", "stage", "source_topic", "partition", "offset", "key", "reason"):
        out.print(f"[bold]{field:<13}[/bold] {shown[field]}", highlight=False)
    original = shown["original"]
    if original["schema"]:
        out.print(f"[bold]{'schema':<13}[/bold] {original['schema']}", highlight=False)
        for field, value in original["value"].items():
            text = value if isinstance(value, str) else json.dumps(value)
            if "\n" in text:
                out.print(f"[bold]{field}[/bold]:", highlight=False)
                out.print(text.rstrip("\n"), highlight=False, markup=False)
            else:
                out.print(f"[bold]{field:<13}[/bold] {text}", highlight=False, markup=False)
    else:
        out.print(f"[bold]{'original':<13}[/bold] ", end="", highlight=False)
        out.print(f"not decodable: {original['error']}", highlight=False, markup=False)
        if original.get("text") is not None:
            out.print(original["text"], highlight=False, markup=False)


@letters_app.command("replay")
def letters_replay(
    number: str,
    value: Optional[Path] = typer.Option(None, "--value", help="JSON file: the whole fixed record (as `show --json` "
                                         "prints under original.value)."),
    set_fields: list[str] = typer.Option([], "--set", help="FIELD=VALUE or FIELD=@FILE: replace one field of the "
                                         "record, e.g. --set config=@fixed.yaml; repeat for several."),
    schema: Optional[str] = typer.Option(None, "--schema", help="The record's schema, when the original cannot be "
                                         "decoded (e.g. peloton.JobCommand)."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Send a dead letter's message back to its topic, fixed with --value or --set (or as it was,
    when what refused it has changed, e.g. its pool now exists)."""
    from peloton.deadletters import find_letter, replay

    record = None
    if value is not None:
        try:
            record = json.loads(_read(value))
        except ValueError as exc:
            _fail(f"--value {value}: not JSON: {exc}", EXIT_INVALID)
        if isinstance(record, dict) and isinstance(record.get("original"), dict):  # a whole `show --json`
            record = record["original"].get("value")
        if not isinstance(record, dict):
            _fail(f"--value {value}: expected a JSON object (the record)", EXIT_INVALID)
    sets = {k: (_read(Path(v[1:])) if v.startswith("@") else v) for k, v in _key_values(set_fields, "--set").items()}
    settings = _settings()
    letter = _letters_call(find_letter, settings, number)
    sent = _letters_call(replay, settings, letter, record, sets, schema)
    if as_json:
        _print_json(sent)
    else:
        out.print(f"dead letter {sent['number']} sent again to {sent['topic']}[{sent['partition']}] as "
                  f"{sent['schema'] or 'its original bytes'} ({sent['bytes']:,} bytes)", highlight=False)


# -- cluster -----------------------------------------------------------------------------------
@cluster_app.command("status")
def cluster_status(
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    timeout: float = typer.Option(5.0, help="Seconds to wait for ZooKeeper."),
) -> None:
    """Every registered instance on any machine, from ZooKeeper (PELOTON_ZOOKEEPER).

    Per instance: kind, instance id, host, pid, partitions, metrics address, age."""
    import time

    from peloton.registry import Registry, RegistryUnavailable

    hosts = _settings().zookeeper.strip()  # PELOTON_ZOOKEEPER, else a running dev stack's
    if not hosts:
        _fail("PELOTON_ZOOKEEPER is not set: set it to the ZooKeeper the cluster registers in (e.g. "
              "zk1:2181,zk2:2181, optionally ending in a chroot path such as /peloton); for a local dev "
              "stack `pelotonctl dev status` shows what runs (`dev up --store postgres` starts a ZooKeeper)",
              EXIT_UNAVAILABLE)
    try:
        with Registry(hosts, timeout=timeout) as registry:
            rows = registry.instances()
    except RegistryUnavailable as exc:
        _fail(str(exc), EXIT_UNAVAILABLE)
    now = time.time()
    for r in rows:
        started = r.get("started_ms")
        r["age_s"] = round(now - started / 1000, 1) if isinstance(started, (int, float)) else None
    if as_json:
        _print_json(rows)
        return
    if not rows:
        out.print(f"no instances are registered in ZooKeeper at {hosts}", highlight=False)
        return
    table = Table("kind", "instance", "host", "pid", "partitions", "metrics", "age")
    for r in rows:
        table.add_row(r["kind"], r["instance_id"], str(r.get("host") or ""), str(r.get("pid") or ""),
                      _cluster_partitions(r.get("partitions")), str(r.get("metrics") or ""),
                      _cluster_age(r["age_s"]) if r.get("error") is None else f"[red]{r['error']}[/red]")
    out.print(table)


@cluster_app.command("targets")
def cluster_targets(output: Optional[Path] = typer.Option(None, "--output", help="Write here (atomically) "
                                                          "instead of printing.")) -> None:
    """Every instance's metrics address as Prometheus file_sd targets (see docker/prometheus.yml):
    from ZooKeeper when PELOTON_ZOOKEEPER is set, else from the running dev stack."""
    import os
    from urllib.parse import urlparse

    settings = _settings()
    if settings.zookeeper.strip():
        from peloton.registry import Registry, RegistryUnavailable

        try:
            with Registry(settings.zookeeper) as registry:
                rows = registry.instances()
        except RegistryUnavailable as exc:
            _fail(str(exc), EXIT_UNAVAILABLE)
        found = [(r["kind"], r["instance_id"], r.get("metrics")) for r in rows]
    else:
        from peloton.devstack import DevStack

        found = [(c["component"], c.get("instance") or c["component"], c.get("metrics"))
                 for c in DevStack(settings).status() if c["running"]]
    # "component", not "kind": metrics have a label kind of their own (a resource or preemption kind).
    targets = [{"targets": [urlparse(url).netloc], "labels": {"component": kind, "instance_id": instance,
                                                              "__metrics_path__": urlparse(url).path or "/metrics"}}
               for kind, instance, url in found if url]
    text = json.dumps(targets, indent=2) + "\n"
    if output is None:
        sys.stdout.write(text)
        return
    temporary = output.with_name(output.name + ".tmp")
    temporary.write_text(text)
    os.replace(temporary, output)  # Prometheus never reads a half-written file


def _cluster_ranges(numbers: list[int]) -> str:
    """[0, 1, 2, 5] -> "0-2,5"."""
    spans: list[list[int]] = []
    for n in sorted(set(numbers)):
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def _cluster_partitions(value) -> str:
    """An instance's partitions as registered: a list of numbers, a list of [topic, partition]
    pairs, or {topic: [partitions]}; shown as "topic 0-3; other 1"."""
    if not value:
        return ""
    try:
        if isinstance(value, dict):
            by_topic = {str(t): list(ps) for t, ps in value.items()}
        elif all(isinstance(v, int) for v in value):
            return _cluster_ranges(value)
        else:
            by_topic = {}
            for topic, partition in value:
                by_topic.setdefault(str(topic), []).append(int(partition))
        return "; ".join(f"{t} {_cluster_ranges(ps)}" for t, ps in sorted(by_topic.items()))
    except (TypeError, ValueError):
        return str(value)


def _cluster_age(seconds: float | None) -> str:
    if seconds is None:
        return ""
    s = max(int(seconds), 0)
    for unit, size, sub, sub_size in (("d", 86400, "h", 3600), ("h", 3600, "m", 60), ("m", 60, "s", 1)):
        if s >= size:
            return f"{s // size}{unit}{(s % size) // sub_size:02d}{sub}"
    return f"{s}s"


def main() -> None:
    import logging

    from peloton.store import STORE_UNAVAILABLE

    # The connection pool's retries would print a warning each: the one line below says it.
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
    try:
        app()
    except STORE_UNAVAILABLE as exc:  # any command: one line naming what is away, exit 5
        try:
            where = _masked(Settings.from_env().store)
        except ValueError:
            where = "PELOTON_STORE"
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        err.print(f"[red]error:[/red] the store at {where} is unavailable: {first}", highlight=False, soft_wrap=True)
        sys.exit(EXIT_UNAVAILABLE)


def _masked(url: str) -> str:
    """A store URL without its password, for messages."""
    return re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", url)


if __name__ == "__main__":
    main()
