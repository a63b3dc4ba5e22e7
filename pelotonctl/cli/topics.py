"""pelotonctl topics: the pipeline's topics as topics.yaml gives them."""

from __future__ import annotations

import typer
from rich.table import Table

from pelotonctl.cli.common import (
    EXIT_INVALID,
    EXIT_NOT_PERMITTED,
    broker_call,
    commands,
    fail,
    load_settings,
    out,
    print_json,
)

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


@topics_app.command("acls")
def topics_acls(as_json: bool = typer.Option(False, "--json", help="Print JSON."),
                apply: bool = typer.Option(False, "--apply", help="Create them on the broker, as this process's Kafka "
                                           "user (an admin); the users themselves are made by whoever runs Kafka.")
                ) -> None:
    """The Kafka ACLs each component's user needs (from topics.yaml's written_by and read_by): what
    the dev stack grants, and what a production cluster's admin grants its principals."""
    from dataclasses import asdict

    from peloton.topics import Catalogue
    from pelotonctl.principals import GrantError, grants
    from pelotonctl.principals import apply as create_acls

    settings = load_settings()
    found = [g for user_grants in grants(Catalogue(settings.topic_prefix)).values() for g in user_grants]
    if apply:
        try:
            out.print(f"{broker_call(create_acls, settings, {})} ACLs in place", highlight=False)
        except GrantError as exc:  # the broker refused: not an admin, or no authorizer
            fail(str(exc), EXIT_NOT_PERMITTED)
        return
    if as_json:
        print_json([asdict(g) for g in found])
        return
    table = Table("user", "operation", "resource", "name", "pattern")
    for g in found:
        table.add_row(g.user, g.operation, g.resource, g.name, "prefixed" if g.prefixed else "literal")
    out.print(table)
