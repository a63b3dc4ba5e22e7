"""Fixtures of the stage tests: a real SQLite store holding pool /p."""

from __future__ import annotations

import pytest

from peloton.model.pool import parse_pool_config
from peloton.store import open_store
from tests.builders.stages import POOL


@pytest.fixture
def store(tmp_path):
    s = open_store(tmp_path / "peloton.db")
    s.put_pool("/p", parse_pool_config(POOL, "/p"))
    yield s
    s.close()
