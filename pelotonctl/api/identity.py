"""Who a request comes from: the bearer token in its Authorization header, one of the store's
tokens or an OIDC issuer's JWT (peloton.auth.identities)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from peloton.auth.identities import Identities
from peloton.auth.tokens import Principal, TokenError

_bearer = HTTPBearer(auto_error=False, description="A token from `pelotonctl auth issue`.")
# What every route but the probes takes: the request's bearer token, checked by principal_of.
Creds = Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)]


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
