"""Bearer tokens: `plt_<id>_<secret>`. The store keeps the id, who it names and a SHA-256 of the
secret, never the secret: a token is shown once, when it is issued. The secret is 32 random bytes,
so a plain hash is enough (no password stretching: nothing here is guessable)."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass, field

PREFIX = "plt_"
_SHAPE = re.compile(r"plt_([0-9a-f]{12})_([A-Za-z0-9_-]{43})")
USER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")


class TokenError(ValueError):
    """A token that is not one: wrong shape, unknown, revoked, or its secret does not match."""


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request acts for: a user, the groups they belong to, and whether they administer the
    cluster (change pools and hosts, act in every pool)."""

    user: str
    groups: frozenset[str] = field(default_factory=frozenset)
    admin: bool = False
    token_id: str = ""

    def describe(self) -> str:
        groups = ",".join(sorted(self.groups)) or "no groups"
        return f"{self.user} ({groups}{', admin' if self.admin else ''})"


@dataclass(frozen=True, slots=True)
class TokenRow:
    """A token as the store keeps it."""

    token_id: str
    secret_hash: str
    user: str
    groups: tuple[str, ...]
    admin: bool
    created_ms: int
    revoked_ms: int | None = None

    def principal(self) -> Principal:
        """Who holding this token makes a caller (the caller's proof checked by whoever asks)."""
        if self.revoked_ms is not None:
            raise TokenError(f"token {self.token_id} was revoked")
        return Principal(self.user, frozenset(self.groups), self.admin, self.token_id)


def issue(user: str, groups: list[str], admin: bool, now_ms: int) -> tuple[str, TokenRow]:
    """A new token (shown once) and the row to store. Raises ValueError for a bad name."""
    for name in (user, *groups):
        if not USER_NAME.fullmatch(name):
            raise ValueError(f"{name!r}: a user or group name is letters, digits, '.', '_', '@' and '-' (at most 64)")
    token_id = secrets.token_hex(6)
    secret = secrets.token_urlsafe(32)
    row = TokenRow(token_id, hash_secret(secret), user, tuple(sorted(set(groups))), admin, now_ms)
    return f"{PREFIX}{token_id}_{secret}", row


def parts(token: str) -> tuple[str, str]:
    """(id, secret) of a token; raises TokenError for anything that is not one."""
    m = _SHAPE.fullmatch(token.strip())
    if m is None:
        raise TokenError("not a Peloton token (expected plt_<id>_<secret>, as `pelotonctl auth issue` prints)")
    return m.group(1), m.group(2)


def token_id_of(token: str) -> str:
    """The id part of a token (to find its row); raises TokenError for anything else."""
    return parts(token)[0]


def verify(token: str, row: TokenRow | None) -> Principal:
    """The principal a presented token stands for, given the row stored under its id."""
    _, secret = parts(token)
    if row is None or not hmac.compare_digest(row.secret_hash, hash_secret(secret)):
        raise TokenError("unknown token")
    return row.principal()


def hash_secret(secret: str) -> str:
    """What the store keeps of a secret: its SHA-256, hex."""
    return hashlib.sha256(secret.encode()).hexdigest()
