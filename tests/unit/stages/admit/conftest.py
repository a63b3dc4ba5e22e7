"""Fixtures of the job manager's tests: an AdmitStage on the stage tests' store, with one host, bound
to a recording emitter."""

from __future__ import annotations

import pytest

from peloton.runtime import StaticView
from stages.admit.stage import AdmitStage
from tests.builders.stages import bound, host_state


@pytest.fixture
def admit(store):
    stage = AdmitStage(store, hosts=StaticView({"h1": host_state("h1", cpu=4)}))
    return stage, bound(stage)
