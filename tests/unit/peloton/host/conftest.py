"""Fixtures of the agent drivers' tests: a local driver with its sandboxes in the test's folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from peloton.host.local import LocalDriver


@pytest.fixture
def local(tmp_path: Path):
    driver = LocalDriver(tmp_path / "sandboxes")
    yield driver
    driver.close()
