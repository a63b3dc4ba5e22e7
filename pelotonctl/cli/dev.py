"""pelotonctl dev: the embedded dev stack on this machine."""

from __future__ import annotations

import sys

import typer
from rich.table import Table

from pelotonctl.cli.common import (
    EXIT_INVALID,
    EXIT_NOT_FOUND,
    EXIT_UNAVAILABLE,
    JSON_HELP,
    check_store_kind,
    commands,
    fail,
    load_settings,
    out,
    print_json,
)
from pelotonctl.dev.jvm import DEFAULT as JVM_DEFAULT
from pelotonctl.dev.jvm import KINDS as JVM_KINDS

dev_app = commands("The embedded dev stack: broker, stages and hosts on this machine.")


@dev_app.command("up")
def dev_up(
    hosts: str | None = typer.Option(None, help="Host inventory, e.g. 'agent:2:cpu=8;sim:100:cpu=32' (agent: a "
                                     "host agent process each)."),
    store: str = typer.Option("sqlite", help="sqlite (one file); postgres: a local PostgreSQL and ZooKeeper "
                                             "of the stack's own, as on several machines; cassandra: a Cassandra "
                                             "node (in .peloton/dev/cassandra) and ZooKeeper of its own."),
    instances: int = typer.Option(1, min=1, max=8, help="Instances of every stage."),
    brokers: int = typer.Option(1, min=1, max=5, help="Apache Kafka nodes (3: replication factor 3, "
                                                      "min.insync.replicas 2)."),
    jvm: str = typer.Option(JVM_DEFAULT, help="light: the broker's and Cassandra's JVMs compile with C1 alone, "
                                          "half the CPU to start; full: C2 and G1, as the bench runs them."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Start Apache Kafka (unless PELOTON_KAFKA_BOOTSTRAP is set), apply topics, create the default
    pool and start one instance of each stage with its hosts."""
    from dataclasses import replace

    from pelotonctl.dev.stack import DevStack, StackError
    from stages.launch.inventory import InventoryError, parse_inventory

    settings = load_settings()
    check_store_kind(store)
    if jvm not in JVM_KINDS:
        fail(f"--jvm: {jvm!r} is not one of {', '.join(JVM_KINDS)}", EXIT_INVALID)
    try:
        parse_inventory(hosts or settings.hosts, 1)
    except InventoryError as exc:
        fail(f"{'--hosts' if hosts else 'PELOTON_HOSTS'}: {exc}", EXIT_INVALID)
    stack = DevStack(replace(settings, hosts=hosts) if hosts else settings)
    try:
        state = stack.up(progress=(lambda m: None) if as_json else (lambda m: out.print(m, highlight=False)),
                         store=store, instances=instances, brokers=brokers, jvm=jvm)
    except StackError as exc:
        fail(str(exc), EXIT_UNAVAILABLE)
    if as_json:
        print_json(state)


@dev_app.command("restart")
def dev_restart(component: str = typer.Argument(..., help="What `dev status` lists: broker-1, admit-0, agent-0, "
                                                           "cassandra, or every one of a kind: broker, "
                                                           "admit.")) -> None:
    """Stop (if running) and start again a component of the dev stack on its existing data."""
    from pelotonctl.dev.stack import DevStack, StackError

    try:
        DevStack(load_settings()).restart(component, progress=lambda m: out.print(m, highlight=False))
    except StackError as exc:
        fail(str(exc), EXIT_NOT_FOUND if "no component" in str(exc) else EXIT_UNAVAILABLE)


@dev_app.command("status")
def dev_status(as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """What the dev stack runs: component, pid, address, running."""
    from pelotonctl.dev.stack import DevStack

    rows = DevStack(load_settings()).status()
    if as_json:
        print_json(rows)
    else:
        table = Table("component", "pid", "address", "running")
        for r in rows:
            table.add_row(r.get("instance") or r["component"], str(r["pid"]), r["address"],
                          "yes" if r["running"] else "[red]no[/red]")
        out.print(table if rows else "no dev stack is running")
    if not rows or not all(r["running"] for r in rows):
        raise typer.Exit(EXIT_UNAVAILABLE)


@dev_app.command("env")
def dev_env(kafka_user: str = typer.Option("", "--kafka-user", help="Also the broker and the credentials of "
                                           "this component's Kafka user (producer: for your own producer, with the "
                                           "token that signs its commands)."),
            as_json: bool = typer.Option(False, "--json", help="The variables as a JSON object instead.")) -> None:
    """The dev stack's API addresses (HTTP, and gRPC for Peloton's own clients) and admin token as
    shell exports, for curl and other programs: eval "$(pelotonctl dev env)"."""
    import shlex

    from pelotonctl.dev.stack import DevStack

    state = DevStack(load_settings()).read() or {}
    if not state.get("api_url"):
        fail("no dev stack with an API is running here (`pelotonctl dev up` starts one)", EXIT_UNAVAILABLE)
    exports = {"PELOTON_API_URL": state["api_url"], "PELOTON_TOKEN": state["token"]}
    if state.get("grpc"):
        exports["PELOTON_GRPC_ADDRESS"] = state["grpc"]
    if kafka_user:
        users = state.get("kafka_users") or {}
        if kafka_user not in users:
            fail(f"the dev stack's Kafka has no user {kafka_user!r}; it has: {', '.join(users) or 'none'}",
                 EXIT_INVALID)
        exports.update({"PELOTON_KAFKA_BOOTSTRAP": state["bootstrap"], "PELOTON_KAFKA_USER": kafka_user,
                        "PELOTON_KAFKA_PASSWORD": users[kafka_user], "PELOTON_KAFKA_CA": state.get("kafka_ca", "")})
        if kafka_user in (state.get("command_tokens") or {}):  # the token its job commands are signed with
            exports["PELOTON_COMMAND_TOKEN"] = state["command_tokens"][kafka_user]
    if as_json:
        print_json(exports)
    else:
        sys.stdout.write("".join(f"export {k}={shlex.quote(v)}\n" for k, v in exports.items()))


@dev_app.command("down")
def dev_down() -> None:
    """Stop the stages (each finishes its batch and commits), then the broker and the store's servers."""
    from pelotonctl.dev.stack import DevStack

    DevStack(load_settings()).down(progress=lambda m: out.print(m, highlight=False))


@dev_app.command("demo")
def dev_demo(
    keep: bool = typer.Option(False, help="Leave the stack running afterwards."),
    timeout: float = typer.Option(300, help="Seconds to wait for the jobs."),
) -> None:
    """Start the stack, run the example jobs to completion with live progress, print a summary."""
    from pelotonctl.dev.demo import run_demo

    raise typer.Exit(run_demo(load_settings(), out, keep=keep, timeout=timeout))
