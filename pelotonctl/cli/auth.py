"""pelotonctl auth: the API's tokens. Through the API when one is configured (an admin's token);
otherwise in the store itself, the operator's way in before any token exists."""

from __future__ import annotations

import datetime
import sys

import typer
from rich.table import Table

from pelotonctl.cli.common import JSON_HELP, client, cluster_call, commands, out, print_json

auth_app = commands("The API's identities: bearer tokens for users and their groups.")


@auth_app.command("issue")
def auth_issue(
    user: str = typer.Option(..., "--user", help="Who the token speaks for."),
    group: list[str] = typer.Option([], "--group", help="A group the user is in (repeatable); pools' owningTeam "
                                    "and ldapGroups name groups."),
    admin: bool = typer.Option(False, "--admin", help="An administrator: changes pools and hosts, acts in every pool."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Issue a token and print it, once: the store keeps only its hash."""
    made = cluster_call(client().issue_token, user, group, admin)
    if as_json:
        print_json({k: made[k] for k in ("token", "token_id", "user", "groups", "admin")})
    else:
        sys.stdout.write(made["token"] + "\n")


@auth_app.command("revoke")
def auth_revoke(token_id: str = typer.Argument(..., help="The token's id (`auth list`), or the token itself.")) -> None:
    """Revoke a token: the API refuses it from now on."""
    from peloton.auth.tokens import TokenError, token_id_of

    try:
        token_id = token_id_of(token_id)
    except TokenError:
        pass  # an id, not a whole token
    cluster_call(client().revoke_token, token_id)
    out.print(f"token {token_id} revoked", highlight=False)


@auth_app.command("list")
def auth_list(as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """Every token: id, user, groups, admin, when issued and revoked (never the token itself)."""
    rows = cluster_call(client().list_tokens)
    if as_json:
        print_json(rows)
        return

    def when(ms):
        return "" if ms is None else datetime.datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M")
    table = Table("token id", "user", "groups", "admin", "issued", "revoked")
    for r in rows:
        table.add_row(r["token_id"], r["user"], ",".join(r["groups"]), "yes" if r["admin"] else "",
                      when(r["created_ms"]), when(r["revoked_ms"]))
    out.print(table)
