"""Who may look at the dashboard, and what of it: the API's tokens (a login form sets one as an
HttpOnly cookie; a program may send it as a bearer token), and only the jobs of pools the user may
read. The page only reads: the dashboard changes nothing."""

from __future__ import annotations

from http.cookies import SimpleCookie

from peloton.auth.identities import Identities
from peloton.auth.permissions import decide
from peloton.auth.tokens import Principal, TokenError
from peloton.store.base import QueryStore

COOKIE = "peloton_token"


class Gate:
    def __init__(self, identities: Identities, pools: QueryStore, admin_groups: frozenset[str] = frozenset()):
        self.identities, self.pools, self.admin_groups = identities, pools, admin_groups

    def principal(self, headers) -> Principal | None:
        """The user a request's cookie or Authorization header names, or None."""
        token = None
        auth = headers.get("Authorization") or ""
        if auth.lower().startswith("bearer "):
            token = auth[7:].strip()
        elif headers.get("Cookie"):
            morsel = SimpleCookie(headers["Cookie"]).get(COOKIE)
            token = morsel.value if morsel else None
        return self.check(token) if token else None

    def check(self, token: str) -> Principal | None:
        try:
            return self.identities.principal(token)
        except TokenError:
            return None

    def readable(self, principal: Principal):
        """pool -> whether the user may read its jobs (asked once per pool per request)."""
        pools = self.pools.list_pools()
        answers: dict[str, bool] = {}

        def may(pool: str) -> bool:
            if pool not in answers:
                answers[pool] = decide(principal, "job.read", pool, pools, self.admin_groups).allowed
            return answers[pool]
        return may


def session_cookie(token: str, max_age: int | None = None) -> str:
    """A Set-Cookie value: the page's scripts cannot read it, and no other site's page sends it."""
    age = f"; Max-Age={max_age}" if max_age is not None else ""
    return f"{COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict{age}"
