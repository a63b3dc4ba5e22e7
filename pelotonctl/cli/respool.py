"""pelotonctl respool: resource pools, their entitlement, and the resource manager's bench."""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.table import Table

from pelotonctl.cli.common import (
    EXIT_INVALID,
    JSON_HELP,
    amount,
    client,
    cluster_call,
    commands,
    err,
    fail,
    out,
    print_json,
    read_text,
)

pool_app = commands("Resource pools.")


@pool_app.command("create")
def respool_create(path: str, config: Path, as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """Create a resource pool at PATH (e.g. /team/batch) from a Peloton respool YAML."""
    pool = cluster_call(client().create_pool, path, read_text(config))
    if as_json:
        print_json(pool)
    else:
        out.print(f"created resource pool {path}")


@pool_app.command("update")
def respool_update(path: str, config: Path, force: bool = typer.Option(
        False, "--force", help="Store it even if it breaks a rule of the tree (Peloton's --force)."),
        as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """Replace the config of the resource pool at PATH."""
    pool = cluster_call(client().update_pool, path, read_text(config), force)
    if as_json:
        print_json(pool)
    else:
        out.print(f"updated resource pool {path}")


@pool_app.command("delete")
def respool_delete(path: str, as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """Delete a leaf resource pool with no job left to run."""
    cluster_call(client().delete_pool, path)
    if as_json:
        print_json({"path": path, "deleted": True})
    else:
        out.print(f"deleted resource pool {path}")


KIND_NAMES = ("cpu", "gpu", "memory", "disk")


@pool_app.command("get")
def respool_get(path: str, as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """A pool's reservation, limit and share, and its entitlement, allocation and demand now."""
    report = cluster_call(client().pool_report, path)
    if as_json:
        print_json(report)
        return
    out.print(f"resource pool {path}", highlight=False)
    figures = ("reservation", "limit", "share", "entitlement", "allocation", "demand")
    table = Table("kind", *figures)
    for kind in KIND_NAMES:
        table.add_row(kind, *(amount(report[f][kind]) for f in figures))
    out.print(table)
    for gang in report.get("waiting", []):
        out.print(f"  waiting: job {gang['job_id']} ({gang['tasks']} tasks): {gang['reason']}", highlight=False)


@pool_app.command("dump")
def respool_dump(as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """The pool tree with every pool's config (YAML; --json for JSON)."""
    import yaml

    tree = cluster_call(client().pool_tree)
    if as_json:
        print_json(tree)
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
    from pelotonctl.bench.resource_manager import run_resource_manager_bench

    figures = run_resource_manager_bench(err if as_json else out, fanout, levels, gangs, gang_size)
    if as_json:
        print_json(figures)


@pool_app.command("entitlement")
def respool_entitlement(input_file: Path = typer.Option(..., "--input",
                                                        help="capacity, pools and usage (YAML or JSON)"),
                        as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """Dry run of the entitlement calculation: no cluster needed. Every pool's entitlement,
    non-slack and slack entitlement, for the capacity, pools and usage in FILE."""
    from peloton.model.safe_yaml import YamlError, read_yaml
    from stages.entitle.entitlement import DryRunError, dry_run

    try:
        result = dry_run(read_yaml(read_text(input_file)))
    except (YamlError, DryRunError) as exc:
        fail(f"{input_file}: {exc}", EXIT_INVALID)
    if as_json:
        print_json(result)
        return
    table = Table("pool", "kind", "entitlement", "non-slack", "slack")
    for path, shares in result.items():
        for kind in KIND_NAMES:
            table.add_row(path, kind, *(amount(shares[f][kind]) for f in (
                "entitlement", "non_slack_entitlement", "slack_entitlement")))
    out.print(table)
