"""Log grants: an agent serves a run's output only against a grant the API signed for that run.

The API decides who may read a job (`job.read` on its pool); an agent cannot, and must not trust
any caller that merely knows a shared secret (a secret every agent holds is one leak away from
every team's output). So after its own check the API signs a short-lived grant for one run on one
host, and the agent checks it with the API's public key:

    a JWT (EdDSA, Ed25519), aud "peloton-agent-logs", sub <task id>, host <host id>, exp in 60 s

An agent serves `GET /v1/sandboxes/<task id>/...` only when the grant's signature holds, it has
not expired, its subject is that task id and its host is one the agent runs. Agents hold only the
public key (PELOTON_AGENT_LOGS_PUBLIC_KEY): nothing an agent, or a task that read an agent's
files, holds can make a grant. The API alone holds the private key (PELOTON_AGENT_LOGS_KEY).
Keys are the raw 32 bytes of each, base64url (`pelotonctl auth log-keys` makes a pair).
"""

from __future__ import annotations

import base64
import time

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

AUDIENCE = "peloton-agent-logs"
GRANT_TTL_S = 60.0
ALGORITHM = "EdDSA"


class GrantError(ValueError):
    """A grant that opens nothing here; the message says why."""


def new_key_pair() -> tuple[str, str]:
    """(private key, public key), each its raw bytes in base64url."""
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                                serialization.NoEncryption())
    public = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return _b64(private), _b64(public)


def private_key(text: str) -> Ed25519PrivateKey:
    """The API's signing key from its setting; ValueError naming the setting."""
    try:
        return Ed25519PrivateKey.from_private_bytes(_unb64(text))
    except ValueError:
        raise ValueError("PELOTON_AGENT_LOGS_KEY is not an Ed25519 private key (32 bytes, base64url; "
                         "`pelotonctl auth log-keys` makes a pair)") from None


def public_key(text: str) -> Ed25519PublicKey:
    """The agents' key from their setting; ValueError naming the setting."""
    try:
        return Ed25519PublicKey.from_public_bytes(_unb64(text))
    except ValueError:
        raise ValueError("PELOTON_AGENT_LOGS_PUBLIC_KEY is not an Ed25519 public key (32 bytes, base64url; "
                         "`pelotonctl auth log-keys` makes a pair)") from None


def grant(key: Ed25519PrivateKey, task_id: str, host_id: str, now: float | None = None,
          ttl_s: float = GRANT_TTL_S) -> str:
    """A grant to read run `task_id`'s output from the agent of `host_id`, for ttl_s seconds."""
    now = time.time() if now is None else now
    claims = {"aud": AUDIENCE, "sub": task_id, "host": host_id, "iat": int(now), "exp": int(now + ttl_s)}
    return jwt.encode(claims, key, algorithm=ALGORITHM)


def check(key: Ed25519PublicKey, token: str, task_id: str, hosts: set[str] | frozenset[str],
          now: float | None = None) -> None:
    """Whether `token` opens run `task_id` on an agent of `hosts`; GrantError saying why not."""
    try:
        claims = jwt.decode(token, key, algorithms=[ALGORITHM], audience=AUDIENCE,
                            options={"require": ["exp", "sub", "aud"]}, leeway=0)
    except jwt.ExpiredSignatureError:
        raise GrantError("the grant has expired: ask the API again") from None
    except jwt.InvalidTokenError as exc:
        raise GrantError(f"not a grant of this cluster's API ({exc})") from None
    if now is not None and claims["exp"] <= now:
        raise GrantError("the grant has expired: ask the API again")
    if claims.get("sub") != task_id:
        raise GrantError(f"the grant is for run {claims.get('sub')!r}, not {task_id!r}")
    if claims.get("host") not in hosts:
        raise GrantError(f"the grant is for host {claims.get('host')!r}, which this agent does not run")


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    text = text.strip()
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except ValueError:
        raise ValueError("not base64url") from None
