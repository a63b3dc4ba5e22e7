"""pelotonctl auth: the API's tokens. Through the API when one is configured (an admin's token);
otherwise in the store itself, the operator's way in before any token exists."""

from __future__ import annotations

import contextlib
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
def auth_revoke(token_id: str = typer.Argument(..., help="The token's id (`auth list`), or the token itself."),
                as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """Revoke a token: the API refuses it from now on."""
    from peloton.auth.tokens import TokenError, token_id_of

    with contextlib.suppress(TokenError):  # an id, not a whole token
        token_id = token_id_of(token_id)
    cluster_call(client().revoke_token, token_id)
    if as_json:
        print_json({"token_id": token_id, "revoked": True})
    else:
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


@auth_app.command("log-keys")
def auth_log_keys(as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """Make a key pair for log grants: the API signs a grant per run with the private key
    (PELOTON_AGENT_LOGS_KEY), agents check grants with the public one (PELOTON_AGENT_LOGS_PUBLIC_KEY)."""
    from peloton.auth.grants import new_key_pair

    private, public = new_key_pair()
    if as_json:
        print_json({"PELOTON_AGENT_LOGS_KEY": private, "PELOTON_AGENT_LOGS_PUBLIC_KEY": public})
    else:
        sys.stdout.write(f"PELOTON_AGENT_LOGS_KEY={private}  # the API's alone\n"
                         f"PELOTON_AGENT_LOGS_PUBLIC_KEY={public}  # every agent's\n")


@auth_app.command("host-key")
def auth_host_key(host: str = typer.Argument(..., help="The host's id, as its agent names it (--name)."),
                  as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """The key a host's agent signs its reports with (PELOTON_HOST_KEY), made from the cluster's
    agents key (PELOTON_AGENT_REPORT_KEY, which only the host managers hold): give each agent its
    own, so that none can report for another host."""
    from peloton.auth.host_keys import host_key
    from pelotonctl.cli.common import EXIT_INVALID, fail, load_settings

    settings = load_settings()
    if not settings.agent_report_key:
        fail("PELOTON_AGENT_REPORT_KEY is not set: the host managers' key, from which each host's is made",
             EXIT_INVALID)
    key = host_key(settings.agent_report_key, host)
    if as_json:
        print_json({"PELOTON_HOST_KEY": key})
    else:
        sys.stdout.write(f"PELOTON_HOST_KEY={key}\n")
