"""The placement benchmark runs and places every gang (small sizes: the figures come from
running it by hand, see pelotonctl/bench/placement.py)."""

from __future__ import annotations

import pytest

from pelotonctl.bench.placement import bench_placement


@pytest.mark.parametrize("strategy", ["PACK_HOST", "SPREAD_JOB"])
@pytest.mark.parametrize("gangs, gang_size", [(200, 1), (4, 50)])
def test_the_benchmark_places_every_gang_and_reports_its_rate(strategy: str, gangs: int, gang_size: int) -> None:
    result = bench_placement(hosts=500, gangs=gangs, gang_size=gang_size, strategy=strategy, seed=3)
    assert result["tasks_placed"] == gangs * gang_size and result["gangs_unplaced"] == 0
    assert result["placements_per_s"] > 0 and result["seconds"] >= 0
