"""Shared test helpers: where Peloton's example files live."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO.parent / "shared" / "peloton-examples"


@pytest.fixture
def peloton_examples() -> Path:
    if not EXAMPLES.is_dir():
        pytest.skip(f"Peloton's example files are not at {EXAMPLES}")
    return EXAMPLES
