"""Who sent a job command, when commands must be signed (PELOTON_SIGNED_COMMANDS): the signer's
token (peloton.auth.signing) and whether that principal may do the command's action on its pool,
decided as the API decides. Pure: the caller looks tokens, pools and jobs up."""

from __future__ import annotations

from collections.abc import Callable

from peloton.auth.permissions import PoolsAbove, command_action, decide
from peloton.auth.signing import header_of, signer_of
from peloton.auth.tokens import TokenError, TokenRow


def sender_problem(kind: str, pool: str | None, headers: tuple[tuple[str, bytes], ...], raw_value: bytes,
                   find_token: Callable[[str], TokenRow | None],
                   pools: dict[str, dict] | PoolsAbove, admin_groups: frozenset[str]) -> str | None:
    """Why the command must not act (its signature, or its signer's permission), or None. `pool`:
    the pool a CREATE names, the job's pool otherwise (None: no such job, said elsewhere)."""
    try:
        who = signer_of(header_of(headers), raw_value, find_token)
    except TokenError as exc:
        return f"command refused: {exc}"
    if pool is None:
        return None
    action = command_action(kind)
    decision = decide(who, action, pool, pools, admin_groups)
    return None if decision.allowed else f"command refused: {action} on {pool}: {decision.reason}"
