"""Lockdown on a running pipeline, through Peloton's CLI forms and the API: an administrator
locks Write down, a team's create through the API is refused with who locked it, and so is a
producer's command sent past the API (the job manager keeps the lock too); unlocked, both go."""

from __future__ import annotations

import pytest

from pelotonctl.admin import create_pool
from tests.integration.test_api import JOB, RESOURCES, serve_api

pytestmark = pytest.mark.integration


def test_a_write_lockdown_refuses_the_apis_and_a_producers_creates_until_unlocked(pipeline_factory) -> None:
    p = pipeline_factory()
    create_pool(p.settings, p.store, "/a", "name: a\nowningTeam: team-a\n" + RESOURCES)
    p.start_all()
    api = serve_api(p)
    root = p.ctl("auth", "issue", "--user", "ops", "--admin").stdout.strip()
    alice = p.ctl("auth", "issue", "--user", "alice", "--group", "team-a").stdout.strip()
    as_ops, as_alice = ({"PELOTON_API_URL": api, "PELOTON_TOKEN": t} for t in (root, alice))
    (p.home / "hello.yaml").write_text(JOB)

    refused = p.ctl("admin", "lock", "Write", extra_env=as_alice)
    assert refused.returncode == 6 and "cluster.lockdown is for administrators" in refused.stderr, refused.stderr
    locked = p.ctl("admin", "lock", "Write", extra_env=as_ops)
    assert locked.returncode == 0 and locked.stdout == "lock on Write succeeded\n", locked.stderr
    assert "Write: locked by ops" in p.ctl("admin", "lockdown", extra_env=as_ops).stdout

    through_api = p.ctl("job", "create", "/a", str(p.home / "hello.yaml"), extra_env=as_alice)
    assert through_api.returncode == 6 and "locked down for Write by ops" in through_api.stderr, through_api.stderr
    past_api = p.ctl("job", "create", "/a", str(p.home / "hello.yaml"))  # sent to job-commands as a producer's
    assert past_api.returncode == 0, past_api.stderr  # sent: the job manager answers on its own time
    [letter] = p.read_topic("dead-letters", expect=1)
    assert "locked down for Write by ops" in letter["reason"]
    assert p.store.list_jobs() == []

    assert p.ctl("admin", "unlock", "Write", extra_env=as_ops).stdout == "unlock on Write succeeded\n"
    p.wait_for("the job manager sees the lock lifted", lambda: p.ctl(
        "job", "create", "/a", str(p.home / "hello.yaml")).returncode == 0, 30)
    made = p.ctl("job", "create", "/a", str(p.home / "hello.yaml"), extra_env=as_alice)
    assert made.returncode == 0, made.stderr
