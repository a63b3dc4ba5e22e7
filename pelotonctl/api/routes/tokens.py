"""Tokens: the admins issue them (shown only once), list them and revoke them."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel

from peloton.auth.tokens import issue
from peloton.runtime import now_ms
from pelotonctl.api.door import DoorDep, Refused
from pelotonctl.api.identity import Creds
from pelotonctl.shapes import token_row

router = APIRouter(tags=["tokens"])


class TokenRequest(BaseModel):
    user: str
    groups: list[str] = []
    admin: bool = False


@router.post("/v1/tokens", status_code=201, summary="Issue a token (admins); shown only here")
def issue_token(body: TokenRequest, creds: Creds, door: DoorDep) -> dict:
    door.allow(door.who(creds, "token.issue", body.user), "token.issue", body.user)
    try:
        token, row = issue(body.user, body.groups, body.admin, now_ms())
    except ValueError as exc:
        raise Refused(400, str(exc)) from None
    door.store.add_token(row)
    return {"token": token, "token_id": row.token_id, "user": row.user, "groups": list(row.groups),
            "admin": row.admin}


@router.get("/v1/tokens", summary="Every token: id, user, groups, admin, issued, revoked (admins)")
def list_tokens(creds: Creds, door: DoorDep) -> dict:
    door.allow(door.who(creds, "token.list", "tokens"), "token.list", "tokens")
    return {"tokens": [token_row(t) for t in door.store.list_tokens()]}


@router.delete("/v1/tokens/{token_id}", summary="Revoke a token (admins)")
def revoke_token(token_id: str, creds: Creds, door: DoorDep) -> dict:
    door.allow(door.who(creds, "token.revoke", token_id), "token.revoke", token_id)
    if not door.store.revoke_token(token_id, now_ms()):
        raise Refused(404, f"no token {token_id} that is not revoked already")
    return {"revoked": token_id}
