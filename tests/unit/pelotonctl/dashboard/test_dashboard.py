"""The dashboard without a broker: the history it keeps, what one sample holds when a source
fails, the sources over a store and hand-fed views, and its routes served on a free port."""

from __future__ import annotations

import json
import sqlite3
import time
import urllib.error
import urllib.request

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from peloton.config import Settings
from peloton.runtime import StaticView
from peloton.store import JobRow, TaskRow, open_store
from pelotonctl.admin import create_pool
from pelotonctl.dashboard.server import Dashboard, StageHistory, start
from pelotonctl.dashboard.sources import Sources, SourceUnavailable

ZERO = {"cpu": 0.0, "mem_mb": 0.0, "disk_mb": 0.0, "gpu": 0.0}


def lag_sample(at_ms: int, offsets: dict[str, list[int | None]], lag: int = 0, held: int = 0) -> dict:
    """pelotonctl.lag's sample shape: per stage, its partitions' committed offsets."""
    return {"sampled_ms": at_ms, "queued": [], "groups": [
        {"group": f"peloton.{stage}", "stage": stage, "status": "OK", "total_lag": lag, "max_lag_seconds": 0.0,
         "held": held, "partitions": [
             {"topic": "t", "partition": i, "current_offset": off, "log_end_offset": off, "lag": 0,
              "lag_seconds": 0.0, "held": 0} for i, off in enumerate(offs)]}
        for stage, offs in offsets.items()]}


# -- history and throughput -------------------------------------------------------------------
def test_throughput_is_the_change_of_committed_offsets_per_second() -> None:
    history = StageHistory()
    history.add(lag_sample(10_000, {"admit": [100, 50]}, lag=7, held=1))
    history.add(lag_sample(12_000, {"admit": [130, 70]}, lag=3, held=2))  # 50 records in 2 s
    points = history.to_json()["admit"]
    assert points == [{"t": 10_000, "lag": 7, "held": 1, "rate": None},  # one sample: no rate yet
                      {"t": 12_000, "lag": 3, "held": 2, "rate": 25.0}]


def test_throughput_is_never_negative_and_partitions_without_a_commit_count_nothing() -> None:
    history = StageHistory()
    history.add(lag_sample(1_000, {"place": [500, None]}))
    history.add(lag_sample(2_000, {"place": [0, None]}))  # the broker lost its log: offsets went back
    history.add(lag_sample(3_000, {"place": [10, 4]}))  # counting again from there
    assert [p["rate"] for p in history.to_json()["place"]] == [None, 0.0, 14.0]


def test_history_is_bounded_and_a_repeated_sample_adds_nothing() -> None:
    history = StageHistory(keep=3)
    for i in range(5):
        history.add(lag_sample(1_000 * (i + 1), {"launch": [i * 10]}))
    history.add(lag_sample(5_000, {"launch": [999]}))  # the same sampled time again
    points = history.to_json()["launch"]
    assert [p["t"] for p in points] == [3_000, 4_000, 5_000]
    assert [p["rate"] for p in points] == [10.0, 10.0, 10.0]


# -- one sample, with sources that fail --------------------------------------------------------
class FakeSources:
    def __init__(self):
        self.at = 1_000
        self.offset = 0
        self.broken: dict[str, Exception] = {}
        self.closed = False

    def _maybe_fail(self, name: str) -> None:
        if name in self.broken:
            raise self.broken[name]

    def cluster(self) -> dict:
        return {"bootstrap": "broker:9092", "topic_prefix": "t."}

    def lag(self) -> dict:
        self._maybe_fail("lag")
        self.at += 2_000
        self.offset += 10
        return lag_sample(self.at, {s: [self.offset] for s in ("admit", "entitle", "place", "launch")})

    def pools(self) -> list[dict]:
        self._maybe_fail("pools")
        return [{"path": "/", "entitlement": {"cpu": 8}, "allocation": {"cpu": 2}, "demand": {"cpu": 1},
                 "waiting": [], "queued_gangs": 0}]

    def hosts(self) -> list[dict]:
        self._maybe_fail("hosts")
        return [{"host_id": "sim-0", "state": "UP", "tasks": 1}]

    def jobs(self) -> list[dict]:
        self._maybe_fail("jobs")
        return [{"job_id": "j1", "name": "hello", "state": "RUNNING", "tasks": {"RUNNING": 2}}]

    def pending(self) -> list[dict]:
        self._maybe_fail("pending")
        return []

    def close(self) -> None:
        self.closed = True


def test_a_sample_holds_every_source_and_the_history() -> None:
    dashboard = Dashboard(FakeSources(), sample_every_s=60)
    assert json.loads(dashboard.state_json())["sampled_ms"] is None  # before the first sample
    dashboard.sample()
    dashboard.sample()
    state = json.loads(dashboard.state_json())
    assert state["stages"] == ["admit", "entitle", "place", "launch"]
    assert state["cluster"] == {"bootstrap": "broker:9092", "topic_prefix": "t."}
    assert state["jobs"][0]["tasks"] == {"RUNNING": 2} and state["hosts"][0]["host_id"] == "sim-0"
    assert [p["rate"] for p in state["history"]["admit"]] == [None, 5.0]
    assert state["errors"] == {} and state["sampled_ms"] > 0


def test_a_source_that_fails_keeps_its_last_data_and_says_why_until_it_answers_again() -> None:
    sources = FakeSources()
    dashboard = Dashboard(sources, sample_every_s=60)
    dashboard.sample()
    sources.broken = {"jobs": SourceUnavailable("store is unavailable: database is locked"),
                      "hosts": KeyError("capacity")}
    dashboard.sample()
    state = json.loads(dashboard.state_json())
    assert state["errors"] == {"jobs": "store is unavailable: database is locked", "hosts": "KeyError: 'capacity'"}
    assert state["jobs"][0]["job_id"] == "j1"  # the last data read, shown beside the error
    assert len(state["history"]["admit"]) == 2  # the other sources went on
    sources.broken = {}
    dashboard.sample()
    assert json.loads(dashboard.state_json())["errors"] == {}


# -- the sources, over a real store and hand-fed views ------------------------------------------
POOL = """
name: test
resources:
- {kind: cpu, reservation: 8, limit: 16, share: 1}
- {kind: memory, reservation: 4096, limit: 4096, share: 1}
"""


def host_record(host_id: str, cpu: float, allocated_cpu: float, tasks: int) -> dict:
    return {"host_id": host_id, "shard": 0, "driver": "sim", "state": "UP",
            "capacity": {"cpu": cpu, "mem_mb": 8192.0, "disk_mb": 1000.0, "gpu": 0.0},
            "allocated": {**ZERO, "cpu": allocated_cpu, "mem_mb": 1024.0}, "task_count": tasks,
            "labels": {"hostname": host_id, "rack": "a"}, "updated_ms": 5}


def usage_record(pool: str, allocated_cpu: float, demand_cpu: float, waiting: list[dict]) -> dict:
    return {"pool": pool, "entitlement": ZERO, "allocation": {**ZERO, "cpu": allocated_cpu},
            "demand": {**ZERO, "cpu": demand_cpu}, "queued_gangs": len(waiting), "slack_demand": ZERO,
            "non_slack_allocation": {**ZERO, "cpu": allocated_cpu}, "slack_allocation": ZERO,
            "preempting": 0, "computed_ms": 7, "waiting": waiting}


@pytest.fixture
def sources(tmp_path):
    settings = Settings(bootstrap="127.0.0.1:1", home=tmp_path, store=str(tmp_path / "peloton.db"))
    store = open_store(settings.store)
    create_pool(settings, store, "/team", POOL.replace("test", "team"))
    create_pool(settings, store, "/team/batch", POOL.replace("test", "batch"))
    for job_id, state, tasks in (("done", "SUCCEEDED", ["SUCCEEDED", "SUCCEEDED"]),
                                 ("waits", "PENDING", ["PENDING", "READY", "RUNNING"])):
        store.create_jobs(
            [JobRow(job_id, job_id, "/team/batch", "BATCH", state, len(tasks), 0, True, "PACK_HOST", "me", "cfg", 1,
                    1)],
            [TaskRow(job_id, i, 1, f"{job_id}-{i}-1", "/team/batch", f"{job_id}-g", s, {},
                     reason="REASON_NO_HOST" if i == 1 else "", message="fits on none of 2 hosts" if i == 1 else "")
             for i, s in enumerate(tasks)])
    views = {
        "host-state": StaticView({"sim-1": host_record("sim-1", 8, 2, 2), "sim-0": host_record("sim-0", 8, 0, 0)}),
        "entitlements": StaticView({"/team/batch": usage_record("/team/batch", 2, 3, [
            {"gang_id": "waits-g", "job_id": "waits", "tasks": 1, "reason": "waiting for room", "since_ms": 3}])}),
    }
    lag = FakeLag()
    s = Sources(settings, store, lag_monitor=lag)
    s._read = views.__getitem__  # the compacted topics, without a broker
    yield s
    s.close()
    assert lag.closed
    store.close()


class FakeLag:
    closed = False

    def sample(self) -> dict:
        return lag_sample(1, {"admit": [0]})

    def close(self) -> None:
        self.closed = True


def test_sources_give_pools_with_usage_rolled_up_and_queued_gangs(sources) -> None:
    pools = {p["path"]: p for p in sources.pools()}
    assert list(pools) == ["/", "/team", "/team/batch"]
    assert pools["/"]["limit"]["cpu"] == 16  # the cluster: two hosts of 8
    assert pools["/team"]["allocation"]["cpu"] == 2 and pools["/team"]["demand"]["cpu"] == 3
    assert pools["/team/batch"]["reservation"] == {"cpu": 8, "memory": 4096, "disk": 0, "gpu": 0}
    assert [p["queued_gangs"] for p in pools.values()] == [1, 1, 1]
    assert pools["/team/batch"]["waiting"][0]["reason"] == "waiting for room"
    assert (pools["/team"]["leaf"], pools["/team/batch"]["leaf"], pools["/team"]["parent"]) == (False, True, "/")
    json.dumps(pools)


def test_sources_give_hosts_jobs_and_why_tasks_wait(sources) -> None:
    hosts = sources.hosts()
    assert [(h["host_id"], h["free"]["cpu"], h["tasks"]) for h in hosts] == [("sim-0", 8, 0), ("sim-1", 6, 2)]
    from stages.admit.workflow import RESTART, UpdateOptions, new_workflow

    paused = new_workflow("u1", "waits", RESTART, [0, 1, 2], UpdateOptions(start_paused=True), 1, 1, "ann", 5)
    sources.store.save_updates([paused])
    jobs = {j["job_id"]: j for j in sources.jobs()}
    assert jobs["done"]["tasks"] == {"SUCCEEDED": 2}
    assert jobs["waits"]["tasks"] == {"PENDING": 1, "READY": 1, "RUNNING": 1}
    assert jobs["waits"]["update"] == {"update_id": "u1", "kind": "RESTART", "state": "PAUSED",
                                       "message": "started paused by ann", "done": 0, "total": 3}
    assert jobs["done"]["update"] is None
    # The terminal job waits for nothing. Instance 1 found no host and is being tried again
    # (READY): it still says why.
    [pending] = sources.pending()
    assert (pending["job_id"], pending["pending"]) == ("waits", 2)
    assert [w["reason"] for w in pending["waiting"]] == ["waiting for room"]
    assert pending["unplaced"] == [{"instance": 1, "run_id": 1, "reason": "REASON_NO_HOST",
                                    "message": "fits on none of 2 hosts"}]
    assert sources.lag()["groups"][0]["stage"] == "admit"


def test_sources_name_the_hosts_whose_agents_have_not_started_launched_tasks(sources) -> None:
    """A job whose runs were launched long ago and not started waits on its hosts' agents: it is
    listed with them, though none of its tasks is pending."""
    sources.store.create_jobs(
        [JobRow("behind", "behind", "/team/batch", "BATCH", "RUNNING", 3, 0, True, "PACK_HOST", "me", "cfg", 1, 1)],
        [TaskRow("behind", i, 1, f"behind-{i}-1", "/team/batch", "behind-g", state, {}, host_id=host,
                 updated_ms=updated) for i, (state, host, updated) in
         enumerate([("LAUNCHED", "agent-1", 2_000), ("LAUNCHED", "agent-0", 1_000), ("LAUNCHED", "agent-0", 2 ** 62)])])
    pending = {p["job_id"]: p for p in sources.pending()}
    behind = pending["behind"]
    assert behind["pending"] == 0 and not behind["unplaced"]
    assert [(r["instance"], r["host_id"]) for r in behind["not_started"]] == [(1, "agent-0"), (0, "agent-1")]
    assert pending["waits"]["not_started"] == []


class GoneStore:
    """A store whose database went away (SQLite's error for a file it cannot open)."""

    def __getattr__(self, name):
        def fail(*args, **kwargs):
            raise sqlite3.OperationalError("unable to open database file")
        return fail


def test_a_store_that_is_gone_is_reported_as_unavailable(tmp_path) -> None:
    sources = Sources(Settings(home=tmp_path, store=str(tmp_path / "x.db")), GoneStore())
    with pytest.raises(SourceUnavailable, match="store is unavailable: unable to open database file"):
        sources.jobs()


class SilentView:
    """A compacted topic's view on a broker that does not answer, then does."""

    def __init__(self):
        self.answers = False
        self.reads = 0
        self.values = {"k": {"v": 1}}
        self.consumer = self

    def catch_up(self, timeout: float) -> bool:
        self.reads += 1
        return self.answers

    def position(self, parts):
        return [TopicPartition("t", 0, 5)]

    def get_watermark_offsets(self, tp, cached: bool):
        return 0, 5


def test_a_topic_is_read_once_per_sample_and_a_silent_broker_is_named(tmp_path) -> None:
    sources = Sources(Settings(bootstrap="kafka-1:9092", home=tmp_path, store=str(tmp_path / "x.db")), GoneStore(),
                      wait_s=0.5)
    view = sources._views["host-state"] = SilentView()
    view.spec = type("Spec", (), {"name": "peloton.host-state", "partitions": 1})
    for _ in range(2):  # hosts() then pending() in one sample: one wait, one error
        with pytest.raises(SourceUnavailable, match=r"broker at kafka-1:9092 is unavailable: peloton.host-state "
                                                    r"not read to its end within 0.5s"):
            sources._read("host-state")
    assert view.reads == 1
    view.answers = True
    sources._last_read.clear()  # the next sample
    assert sources._read("host-state").values == {"k": {"v": 1}} and view.reads == 2


def test_a_broker_error_is_told_in_its_own_words(tmp_path) -> None:
    class Refusing:
        def sample(self):
            raise KafkaException(KafkaError(KafkaError._TRANSPORT, "Connection refused"))

    sources = Sources(Settings(bootstrap="kafka-1:9092", home=tmp_path, store=str(tmp_path / "x.db")), GoneStore(),
                      lag_monitor=Refusing())
    with pytest.raises(SourceUnavailable) as failed:
        sources.lag()
    assert str(failed.value) == "broker at kafka-1:9092 is unavailable: Connection refused"


# -- the routes ----------------------------------------------------------------------------------
def get(url: str) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.headers["Content-Type"], response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read()


def test_routes_serve_the_page_the_state_and_health_on_a_free_port() -> None:
    sources = FakeSources()
    running = start(Dashboard(sources, sample_every_s=0.05), port=0)
    try:
        assert running.port > 0 and running.url == f"http://127.0.0.1:{running.port}/"
        base = running.url
        status, kind, body = get(base)
        assert status == 200 and kind.startswith("text/html") and b'src="app.js"' in body
        assert get(base + "app.js")[1].startswith("text/javascript")
        assert get(base + "style.css")[1].startswith("text/css")
        assert get(base + "healthz")[:2] == (200, "text/plain; charset=utf-8")
        assert get(base + "nope")[0] == 404
        deadline = time.monotonic() + 5
        while True:  # the sampler runs on its own
            status, kind, body = get(base + "api/state?t=1")
            state = json.loads(body)
            if len(state["history"].get("launch", [])) >= 2 or time.monotonic() > deadline:
                break
        assert status == 200 and kind == "application/json"
        assert state["jobs"][0]["name"] == "hello" and state["history"]["launch"][-1]["rate"] == 5.0
    finally:
        running.close()
    assert not running.thread.is_alive() and not running.dashboard.alive() and sources.closed
    with pytest.raises(OSError):
        urllib.request.urlopen(running.url, timeout=1)


def test_the_dashboard_wants_a_token_and_shows_each_user_only_their_pools_jobs(tmp_path) -> None:
    import urllib.error
    import urllib.parse
    import urllib.request

    from peloton.auth.identities import Identities
    from peloton.auth.tokens import issue
    from peloton.model.pool import parse_pool_config
    from peloton.store import open_store
    from pelotonctl.dashboard.gate import Gate
    from pelotonctl.dashboard.server import Dashboard, start

    store = open_store(tmp_path / "peloton.db")
    resources = "resources:\n- {kind: cpu, reservation: 1, limit: 1, share: 1}\n"
    store.put_pool("/a", parse_pool_config("name: a\nowningTeam: team-a\n" + resources, "/a"))
    store.put_pool("/b", parse_pool_config("name: b\nowningTeam: team-b\n" + resources, "/b"))
    alice, row = issue("alice", ["team-a"], False, now_ms=1)
    store.add_token(row)

    class Two(FakeSources):
        def jobs(self):
            return [{"job_id": "ja", "pool": "/a"}, {"job_id": "jb", "pool": "/b"}]

    class NoRedirects(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None
    opener = urllib.request.build_opener(NoRedirects)

    def get(url: str, **headers):
        try:
            with opener.open(urllib.request.Request(url, headers=headers), timeout=10) as answer:
                return answer.status, answer.headers, answer.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.headers, exc.read()

    dashboard = Dashboard(Two(), sample_every_s=60)
    dashboard.sample()
    with start(dashboard, port=0, gate=Gate(Identities(store), store)) as running:
        assert get(running.url + "api/state")[0] == 401
        status, headers, _ = get(running.url)
        assert status == 303 and headers["Location"] == "login"
        assert get(running.url + "healthz")[0] == 200
        form = urllib.parse.urlencode({"token": "plt_000000000000_" + "x" * 43}).encode()
        try:
            opener.open(urllib.request.Request(running.url + "login", data=form), timeout=10)
            raise AssertionError("a wrong token signed in")
        except urllib.error.HTTPError as exc:
            assert exc.code == 401 and b"not valid" in exc.read()
        try:
            opener.open(urllib.request.Request(running.url + "login",
                                               data=urllib.parse.urlencode({"token": alice}).encode()), timeout=10)
            raise AssertionError("no redirect after signing in")
        except urllib.error.HTTPError as exc:
            assert exc.code == 303 and "HttpOnly" in exc.headers["Set-Cookie"]
            cookie = exc.headers["Set-Cookie"].split(";")[0]
        status, _, body = get(running.url + "api/state", Cookie=cookie)
        assert status == 200 and [j["job_id"] for j in json.loads(body)["jobs"]] == ["ja"]
        status, _, body = get(running.url + "api/state", Authorization=f"Bearer {alice}")
        assert status == 200 and [j["job_id"] for j in json.loads(body)["jobs"]] == ["ja"]
    store.close()
