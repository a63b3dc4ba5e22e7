"""pelotonctl auth: the API's tokens, issued and revoked in the store (the operator's way in,
before any token exists)."""

from __future__ import annotations

import datetime
import sys

import typer
from rich.table import Table

from pelotonctl.cli.common import EXIT_INVALID, EXIT_NOT_FOUND, JSON_HELP, commands, fail, open_store, out, print_json

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
    from peloton.auth.tokens import issue
    from peloton.runtime import now_ms

    try:
        token, row = issue(user, group, admin, now_ms())
    except ValueError as exc:
        fail(str(exc), EXIT_INVALID)
    open_store().add_token(row)
    if as_json:
        print_json({"token": token, "token_id": row.token_id, "user": row.user, "groups": list(row.groups),
                    "admin": row.admin})
    else:
        sys.stdout.write(token + "\n")


@auth_app.command("revoke")
def auth_revoke(token_id: str = typer.Argument(..., help="The token's id (`auth list`), or the token itself.")) -> None:
    """Revoke a token: the API refuses it from now on."""
    from peloton.auth.tokens import TokenError, token_id_of
    from peloton.runtime import now_ms

    try:
        token_id = token_id_of(token_id)
    except TokenError:
        pass  # an id, not a whole token
    if not open_store().revoke_token(token_id, now_ms()):
        fail(f"no token {token_id} that is not revoked already (see `pelotonctl auth list`)", EXIT_NOT_FOUND)
    out.print(f"token {token_id} revoked", highlight=False)


@auth_app.command("list")
def auth_list(as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """Every token: id, user, groups, admin, when issued and revoked (never the token itself)."""
    rows = [{"token_id": t.token_id, "user": t.user, "groups": list(t.groups), "admin": t.admin,
             "created_ms": t.created_ms, "revoked_ms": t.revoked_ms} for t in open_store().list_tokens()]
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
