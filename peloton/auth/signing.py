"""Signed job commands: how the job manager knows who sent a command that reached Kafka without
the API (a team's own producer), so the pools' permissions hold there too.

Kafka does not tell a consumer who produced a message, and its ACLs say only who may write a
topic, not which pools. So a producer signs each command with one of our tokens: the header
`peloton-signature` is `<token id>:<HMAC-SHA256 of the message's value, hex>`, keyed with
SHA-256 of the token's secret (what the store keeps). The job manager finds the token, checks the
HMAC, and decides the command's action on its pool for that token's principal, as the API would.

The API signs with its own service token (an admin's): it has already decided for the user it
acts for. A signature proves the sender held the token (or can read the tokens table, which only
the cluster's own components can) and that the value is the one signed; a command cannot be
replayed to another job, since the job id is inside the signed value, and a replayed command is
the same command (its command id was already claimed).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Iterable

from peloton.auth.tokens import Principal, TokenError, TokenRow, hash_secret, parts

HEADER = "peloton-signature"


def signing_key(token: str) -> bytes:
    """The HMAC key of a token: SHA-256 of its secret, raw (the store keeps it as hex)."""
    return bytes.fromhex(hash_secret(parts(token)[1]))


def signature(token: str, value: bytes) -> bytes:
    """The header's value for a message `value` sent by the holder of `token`."""
    mac = hmac.new(signing_key(token), value, hashlib.sha256).hexdigest()
    return f"{parts(token)[0]}:{mac}".encode()


def signer_of(header: bytes | None, value: bytes, find_token: Callable[[str], TokenRow | None]) -> Principal:
    """Who signed `value`: find_token(token_id) -> TokenRow | None. TokenError saying why not."""
    if not header:
        raise TokenError(f"unsigned: commands must carry a {HEADER} header "
                         "(see the producer in docs/tutorials/producers.md)")
    token_id, _, mac = header.decode("ascii", "replace").partition(":")
    row: TokenRow | None = find_token(token_id) if len(token_id) == 12 else None
    if row is None:
        raise TokenError(f"signed with an unknown token {token_id[:12]!r}")
    expected = hmac.new(bytes.fromhex(row.secret_hash), value, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, mac):
        raise TokenError(f"the signature does not match the command (token {token_id})")
    try:
        return row.principal()
    except TokenError:
        raise TokenError(f"signed with token {token_id}, which was revoked") from None


def header_of(headers: Iterable[tuple[str, bytes | None]] | None, name: str = HEADER) -> bytes | None:
    """A header's value from a Kafka message's headers (a list of (name, bytes) or None)."""
    for key, value in headers or ():
        if key == name:
            return value
    return None
