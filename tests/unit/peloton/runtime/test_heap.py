"""A stage's garbage collection settings (peloton/runtime/heap.py)."""

from __future__ import annotations

import gc

from peloton.runtime.heap import THRESHOLDS, settle_heap


def test_settling_the_heap_freezes_what_exists_and_collects_less_often() -> None:
    before = gc.get_threshold()
    try:
        settle_heap()
        assert gc.get_threshold() == THRESHOLDS and gc.get_freeze_count() > 0
        assert THRESHOLDS[0] >= 100 * 700  # young collections at least a hundred times rarer than CPython's
        # A batch's working set, alive together and then freed, sets off no young collection.
        young = gc.get_stats()[0]["collections"]
        batch = [{"instance": i, "run_id": 1, "host_id": "h"} for i in range(500_000)]
        del batch
        assert gc.get_stats()[0]["collections"] == young
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
