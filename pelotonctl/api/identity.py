"""Who a request comes from: the bearer token in its Authorization header, checked against the
store's tokens (peloton.auth.tokens)."""

from __future__ import annotations

from peloton.auth.tokens import Principal, TokenError, token_id_of, verify
from peloton.store.base import TokenStore


class Unauthenticated(Exception):
    """No token, or one that is not valid: 401 with this reason."""


def principal_of(authorization: str | None, tokens: TokenStore) -> Principal:
    if not authorization:
        raise Unauthenticated("no token: send 'Authorization: Bearer <token>' (`pelotonctl auth issue` makes one)")
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthenticated("the Authorization header must be 'Bearer <token>'")
    try:
        return verify(token, tokens.get_token(token_id_of(token)))
    except TokenError as exc:
        raise Unauthenticated(str(exc)) from None
