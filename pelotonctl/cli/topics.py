"""pelotonctl topics: the pipeline's topics as topics.yaml gives them."""

from __future__ import annotations

import typer
from rich.table import Table

from pelotonctl.cli.common import EXIT_INVALID, broker_call, commands, load_settings, out, print_json

topics_app = commands("Topics of the pipeline (topics.yaml).")


@topics_app.command("apply")
def topics_apply(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Create missing topics and set each one's config as topics.yaml gives it (idempotent)."""
    from pelotonctl.admin import ensure_topics

    report = broker_call(ensure_topics, load_settings())
    if as_json:
        print_json(report)
        return
    table = Table("topic", "partitions", "replicas", "cleanup", "status")
    for r in report:
        table.add_row(r["topic"], str(r["partitions"]), str(r["replicas"]), r["cleanup_policy"], r["status"])
    out.print(table)
    if any(r["status"].startswith("mismatch") for r in report):
        raise typer.Exit(EXIT_INVALID)
