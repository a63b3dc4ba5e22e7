"""Rankers and the bounded candidate set: PACK fills hosts, SPREAD spreads a job, avoided hosts
come last, and a task that fits anywhere is found however small the sample."""

from __future__ import annotations

import random

from peloton.model.constraint import LabelConstraint
from peloton.model.resources import Resources
from stages.place.host_view import HostView
from stages.place.placement import HostRing, place_gang
from stages.place.rank import fewest_of_the_job_first, most_allocated_first, ranker_for, spreads
from stages.place.task_need import TaskNeed


def host(name: str, cpu: float = 8, used: float = 0, mem_mb: float = 1000, disk_mb: float = 0, **fields) -> HostView:
    return HostView(name, 0, Resources(cpu=cpu, mem_mb=mem_mb, disk_mb=disk_mb), allocated=Resources(cpu=used),
                    labels={"hostname": name}, **fields)


def task(task_id: str, cpu: float = 1, job_id: str = "j", **fields) -> TaskNeed:
    return TaskNeed(task_id, Resources(cpu=cpu), job_id=job_id, **fields)


def place_one_by_one(ring, count: int, strategy: str, job_id: str = "j", **kwargs) -> list[str]:
    """`count` one-task gangs of a job, each recorded on its host as the place stage does."""
    chosen = []
    for i in range(count):
        n = task(f"{job_id}-{i}-1", job_id=job_id)
        placed = place_gang([n], ring, now=0, strategy=strategy, **kwargs)
        assert placed is not None, i
        a = placed[n.task_id]
        a.host.add_pending(f"p{i}", 100.0, n.resources, n.labels, n.job_id, a.ports)
        chosen.append(a.host_id)
    return chosen


def test_strategy_names_choose_the_ranker() -> None:
    assert ranker_for("SPREAD_JOB") is fewest_of_the_job_first and spreads("SPREAD_JOB")
    assert ranker_for("PACK_HOST") is most_allocated_first
    assert ranker_for("") is most_allocated_first and not spreads("BEST_EFFORT")


def test_pack_ranks_the_most_allocated_host_first_then_by_the_rings_order() -> None:
    n = task("t")
    keys = {h.host_id: most_allocated_first(n, h, h.free(0), None, False)
            for h in (host("a", used=1), host("b", used=6), host("c", used=6), host("d"))}
    assert sorted(keys, key=keys.get) == ["b", "c", "a", "d"]  # b and c alike: sorted() keeps their order
    placed = place_gang([n], [host("a", used=1), host("c", used=6), host("b", used=6), host("d")], now=0)
    assert placed["t"].host_id == "c"  # alike with b, and before it on the ring
    # wherever the walk starts: the ring's order, not the order looked at
    ring = HostRing([host("a", used=1), host("c", used=6), host("b", used=6), host("d")])
    ring.pack_at = 2  # the walk looks at b, d, a, then c
    assert place_gang([n], ring, now=0)["t"].host_id == "c"


def test_spread_ranks_fewest_tasks_of_the_job_then_most_free_room_then_host_id() -> None:
    n = task("t", job_id="j")
    hosts = [host("a", job_tasks={"j": 1}), host("b", job_tasks={"other": 5}, used=4),
             host("c", job_tasks={"other": 1}), host("d", used=1), host("e")]
    keys = {h.host_id: fewest_of_the_job_first(n, h, h.free(0), None, False) for h in hosts}
    assert sorted(keys, key=keys.get) == ["c", "e", "d", "b", "a"]
    assert place_gang([n], hosts, now=0, strategy="SPREAD_JOB")["t"].host_id == "c"


def test_spread_prefers_most_free_disk_then_memory_as_peloton_orders_room() -> None:
    hosts = [host("a", mem_mb=4000, disk_mb=100), host("b", mem_mb=1000, disk_mb=200)]
    assert place_gang([task("t")], hosts, now=0, strategy="SPREAD_JOB")["t"].host_id == "b"
    hosts = [host("a", mem_mb=4000, disk_mb=200), host("b", mem_mb=1000, disk_mb=200)]
    assert place_gang([task("t")], hosts, now=0, strategy="SPREAD_JOB")["t"].host_id == "a"


def test_spread_counts_the_gangs_own_tasks_of_the_job() -> None:
    placed = place_gang([task(f"t{i}") for i in range(3)], [host("a"), host("b"), host("c")], now=0,
                        strategy="SPREAD_JOB")
    assert sorted(a.host_id for a in placed.values()) == ["a", "b", "c"]


def test_spread_and_pack_on_six_equal_hosts() -> None:
    def ring() -> HostRing:
        return HostRing([host(f"h{i}", cpu=6) for i in range(6)])

    assert sorted(place_one_by_one(ring(), 6, "SPREAD_JOB")) == [f"h{i}" for i in range(6)]
    assert place_one_by_one(ring(), 6, "PACK_HOST") == ["h0"] * 6


def test_avoided_hosts_rank_last_whatever_the_strategy() -> None:
    for strategy in ("PACK_HOST", "SPREAD_JOB"):
        hosts = [host("a", used=7), host("b", job_tasks={"j": 3}), host("c")]
        best = place_gang([task("t")], hosts, now=0, strategy=strategy)["t"].host_id
        placed = place_gang([task("t")], hosts, now=0, strategy=strategy, avoid={best})
        assert placed["t"].host_id != best, strategy
        only = place_gang([task("t", cpu=8)], [host("a"), host("b", used=1)], now=0, strategy=strategy, avoid={"a"})
        assert only["t"].host_id == "a", strategy  # no other host fits


def test_an_avoided_host_is_not_counted_as_one_of_the_sampled_candidates() -> None:
    hosts = [host(f"h{i}") for i in range(10)]
    placed = place_gang([task("t")], hosts, now=0, avoid={"h0", "h1"}, candidates=1)
    assert placed["t"].host_id == "h2"


def test_the_sample_is_bounded_pack_keeps_to_the_candidates_it_looked_at() -> None:
    hosts = [host(f"h{i}") for i in range(10)]
    hosts[9].allocated = Resources(cpu=6)  # the most allocated host, far from the cursor
    assert place_gang([task("t")], HostRing(hosts), now=0, candidates=2)["t"].host_id == "h0"
    assert place_gang([task("t")], HostRing(hosts), now=0, candidates=10)["t"].host_id == "h9"


def test_spread_goes_on_past_the_host_it_chose_so_a_jobs_next_gang_takes_another() -> None:
    ring = HostRing([host(f"h{i:02d}") for i in range(10)])
    assert place_one_by_one(ring, 5, "SPREAD_JOB", candidates=2) == ["h00", "h01", "h02", "h03", "h04"]
    assert ring.spread_at == 5


def test_a_spread_gang_walks_on_once_every_candidate_holds_a_task_of_its_job() -> None:
    ring = HostRing([host(f"h{i:02d}") for i in range(12)])
    placed = place_gang([task(f"t{i}") for i in range(9)], ring, now=0, strategy="SPREAD_JOB", candidates=3)
    assert sorted(a.host_id for a in placed.values()) == [f"h{i:02d}" for i in range(9)]


def test_a_task_that_fits_on_one_host_only_is_found_past_the_sample() -> None:
    hosts = [host(f"h{i:03d}", cpu=1) for i in range(300)]
    hosts[123].capacity = Resources(cpu=4, mem_mb=1000)
    for strategy in ("PACK_HOST", "SPREAD_JOB"):
        ring = HostRing(hosts)
        ring.pack_at = ring.spread_at = 200  # the walk starts after the one host that fits
        placed = place_gang([task("t", cpu=2)], ring, now=0, strategy=strategy, candidates=2)
        assert placed["t"].host_id == "h123", strategy
    pinned = LabelConstraint("HOST", "EQUAL", "hostname", "h007", 1)
    assert place_gang([task("t", constraint=pinned)], hosts, now=0, candidates=1)["t"].host_id == "h007"


def test_pack_fills_hosts_one_after_another_at_scale() -> None:
    ring = HostRing([host(f"h{i:04d}", cpu=4) for i in range(2000)], random.Random(7))
    chosen = place_one_by_one(ring, 40, "PACK_HOST", candidates=16)
    assert len(set(chosen)) == 10  # 4 tasks per host: ten hosts, each full before the next
    assert all(chosen[i] == chosen[i - i % 4] for i in range(40))


def test_a_gang_of_identical_tasks_sees_each_placed_task() -> None:
    one_per_host = LabelConstraint("TASK", "EQUAL", "app", "web", 0)
    needs = [task(f"t{i}", labels={"app": "web"}, constraint=one_per_host, dynamic_ports=1) for i in range(5)]
    ring = HostRing([host(f"h{i}") for i in range(5)])
    placed = place_gang(needs, ring, now=0, candidates=2)
    assert sorted(a.host_id for a in placed.values()) == [f"h{i}" for i in range(5)]
    assert place_gang(needs + [task("t5", labels={"app": "web"}, constraint=one_per_host)], ring, now=0) is None


def test_choices_are_deterministic_for_a_given_rng() -> None:
    def run(seed: int) -> list[str]:
        ring = HostRing([host(f"h{i:03d}", cpu=2) for i in range(500)], random.Random(seed))
        return place_one_by_one(ring, 20, "SPREAD_JOB") + place_one_by_one(ring, 20, "PACK_HOST", job_id="k")

    assert run(3) == run(3)
    assert run(3) != run(4)
    hosts = [host(f"h{i:03d}", cpu=2) for i in range(500)]
    once = place_gang([task("t")], hosts, now=0, rng=random.Random(5))["t"].host_id
    assert place_gang([task("t")], hosts, now=0, rng=random.Random(5))["t"].host_id == once


def test_a_ring_filled_after_it_was_made_still_starts_at_a_host_drawn_from_its_rng() -> None:
    def first_choice(seed: int) -> str:
        ring = HostRing(rng=random.Random(seed))
        for i in range(1000):  # as the place stage adds hosts when the host-state view shows them
            ring.add(host(f"h{i:04d}"))
        return place_gang([task("t")], ring, now=0, candidates=1)["t"].host_id

    assert first_choice(11) == first_choice(11)
    assert len({first_choice(seed) for seed in range(5)}) > 1
    assert place_gang([task("t")], HostRing([host("a"), host("b")]), now=0, candidates=1)["t"].host_id == "a"
