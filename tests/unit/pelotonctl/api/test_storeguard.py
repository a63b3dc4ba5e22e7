"""The API's store guard without a database server: a store that hangs (a server whose processes
are stopped) or refuses (a server stopped) holds no call past the deadline, is said in one line
naming it, answers the reads it remembers from memory, and is used again once it answers."""

from __future__ import annotations

import contextlib
import threading
import time

import pytest

from pelotonctl.api.storeguard import (
    ANSWER,
    Answer,
    GuardedStore,
    StoreAway,
    StoreGuard,
    describe_store,
    reason_of,
)

DEADLINE_S = 0.3


class Store:
    """A store whose calls hang while `hung` is set and fail as a stopped server's while `stopped`."""

    def __init__(self) -> None:
        self.hung, self.stopped = threading.Event(), False
        self.released = threading.Event()
        self.threads: list[str] = []
        self.revoked: list[str] = []

    def _answer(self, value):
        self.threads.append(threading.current_thread().name)
        if self.hung.is_set():
            self.released.wait(30)
        if self.stopped:
            import sqlite3

            raise sqlite3.OperationalError("unable to open database file")
        return value

    def get_token(self, token_id: str):
        return self._answer({"token_id": token_id} if token_id != "unknown" else None)

    def get_job(self, job_id: str):
        return self._answer({"job_id": job_id})

    def list_pools(self):
        return self._answer({"/a": {}})

    def revoke_token(self, token_id: str, at_ms: int) -> bool:
        self.revoked.append(token_id)
        return self._answer(True)

    @contextlib.contextmanager
    def transaction(self):
        self.threads.append(f"begin:{threading.current_thread().name}")
        yield self
        self.threads.append(f"end:{threading.current_thread().name}")


@pytest.fixture
def guarded():
    store = Store()
    guard = StoreGuard(store, "PostgreSQL at 127.0.0.1:5432", deadline_s=DEADLINE_S, probe_s=0.05)
    answer = Answer(needs="job status")
    token = ANSWER.set(answer)
    yield store, guard, GuardedStore(guard), answer
    ANSWER.reset(token)
    store.released.set()
    guard.close()


def test_stores_are_named_by_kind_and_address_never_with_a_password() -> None:
    assert describe_store("postgresql://peloton:secret@127.0.0.1:5433/peloton") == "PostgreSQL at 127.0.0.1:5433"
    assert describe_store("postgres://db.example/peloton") == "PostgreSQL at db.example:5432"
    assert describe_store("cassandra://u:p@n1:9042,n2:9042/peloton") == "Cassandra at n1:9042,n2:9042"
    assert describe_store("/var/lib/peloton/peloton.db") == "SQLite at /var/lib/peloton/peloton.db"
    assert describe_store("sqlite:///tmp/p.db") == "SQLite at /tmp/p.db"


def test_why_a_call_failed_is_said_in_a_few_words() -> None:
    assert reason_of(TimeoutError(), 5.0) == "did not answer within 5 s"
    refused = OSError('connection failed: connection to server at "127.0.0.1", port 5432 failed: Connection refused\n'
                      '\tIs the server running on that host and accepting TCP/IP connections?')
    assert reason_of(refused, 5.0) == "is unavailable (connection refused)"
    pool_timeout = type("PoolTimeout", (Exception,), {})("couldn't get a connection after 5.00 sec")
    assert reason_of(pool_timeout, 5.0) == "gave no connection within 5 s"


def test_a_hung_store_answers_within_the_deadline_in_one_line_and_then_at_once(guarded) -> None:
    store, guard, db, _answer = guarded
    assert db.get_job("j1") == {"job_id": "j1"}
    store.hung.set()
    started = time.monotonic()
    with pytest.raises(StoreAway) as away:
        db.get_job("j1")
    assert DEADLINE_S <= time.monotonic() - started < DEADLINE_S + 0.5
    assert away.value.status == 503
    assert away.value.reason == ("the store (PostgreSQL at 127.0.0.1:5432) did not answer within 0.3 s: "
                                 "job status needs it")
    asked = len(store.threads)
    started = time.monotonic()
    with pytest.raises(StoreAway):
        db.get_job("j1")
    assert time.monotonic() - started < 0.1 and len(store.threads) <= asked + 1  # nothing more piles up (a probe)


def test_a_store_away_for_a_while_says_since_when(guarded) -> None:
    store, guard, db, _answer = guarded
    now = [1_000_000.0]
    guard.clock = lambda: now[0]
    store.stopped = True
    with pytest.raises(StoreAway):
        db.get_job("j1")
    now[0] += 30
    with pytest.raises(StoreAway) as away:
        db.get_job("j1")
    since = time.strftime("%H:%M:%S", time.localtime(1_000_000.0))
    assert away.value.reason == (f"the store (PostgreSQL at 127.0.0.1:5432) has not answered since {since} (is "
                                 f"unavailable (unable to open database file)): job status needs it")


def test_remembered_reads_answer_from_memory_while_the_store_is_away_and_mark_the_answer(guarded) -> None:
    store, guard, db, answer = guarded
    assert db.get_token("t1") == {"token_id": "t1"} and db.list_pools() == {"/a": {}}
    assert db.get_token("unknown") is None
    store.stopped = True
    assert db.get_token("t1") == {"token_id": "t1"}  # the call that finds it away answers from memory too
    assert db.list_pools() == {"/a": {}}
    assert answer.without_store == ["the store (PostgreSQL at 127.0.0.1:5432) is unavailable (unable to open "
                                    "database file)"]
    with pytest.raises(StoreAway):
        db.get_token("unknown")  # never known: not let in
    with pytest.raises(StoreAway):
        db.get_job("j1")  # not remembered: the store is needed


def test_a_revoked_token_is_not_served_from_memory(guarded) -> None:
    store, guard, db, _answer = guarded
    db.get_token("t1")
    db.revoke_token("t1", 5)
    store.stopped = True
    with pytest.raises(StoreAway):
        db.get_token("t1")


def test_the_store_is_used_again_once_it_answers(guarded) -> None:
    store, guard, db, _answer = guarded
    store.hung.set()
    with pytest.raises(StoreAway):
        db.get_job("j1")
    assert guard.away is not None
    store.hung.clear()
    store.released.set()  # the hung server answers again
    deadline = time.monotonic() + 5
    while guard.away is not None:
        assert time.monotonic() < deadline, "the probe never found the store back"
        time.sleep(0.02)
    assert db.get_job("j1") == {"job_id": "j1"}


def test_a_transaction_runs_in_one_worker_of_its_own_and_nested_ones_join_it(guarded) -> None:
    store, guard, db, _answer = guarded
    with db.transaction():
        db.get_job("j1")
        with db.transaction():
            db.list_pools()
    names = store.threads
    assert names[0].startswith("begin:store-tx") and names[-1].startswith("end:store-tx")
    worker = names[0].removeprefix("begin:")
    assert names == [f"begin:{worker}", worker, f"begin:{worker}", worker, f"end:{worker}", f"end:{worker}"]
    store.stopped = True
    with pytest.raises(StoreAway), db.transaction():
        db.get_job("j1")
    with pytest.raises(StoreAway), db.transaction():  # away: nothing is begun
        pass


def test_a_store_away_when_the_guard_closed_is_probed_again_by_the_next_call(guarded) -> None:
    store, guard, db, _answer = guarded
    store.stopped = True
    with pytest.raises(StoreAway):
        db.get_job("j1")
    guard.close()  # the app's lifespan ended (it may start again): the probe ends with it
    store.stopped = False
    with pytest.raises(StoreAway):
        db.get_job("j1")  # still said away, and its probe started again
    deadline = time.monotonic() + 5
    while guard.away is not None:
        assert time.monotonic() < deadline, "no probe found the store back"
        time.sleep(0.02)
    assert db.get_job("j1") == {"job_id": "j1"}
