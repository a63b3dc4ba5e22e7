"""pelotonctl host: hosts and their maintenance."""

from __future__ import annotations

import sys

import typer

from pelotonctl.cli.common import (
    EXIT_INVALID,
    JSON_HELP,
    amount,
    checked,
    client,
    cluster_call,
    commands,
    fail,
    print_json,
)
from pelotonctl.cli.hostpool import hostpool_app

host_app = commands("Hosts: list them, query them by state, drain them for maintenance.")
maintenance_app = commands("Host maintenance: drain a host, bring it back.")
host_app.add_typer(maintenance_app, name="maintenance")


@host_app.command("list")
def host_list(as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """Every host: state (UP, DRAINING, DRAINED, DOWN), free and total room, runs, labels. A host
    whose agent is silent shows '?' for its runs and free room: what still runs there is unknown.
    Under a DRAINING host, each run that stays for now and why (its job's
    sla.maximumUnavailableInstances)."""
    _print_hosts(cluster_call(client().hosts), as_json)


@host_app.command("query")
def host_query(states: list[str] = typer.Option(
        [], "--states", "--state", "-s", help="Host states, e.g. HOST_STATE_DRAINING,HOST_STATE_DRAINED (Peloton's "
                                              "words) or DRAINING,DRAINED; any may match. Default: every host."),
        as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """Hosts by state, as Peloton's `host query`: its HOST_STATE_UP, DRAINING, DRAINED and DOWN
    are ours (UP; DRAINING: maintenance started, its runs moving away; DRAINED: none left; DOWN: in
    maintenance, or its agent silent past PELOTON_AGENT_TIMEOUT_S). Shown as `host list` shows them."""
    from pelotonctl.queries import host_states, words

    wanted = checked(host_states, words(states))
    _print_hosts(cluster_call(client().hosts, wanted or None), as_json)


def _print_hosts(hosts: list[dict], as_json: bool) -> None:
    if as_json:
        print_json({"hosts": hosts})
        return
    sys.stdout.write(f"{'HOST':<16} {'STATE':<9} {'TASKS':>5} {'CPU FREE/TOTAL':>15} {'MEM_MB FREE/TOTAL':>19}  "
                     "LABELS\n")
    for h in hosts:
        labels = ",".join(f"{k}={v}" for k, v in sorted(h["labels"].items()) if k != "hostname")
        free = h["free"] or {}  # None: its agent is silent, its runs unknown ('?')
        cpu = f"{amount(free.get('cpu'))}/{amount(h['total']['cpu'])}"
        mem = f"{amount(free.get('mem_mb'))}/{amount(h['total']['mem_mb'])}"
        tasks = "?" if h["tasks"] is None else h["tasks"]
        sys.stdout.write(f"{h['host_id']:<16} {h['state']:<9} {tasks:>5} {cpu:>15} {mem:>19}  {labels}\n")
        slack = h.get("slack")
        if slack and (slack["lent_cpu"] or slack["revocable_cpu"]):  # revocable runs' cpu is on slack
            sys.stdout.write(f"{'':<16} slack: {amount(slack['free_cpu'])} cpu free for revocable runs "
                             f"({amount(slack['lent_cpu'])} lent by runs that do not use it, "
                             f"{amount(slack['revocable_cpu'])} held by revocable runs)\n")
        for why in h.get("waiting", []):  # a drain held back by a job's disruption budget
            sys.stdout.write(f"{'':<16} waits: {why}\n")


def _maintenance(hosts: str, action: str, said: str, state: str, force: bool = False, as_json: bool = False) -> None:
    """One host, or Peloton's comma-separated list, one after the other: the first refused stops
    the rest, and what was done before it is said (with --json, the hosts done, then the error)."""
    named = [h for h in (part.strip() for part in hosts.split(",")) if h]
    if not named:
        fail(f"no host named in {hosts!r}", EXIT_INVALID)
    cluster, done = client(), []
    try:
        for host_id in named:
            cluster_call(cluster.maintenance, host_id, action, force)
            done.append({"host_id": host_id, "action": action, "state": state})
            if not as_json:
                sys.stdout.write(f"host {host_id}: {said}\n")
                sys.stdout.flush()
    finally:
        if as_json:
            print_json({"hosts": done})


@maintenance_app.command("start")
def maintenance_start(hosts: str = typer.Argument(..., metavar="HOST[,HOST...]"), force: bool = typer.Option(
        False, "--force", help="Drain even the last UP host, or beyond PELOTON_MAX_DRAIN_SHARE of the hosts."),
        as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """Drain each HOST (one, or Peloton's h1,h2): it takes no new placements, its tasks are killed
    and run elsewhere (no more of a job's instances down at once than its
    sla.maximumUnavailableInstances), then it is DRAINED and DOWN (see `host list`). Refused for
    the last UP host, or when more than PELOTON_MAX_DRAIN_SHARE (50%) of the hosts would be in
    maintenance at once, unless --force; a refusal stops the hosts after it."""
    _maintenance(hosts, "START", "maintenance started (DRAINING)", "DRAINING", force, as_json)


@maintenance_app.command("complete")
def maintenance_complete(hosts: str = typer.Argument(..., metavar="HOST[,HOST...]"),
                         as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """Bring each HOST (one, or Peloton's h1,h2) back UP after maintenance."""
    _maintenance(hosts, "COMPLETE", "maintenance complete (UP)", "UP", as_json=as_json)


# Peloton's `hostmgr hosts`: hosts by what they have free, at least (or, with --less, below) the
# amounts given, each amount 0 left out of the comparison.
hostmgr_app = commands("Peloton's host manager commands: hosts by their free resources, host pools.")
hostmgr_app.add_typer(hostpool_app, name="hostpool")


@hostmgr_app.command("hosts")
def hostmgr_hosts(cpu: float = typer.Option(0, "--cpu", "-c", min=0, help="Free cpu to compare (0: not compared)."),
                  gpu: float = typer.Option(0, "--gpu", "-g", min=0, help="Free gpu to compare (0: not compared)."),
                  mem: float = typer.Option(0, "--mem", min=0, help="Free memory in MB to compare (0: not compared)."),
                  disk: float = typer.Option(0, "--disk", min=0, help="Free disk in MB to compare (0: not compared)."),
                  less: bool = typer.Option(False, "--less", "-l", help="Hosts with less than the amounts, rather "
                                                                         "than at least them."),
                  hostnames: str = typer.Option("", "--hosts", help="Only these hosts, comma-separated."),
                  include_revocable: bool = typer.Option(False, "--includeRevocable", "-r",
                                                         help="Accepted for Peloton's scripts: free room here is "
                                                              "the same for revocable work."),
                  as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """Hosts whose free room is at least (or, with --less, below) every amount given, as Peloton's
    `hostmgr hosts`. A host whose agent is silent has no known free room and is left out."""
    del include_revocable  # one kind of free room here
    wanted = {"cpu": cpu, "gpu": gpu, "mem_mb": mem, "disk_mb": disk}
    named = {h.strip() for h in hostnames.split(",") if h.strip()}

    def matches(h: dict) -> bool:
        free = h.get("free")
        if free is None or (named and h["host_id"] not in named):
            return False
        given = [(free.get(k) or 0.0, v) for k, v in wanted.items() if v > 0]
        return all(have < want for have, want in given) if less else all(have >= want for have, want in given)
    _print_hosts([h for h in cluster_call(client().hosts) if matches(h)], as_json)
