"""The benchmark's baseline: a 4-hop relay of small messages through the same broker, each hop
doing what a stage does per batch (consume, produce, flush, commit) and nothing else. The ratio
of the pipeline's tasks per second to the relay's messages per second says how much of the time
is ours rather than the broker's.

    python -m pelotonctl.bench.relay hop BOOTSTRAP SOURCE TARGET COUNT   one hop (a process of its own)

Every client is who PELOTON_KAFKA_USER names (the same TLS and SASL as the stages pay for).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from peloton.config import REPO_ROOT, Settings
from peloton.runtime import kafka_access

HOPS = 4
MESSAGE = b"x" * 200


def hop(bootstrap: str, source: str, target: str, count: int) -> None:
    """Pass `count` messages from source to target, a batch at a time, committing after each flush."""
    access = kafka_access(Settings(bootstrap=bootstrap, kafka_user=os.environ.get("PELOTON_KAFKA_USER", ""),
                                   kafka_password=os.environ.get("PELOTON_KAFKA_PASSWORD", ""),
                                   kafka_ca=os.environ.get("PELOTON_KAFKA_CA", "")))
    consumer = Consumer({**access, "group.id": f"relay-{source}", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "fetch.wait.max.ms": 50})
    producer = Producer({**access, "linger.ms": 5, "enable.idempotence": True})
    consumer.subscribe([source], on_assign=lambda _c, parts: parts and print("ready", flush=True))
    passed = 0
    try:
        while passed < count:
            batch = consumer.consume(1000, 0.05)
            offsets: dict[int, int] = {}
            for m in batch:
                if m.error() is not None:
                    continue
                producer.produce(target, value=m.value(), key=m.key())
                offsets[m.partition()] = m.offset() + 1
                passed += 1
            if offsets:
                producer.flush(30)
                consumer.commit(offsets=[TopicPartition(source, p, o) for p, o in offsets.items()], asynchronous=False)
    finally:
        consumer.close()


def run_relay(settings: Settings, count: int = 100_000, timeout: float = 300.0) -> dict:
    """Start the hops, send `count` messages into the first topic as fast as one producer can,
    and time them until the last arrives at the end (as settings' Kafka user, who may make topics)."""
    run = uuid.uuid4().hex[:6]
    topics = [f"bench.relay-{run}-{i}" for i in range(HOPS + 1)]
    bootstrap, access = settings.bootstrap, kafka_access(settings)
    admin = AdminClient(access)
    for future in admin.create_topics([NewTopic(t, 1, 1) for t in topics]).values():
        future.result(30)
    hops = [subprocess.Popen([sys.executable, "-m", "pelotonctl.bench.relay", "hop", bootstrap, topics[i],
                              topics[i + 1], str(count)], cwd=str(REPO_ROOT), stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PELOTON_KAFKA_USER": settings.kafka_user,
                                  "PELOTON_KAFKA_PASSWORD": settings.kafka_password,
                                  "PELOTON_KAFKA_CA": settings.kafka_ca})
            for i in range(HOPS)]
    end = Consumer({**access, "group.id": f"relay-end-{run}", "enable.auto.commit": False,
                    "auto.offset.reset": "earliest", "fetch.wait.max.ms": 50})
    end.assign([TopicPartition(topics[-1], 0, 0)])
    try:
        for p in hops:  # each hop has joined its group
            if p.stdout.readline().strip() != "ready":
                raise RuntimeError("a relay hop did not start")
        producer = Producer({**access, "linger.ms": 5})
        started = time.monotonic()
        for i in range(count):
            while True:
                try:
                    producer.produce(topics[0], value=MESSAGE, key=str(i).encode())
                    break
                except BufferError:
                    producer.poll(0.01)
        producer.flush(60)
        arrived = 0
        deadline = started + timeout
        while arrived < count and time.monotonic() < deadline:
            arrived += sum(1 for m in end.consume(5000, 0.1) if m.error() is None)
        seconds = time.monotonic() - started
    finally:
        end.close()
        for p in hops:
            p.kill()
            p.wait()
        admin.delete_topics(topics)
    return {"messages": count, "arrived": arrived, "seconds": round(seconds, 2),
            "msgs_per_s": round(arrived / seconds, 1) if seconds > 0 else 0.0}


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "hop":
        hop(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
    else:
        sys.exit(__doc__)
