"""What one transactional Kafka client waits when a broker of three dies: the yardstick of the
three-broker failure test (docs/benchmarks/history.md, "Losing one broker of three"), measured alone.

    .venv/bin/python -m pelotonctl.bench.failover                      # 4 rounds of the three ways
    .venv/bin/python -m pelotonctl.bench.failover 8 renew,abort --json

A throwaway cluster of three nodes. In each trial a producer writes a record to each of six
partitions every 20 ms and commits each batch in a transaction coordinated by the node that is
then SIGKILLed mid-stream. acks=all writes wait for that node until the controller fences it, so
the producer's flush outlives the kill, and it recovers one of three ways:
- renew: a new producer under the same transactional id, whose init has the coordinator abort
  the old attempt (what a stage does, peloton.runtime.transaction);
- abort: abort_transaction on the same producer, then the batch again (after the coordinator's
  move mostly refused with a fatal INVALID_TXN_STATE; then a new producer takes over);
- keep: the same transaction flushed until through, then committed (the textbook loop).
Each trial prints how long after the controller's fencing line (its log) the producer committed
again, whether the dead node was the active controller (the election is then about 2.5 s
longer: the quorum elects another first), and how often and for how long the brokers refused a
transaction marker after the kill (their logs; a coordinator whose markers are refused keeps the
next transaction waiting); the node is started again and the leaders moved back before the next.
The ways take turns, so the machine's mood spreads over all of them.
"""

from __future__ import annotations

import contextlib
import json
import random
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import ElectionType, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from peloton.config import Settings
from peloton.runtime.clients import QUIET, producer_config
from pelotonctl.dev.coordinators import coordinated_by
from pelotonctl.dev.kafka import KafkaCluster

WAYS = ("renew", "abort", "keep")
TOPIC = "failover-bench"
PARTITIONS = 6
CALL_S = 3.0  # each transactional call's timeout, the stages' (transaction.CALL_TIMEOUT_S)


class TransactionalWriter(threading.Thread):
    """The producer of one trial, recovering its way from a flush that outlived the broker."""

    def __init__(self, bootstrap: str, transactional_id: str, way: str):
        super().__init__(daemon=True)
        self.config = {**producer_config(Settings(bootstrap=bootstrap), transactional_id), **QUIET}
        self.way = way
        self.commits: list[float] = []  # wall clock
        self.said: list[tuple[float, str]] = []  # what its calls answered, wall clock
        self.running = True

    def _retried(self, call, what: str) -> None:
        while self.running:
            try:
                return call()
            except KafkaException as exc:
                self.said.append((time.time(), f"{what}: {exc.args[0].name()}"))
                if not exc.args[0].retriable():
                    raise

    def _producer(self) -> Producer:
        producer = Producer(self.config)
        self._retried(lambda: producer.init_transactions(CALL_S), "init")
        return producer

    def run(self) -> None:
        producer = self._producer()
        while self.running:
            try:
                producer.begin_transaction()
                for partition in range(PARTITIONS):
                    producer.produce(TOPIC, b"-", partition=partition)
                if producer.flush(CALL_S):
                    self.said.append((time.time(), "flush timed out"))
                    if self.way == "renew":
                        producer.purge()
                        producer.flush(0)
                        producer = self._producer()
                        continue
                    if self.way == "abort":
                        self._retried(lambda p=producer: p.abort_transaction(CALL_S), "abort")
                        continue
                    while self.running and producer.flush(CALL_S):
                        pass
                self._retried(lambda p=producer: p.commit_transaction(CALL_S), "commit")
                self.commits.append(time.time())
            except KafkaException as exc:
                err = exc.args[0]
                self.said.append((time.time(), f"{err.name()}"))
                if err.fatal():
                    producer = self._producer()
                elif err.txn_requires_abort():
                    self._retried(lambda p=producer: p.abort_transaction(CALL_S), "abort")
            time.sleep(0.02)


def summary(trials: list[dict]) -> dict:
    """Per way: the trials measured, and the least, median and most seconds from the fencing line
    to the next commit."""
    out = {}
    for way in dict.fromkeys(t["way"] for t in trials):
        waits = sorted(t["commit_after_fencing_s"] for t in trials
                       if t["way"] == way and t["commit_after_fencing_s"] is not None)
        out[way] = {"trials": len(waits), "min_s": waits[0] if waits else None,
                    "median_s": round(statistics.median(waits), 2) if waits else None,
                    "max_s": waits[-1] if waits else None}
    return out


def trial(cluster: KafkaCluster, admin: AdminClient, way: str, n: int) -> dict:
    """One kill: a node that leads some of __transaction_state, a transactional id it coordinates."""
    meta = admin.list_topics(topic="__transaction_state", timeout=10).topics["__transaction_state"]
    dead = random.choice(sorted({p.leader for p in meta.partitions.values() if p.leader >= 0}))
    writer = TransactionalWriter(cluster.bootstrap, coordinated_by(admin, "__transaction_state", dead,
                                                                   f"failover-{n}-{way}"), way)
    writer.start()
    time.sleep(3 + random.random())  # steady by then; the kill lands anywhere in a batch's life
    killed = time.time()
    cluster.kill(dead, signal.SIGKILL)
    deadline = killed + 60
    while time.time() < deadline and not any(c > killed for c in writer.commits):
        time.sleep(0.05)
    fenced = cluster.wait_fenced(dead, killed)
    refused, refused_over = cluster.refused_markers(killed)
    again = next((c for c in writer.commits if c > killed), None)
    writer.running = False
    writer.join(15)
    cluster.start_node(dead)
    time.sleep(2)
    # its leaderships back, so the next trial can kill any node; nothing to move is fine
    with contextlib.suppress(Exception):
        admin.elect_leaders(ElectionType.PREFERRED, None).result()
    time.sleep(3)
    return {"way": way, "node": dead, "was_controller": cluster.active_controller(killed) == dead,
            "fenced_after_kill_s": round(fenced - killed, 2) if fenced else None,
            "commit_after_fencing_s": round(again - fenced, 2) if again and fenced else None,
            "markers_refused": refused, "markers_refused_over_s": round(refused_over, 2),
            "said": [f"{t - (fenced or killed):+.2f}s {what}" for t, what in writer.said if t > killed - 1][:10]}


def bench_failover(rounds: int = 4, ways: tuple[str, ...] = WAYS, each=None) -> list[dict]:
    """`rounds` trials of each way, taking turns; `each(trial)` is told of each as it ends."""
    home = Path(tempfile.mkdtemp(prefix="peloton-failover-bench-"))
    cluster = KafkaCluster.create(home / "kafka", nodes=3)
    cluster.start()
    trials = []
    try:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap, **QUIET})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)])[TOPIC].result()
        warm = TransactionalWriter(cluster.bootstrap, "failover-warm", "renew")  # makes __transaction_state
        warm.start()
        time.sleep(3)
        warm.running = False
        warm.join(15)
        for n in range(rounds):
            for way in ways:
                trials.append(trial(cluster, admin, way, n))
                if each:
                    each(trials[-1])
    finally:
        for node in cluster.nodes:
            cluster.kill(node.node_id, signal.SIGKILL)
        shutil.rmtree(home, ignore_errors=True)
    return trials


def main() -> None:
    args = [a for a in sys.argv[1:] if a != "--json"]
    ways = tuple(args[1].split(",")) if len(args) > 1 else WAYS
    rounds = int(args[0]) if args and args[0].isdigit() else 0 if args else 4
    if rounds < 1 or len(args) > 2 or any(w not in WAYS for w in ways):
        sys.exit(f"usage: python -m pelotonctl.bench.failover [ROUNDS>=1] [WAY,...] [--json]; ways: {', '.join(WAYS)}")
    as_json = "--json" in sys.argv

    def each(t: dict) -> None:
        if not as_json:
            said = ", ".join(dict.fromkeys(line.split("s ", 1)[1] for line in t["said"]))
            node = f"node {t['node']}{' (the active controller)' if t['was_controller'] else ''}"
            print(f"{t['way']:6} {node} fenced {t['fenced_after_kill_s']}s after the kill; "
                  f"committed again {t['commit_after_fencing_s']}s after the fencing ({said or 'no error'}); "
                  f"markers refused {t['markers_refused']} times over {t['markers_refused_over_s']}s",
                  flush=True)

    trials = bench_failover(rounds, ways, each)
    if as_json:
        print(json.dumps({"trials": trials, "summary": summary(trials)}, indent=2))
        return
    for way, s in summary(trials).items():
        print(f"{way:6} {s['trials']} trials: committed again {s['min_s']}-{s['max_s']}s after the fencing, "
              f"median {s['median_s']}s")


if __name__ == "__main__":
    main()
