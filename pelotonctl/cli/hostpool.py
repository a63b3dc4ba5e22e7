"""pelotonctl hostmgr hostpool: Peloton's host pools (list, list-hosts, create, delete, change)."""

from __future__ import annotations

import sys

import typer

from pelotonctl.cli.common import EXIT_NOT_FOUND, JSON_HELP, client, cluster_call, commands, fail, print_json

hostpool_app = commands("Host pools: every host is in one (the 'default' one until moved); a job placed by host "
                        "pool names it in a HOST label constraint on 'host_pool'.")


@hostpool_app.command("list")
def hostpool_list(as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """Every host pool and how many hosts it has (hosts draining to join it are named after)."""
    pools = cluster_call(client().host_pools)
    if as_json:
        print_json({"pools": pools})
        return
    sys.stdout.write(f"{'Pool name':<24} Number of hosts\n")
    for p in pools:
        moving = f"  (moving in: {', '.join(p['moving_in'])})" if p["moving_in"] else ""
        sys.stdout.write(f"{p['name']:<24} {len(p['hosts']):>8}{moving}\n")


@hostpool_app.command("list-hosts")
def hostpool_list_hosts(name: str = typer.Argument(..., help="name of host pool"),
                        as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """The hosts in a host pool, sorted."""
    pool = next((p for p in cluster_call(client().host_pools) if p["name"] == name), None)
    if pool is None:
        fail(f"Pool {name!r} not found", EXIT_NOT_FOUND)
    if as_json:
        print_json({"name": name, "hosts": pool["hosts"], "moving_in": pool["moving_in"]})
        return
    for host_id in pool["hosts"]:
        sys.stdout.write(f"{host_id}\n")


@hostpool_app.command("create")
def hostpool_create(name: str = typer.Argument(..., help="name of host pool"),
                    as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """Make a host pool (administrators); it has no host until one is moved in."""
    made = cluster_call(client().create_host_pool, name)
    print_json(made) if as_json else sys.stdout.write(f"Created host pool {name!r}.\n")


@hostpool_app.command("delete")
def hostpool_delete(name: str = typer.Argument(..., help="name of host pool"),
                    as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """Delete a host pool (administrators); its hosts move to the 'default' pool."""
    moved = cluster_call(client().delete_host_pool, name)
    if as_json:
        print_json({"name": name, "deleted": True, "moved_to_default": moved})
        return
    sys.stdout.write(f"Deleted host pool {name!r}." + (f" Hosts moved to 'default': {', '.join(moved)}\n"
                                                      if moved else "\n"))


@hostpool_app.command("change")
def hostpool_change(host: str = typer.Argument(..., help="name of host"),
                    dest: str = typer.Argument(..., help="destination pool of host"),
                    source: str = typer.Option("", "--source", "-s", help="source pool of host (refused if the "
                                                                            "host is in another)"),
                    as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """Move a host to another host pool (administrators): at once when nothing runs on it;
    otherwise it drains first (its tasks run elsewhere, no more of a job's instances down at once
    than its sla.maximumUnavailableInstances), then joins DEST and is UP again."""
    moved = cluster_call(client().change_host_pool, host, dest, source)
    print_json(moved) if as_json else sys.stdout.write(f"Pool for host {host!r} changed to {dest!r}.\n")
