"""Who a request comes from: the bearer token in its Authorization header, one of the store's
tokens or an OIDC issuer's JWT (peloton.auth.identities)."""

from __future__ import annotations

from peloton.auth.identities import Identities
from peloton.auth.tokens import Principal, TokenError


class Unauthenticated(Exception):
    """No token, or one that is not valid: 401 with this reason."""


def principal_of(authorization: str | None, identities: Identities) -> Principal:
    if not authorization:
        raise Unauthenticated("no token: send 'Authorization: Bearer <token>' (`pelotonctl auth issue` makes one)")
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthenticated("the Authorization header must be 'Bearer <token>'")
    try:
        return identities.principal(token.strip())
    except TokenError as exc:
        raise Unauthenticated(str(exc)) from None
