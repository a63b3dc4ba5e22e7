"""A new cluster's one-shot setup, as its Kafka admin and with its store: the topics of
topics.yaml, each component's Kafka user and ACLs, the store's schema, the first resource pool,
and the tokens a deployment starts with (an operator's admin token, and the API's that signs the
commands it sends), written to files of a private directory. Idempotent: run again, it changes
nothing that is there (users' passwords are set again, tokens already written are kept)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from peloton.config import REPO_ROOT, Settings
from peloton.private import private_dir, write_private
from pelotonctl.deploy.env_file import kafka_password_variable
from pelotonctl.principals import USERS

DEFAULT_POOL, DEFAULT_POOL_FILE = "/DefaultResPool", REPO_ROOT / "examples" / "pools" / "default.yaml"
TOKENS = {"admin-token": ("admin", ["admin"], True), "api-command-token": ("api", [], True)}


def passwords_from_env() -> dict[str, str]:
    """Each component's Kafka password, from KAFKA_PASSWORD_<USER> (docker/peloton.env's names)."""
    found = {user: os.environ.get(kafka_password_variable(user), "") for user in USERS}
    missing = [kafka_password_variable(u) for u, p in found.items() if not p]
    if missing:
        raise ValueError(f"not set: {', '.join(missing)}")
    return found


def set_up(settings: Settings, passwords: dict[str, str], tokens_dir: Path, wait_s: float,
           say: Callable[[str], None]) -> None:
    from peloton.auth.tokens import issue
    from peloton.runtime import now_ms
    from peloton.store import open_store
    from pelotonctl import principals
    from pelotonctl.admin import create_pool, ensure_topics

    report = _patiently(lambda: ensure_topics(settings), wait_s, "the brokers", say)
    say(f"topics    {len(report)} ready")
    acls = principals.apply(settings, passwords)
    say(f"kafka     users {', '.join(passwords)}, {acls} ACLs")
    store = _patiently(lambda: open_store(settings.store), wait_s, "the store", say)
    try:
        if store.get_pool(DEFAULT_POOL) is None:
            create_pool(settings, store, DEFAULT_POOL, DEFAULT_POOL_FILE.read_text())
            say(f"pool      {DEFAULT_POOL} created")
        private_dir(tokens_dir)
        for name, (user, groups, admin) in TOKENS.items():
            path = tokens_dir / name
            if path.exists():
                continue
            token, row = issue(user, groups, admin, now_ms())
            store.add_token(row)
            write_private(path, token + "\n")
            say(f"token     {user}'s in {path}")
    finally:
        store.close()


def _patiently(step, wait_s: float, what: str, say: Callable[[str], None]):
    """step(), tried again for `wait_s` while what it needs is not up yet (a cluster's services
    start together)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return step()
        except Exception as exc:  # noqa: BLE001 - any failure is tried again until the deadline
            if time.monotonic() > deadline:
                raise
            say(f"waiting for {what}: {type(exc).__name__}: {str(exc)[:200]}")
            time.sleep(2)
