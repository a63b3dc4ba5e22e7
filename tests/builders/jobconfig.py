"""Job config documents for peloton.model.jobconfig's tests: a minimal valid job, one with a default
config, and the errors parsing a document gives."""

from __future__ import annotations

from typing import Any

import pytest

from peloton.model.jobconfig import job_spec_from_dict
from peloton.model.jobspec import JobConfigError


def minimal(**top: Any) -> dict:
    """A small valid job; keyword arguments replace top-level keys."""
    doc: dict[str, Any] = {
        "name": "job",
        "instancecount": 3,
        "defaultconfig": {
            "resource": {"cpulimit": 1, "memlimitmb": 64, "disklimitmb": 10},
            "command": {"shell": True, "value": "echo hi"},
        },
    }
    doc.update(top)
    return doc


def errors_of(doc: Any) -> list[str]:
    with pytest.raises(JobConfigError) as info:
        job_spec_from_dict(doc)
    return info.value.errors


def with_default(**task: Any) -> dict:
    """minimal() with extra defaultconfig keys."""
    doc = minimal()
    doc["defaultconfig"].update(task)
    return doc
