"""Signed job commands: the signature names its token and covers the value; the job manager's check
refuses unsigned, forged, altered and revoked commands, and a signer acting outside its pools."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from peloton.auth.signing import HEADER, signature, signer_of, signing_key
from peloton.auth.tokens import TokenError, issue
from stages.admit.senders import sender_problem

POOLS = {"/": {}, "/a": {"owning_team": "team-a"}, "/b": {"owning_team": "team-b"}}


def tokens(*specs):
    made, rows = {}, {}
    for user, groups, admin in specs:
        token, row = issue(user, groups, admin, now_ms=1)
        made[user], rows[row.token_id] = token, row
    return made, rows


def test_a_signature_is_the_token_id_and_an_hmac_keyed_with_the_secrets_hash() -> None:
    made, rows = tokens(("bot", ["team-a"], False))
    value = b"\x00\x00\x00\x00\x12a command"
    header = signature(made["bot"], value)
    token_id, mac = header.decode().split(":")
    assert token_id == made["bot"].split("_")[1]
    # Another implementation needs only the token: SHA-256 of the secret, then HMAC-SHA256.
    secret = made["bot"].split("_", 2)[2]
    assert signing_key(made["bot"]) == hashlib.sha256(secret.encode()).digest()
    assert mac == hmac.new(hashlib.sha256(secret.encode()).digest(), value, hashlib.sha256).hexdigest()
    assert signer_of(header, value, rows.get).user == "bot"


def test_unsigned_forged_altered_and_revoked_commands_are_refused_with_the_reason() -> None:
    made, rows = tokens(("bot", ["team-a"], False))
    value = b"command"
    good = signature(made["bot"], value)
    with pytest.raises(TokenError, match="unsigned"):
        signer_of(None, value, rows.get)
    with pytest.raises(TokenError, match="does not match"):
        signer_of(good, b"another command", rows.get)
    with pytest.raises(TokenError, match="unknown token"):
        signer_of(b"000000000000:" + good.split(b":")[1], value, rows.get)
    with pytest.raises(TokenError, match="unknown token"):
        signer_of(b"garbage", value, rows.get)
    [row] = rows.values()
    revoked = {row.token_id: type(row)(**{**{f: getattr(row, f) for f in row.__slots__}, "revoked_ms": 5})}
    with pytest.raises(TokenError, match="revoked"):
        signer_of(good, value, revoked.get)


def test_the_job_manager_applies_the_pools_permissions_to_the_signer() -> None:
    made, rows = tokens(("bot", ["team-a"], False), ("api", [], True))
    value = b"command"

    def problem(kind, pool, token):
        headers = [(HEADER, signature(token, value))] if token else []
        return sender_problem(kind, pool, headers, value, rows.get, POOLS, frozenset())

    assert problem("CREATE", "/a", made["bot"]) is None
    assert "bot is in none of team-b" in problem("CREATE", "/b", made["bot"])
    assert "job.stop on /b" in problem("STOP", "/b", made["bot"])
    assert problem("STOP", "/b", made["api"]) is None  # the API's service token: it decided already
    assert "unsigned" in problem("CREATE", "/a", None)
    assert problem("STOP", None, made["bot"]) is None  # no such job: the command's own check says so
