"""Pool permissions: owningTeam and ldapGroups say who acts on a pool's jobs, inherited downwards;
administrators act everywhere; every answer carries its reason."""

from __future__ import annotations

import pytest

from peloton.auth.permissions import PoolsAbove, decide, owners
from peloton.auth.tokens import Principal, TokenError, issue, token_id_of, verify
from peloton.model.pool import PoolConfigError, parse_pool_config

RESOURCES = "resources:\n- {kind: cpu, reservation: 1, limit: 1, share: 1}\n"


def pool(path: str, extra: str = "") -> dict:
    return parse_pool_config(f"name: {path.rsplit('/', 1)[1]}\n{extra}{RESOURCES}", path)


POOLS = {
    "/a": pool("/a", "owningTeam: team-a\n"),
    "/a/batch": pool("/a/batch"),  # names no one: /a's owners
    "/b": pool("/b", "owningTeam: team-b\nldapGroups: [b-readers, ops]\n"),
    "/orphan": pool("/orphan"),
}
ALICE = Principal("alice", frozenset({"team-a"}))
BOB = Principal("bob", frozenset({"team-b"}))


def test_a_pools_ldap_groups_are_read_as_peloton_writes_them() -> None:
    assert POOLS["/b"]["ldap_groups"] == ["b-readers", "ops"]
    with pytest.raises(PoolConfigError, match="ldapgroups: expected a list of group names"):
        pool("/c", "ldapGroups: team-c\n")


def test_owners_are_inherited_from_the_nearest_pool_that_names_them() -> None:
    assert owners(POOLS, "/a/batch") == ("/a", frozenset({"team-a"}))
    assert owners(POOLS, "/b") == ("/b", frozenset({"team-b", "b-readers", "ops"}))
    assert owners(POOLS, "/orphan") == ("", frozenset())


def test_a_user_acts_in_the_pools_of_their_groups_and_is_told_why_not_elsewhere() -> None:
    allowed = decide(ALICE, "job.create", "/a/batch", POOLS)
    assert allowed.allowed and allowed.reason == "alice is in team-a, which owns /a (inherited by /a/batch)"
    refused = decide(ALICE, "job.stop", "/b", POOLS)
    assert not refused.allowed
    assert refused.reason == "alice is in none of b-readers, ops, team-b, the groups that own /b"
    assert decide(Principal("carol", frozenset({"ops"})), "job.read", "/b", POOLS).allowed
    orphan = decide(BOB, "job.create", "/orphan", POOLS)
    assert not orphan.allowed and "only administrators act there" in orphan.reason


def test_pools_and_hosts_change_only_by_administrators() -> None:
    assert not decide(ALICE, "pool.update", "/a", POOLS).allowed
    assert "for administrators" in decide(ALICE, "host.maintenance", None, POOLS).reason
    assert decide(Principal("root", admin=True), "pool.update", "/a", POOLS).allowed
    assert decide(Principal("ann", frozenset({"sre"})), "job.stop", "/orphan", POOLS, frozenset({"sre"})).allowed
    assert decide(BOB, "pool.read", None, POOLS).allowed and decide(BOB, "host.read", None, POOLS).allowed


def test_a_token_is_its_own_proof_and_nothing_else_passes() -> None:
    token, row = issue("alice", ["team-a"], False, now_ms=1)
    assert verify(token, row).user == "alice"
    for bad in ("", "Bearer x", "plt_zz_" + "a" * 43, token[:-1] + ("A" if token[-1] != "A" else "B")):
        with pytest.raises(TokenError):
            verify(bad, row if bad.startswith("plt_") and len(bad) == len(token) else None)
    with pytest.raises(TokenError, match="not a Peloton token"):
        token_id_of("nope")
    with pytest.raises(ValueError, match="a user or group name"):
        issue("alice smith", [], False, now_ms=1)


def test_decisions_read_only_the_pools_above_the_one_asked_for() -> None:
    asked: list[str] = []

    def get_pool(path: str) -> dict | None:
        asked.append(path)
        return POOLS.get(path)

    for who, action, path in ((ALICE, "job.create", "/a/batch"), (ALICE, "job.stop", "/b"),
                              (BOB, "job.create", "/orphan"), (BOB, "job.read", "/b/missing/deeper")):
        asked.clear()
        assert decide(who, action, path, PoolsAbove(get_pool)) == decide(who, action, path, POOLS)
        line = [path]
        while line[-1] != "/":
            line.append(line[-1].rsplit("/", 1)[0] or "/")
        assert asked == line[:len(asked)] and len(set(asked)) == len(asked), asked  # up the line, each once
    asked.clear()
    decide(Principal("root", admin=True), "job.stop", "/b", PoolsAbove(get_pool))
    decide(BOB, "pool.read", None, PoolsAbove(get_pool))
    assert asked == []  # administrators and read actions need no pool
