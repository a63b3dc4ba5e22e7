"""Settings of the Kafka clients the runtime makes: how they find the brokers again, how a stage's
producer delivers, how long a reader waits on a fetch."""

from __future__ import annotations

from peloton.config import Settings

# For every client that lives as long as its process (a stage's, an agent's, a view's, the lag
# sampler's): what brings it back after the brokers went away.
RECOVERY = {
    # Try a lost broker again at least every second (the Java client's default; librdkafka's is
    # 10 s). librdkafka looks a coordinator up again only when its connection attempt fails: with
    # the backoff doubling to 10 s, a stage whose transaction coordinator died would learn its
    # successor seconds after the election, and its batch would wait that long.
    "reconnect.backoff.max.ms": 1000,
    # A broker in controlled shutdown can answer metadata with no brokers at all; librdkafka
    # then forgets every broker it knew and, with the default (5 min), bootstraps again only
    # after 5 minutes without metadata, so after a whole-cluster restart a stage would sit
    # without partitions long after the brokers are back.
    "metadata.recovery.rebootstrap.trigger.ms": 5000,
    # Ask for the topics' leaders every second (librdkafka's default: every 5 minutes). A client
    # asks again at once when a broker's connection drops, but then the dead broker still leads
    # (the controller fences it seconds later), and a client with nothing in flight to it learns
    # the new leaders late: after losing one broker of three, the hop from place to launch came
    # back 1.1-2.1 s after the election in four runs of five; with this, 0.3-0.5 s, and the job
    # started tasks again 2.2-2.4 s after it instead of 3.1-4.5 s (three runs; the bench's CPU,
    # broker included, unchanged). One small metadata request a second per client.
    "topic.metadata.refresh.interval.ms": 1000,
}

# Consumers also fetch again 100 ms after a failed fetch (librdkafka waits 500 ms): a partition
# whose leader died is read from its new leader that much sooner, at every hop a task crosses.
# Losing one broker of three, the job paused 3.4, 5.6 and 2.3 s past the election with 500 ms,
# 1.9, 2.2, 1.8 and 3.8 s with 100 ms (the three-broker test, one task's 1 s run included).
CONSUMER_RECOVERY = {**RECOVERY, "fetch.error.backoff.ms": 100}


def kafka_access(settings: Settings) -> dict:
    """Where the brokers are and who this client is: every client the project makes starts from
    this. With a user, SASL SCRAM-SHA-512 over TLS (the broker's certificate checked against
    kafka_ca, its address against the certificate)."""
    config = {"bootstrap.servers": settings.bootstrap}
    if settings.kafka_user:
        config.update({"security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-512",
                       "sasl.username": settings.kafka_user, "sasl.password": settings.kafka_password})
        if settings.kafka_ca:
            config["ssl.ca.location"] = settings.kafka_ca
    return config


def producer_config(settings: Settings, transactional_id: str | None = None) -> dict:
    """A producer's settings. With a transactional id: the producer of a stage instance, whose
    output and consumed offsets commit together (peloton.runtime.transaction)."""
    config = {
        **kafka_access(settings),
        # Every in-sync replica has a message before it counts as sent (min.insync.replicas of the
        # topic decides how many must be in sync), and retries never write it twice.
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": 5,
        "batch.num.messages": 10000,
        "compression.type": "none",
        # Small requests go at once rather than waiting on Nagle and the peer's delayed ack.
        "socket.nagle.disable": True,
        # Java-compatible key hashing, so other producers land keys on the same partitions.
        "partitioner": "murmur2_random",
        # Never give up on a message while the broker is away: a message that timed out would be
        # lost after its batch's offsets were committed. flush() reports the wait instead.
        "message.timeout.ms": 0,
        "message.max.bytes": settings.max_message_bytes + MESSAGE_OVERHEAD,
        # Topics come from topics.yaml only: one a client made would have the broker's default
        # partition count, and keys would land where no stage looks for them.
        "allow.auto.create.topics": False,
        **RECOVERY,
        **debug_config(settings),
    }
    if transactional_id:
        timeout_ms = int(settings.transaction_timeout_s * 1000)
        config.update({
            "transactional.id": transactional_id,
            # How long a transaction left open by a killed instance holds back its readers
            # (read_committed) before the coordinator aborts it; a restart under the same id
            # aborts it at once. A message may not outlive its transaction.
            "transaction.timeout.ms": timeout_ms,
            "message.timeout.ms": timeout_ms,
            # The coordinator answers CONCURRENT_TRANSACTIONS while it finishes the previous
            # transaction: the default 100 ms backoff made every batch wait that long.
            "retry.backoff.ms": 10,
            "retry.backoff.max.ms": 100,
        })
    return config


def debug_config(settings: Settings) -> dict:
    """librdkafka's debug contexts when PELOTON_KAFKA_DEBUG names some (into the process's log)."""
    return {"debug": settings.kafka_debug} if settings.kafka_debug else {}


# Room for the key, headers and batch framing on top of a record's value.
MESSAGE_OVERHEAD = 4096


# fetch.wait.max.ms of a stage's consumer and of a view's (see StageRuntime's consumer). A view
# reads state that changes now and then (hosts, pool usage): it can wait longer.
FETCH_WAIT_MS = 100
VIEW_FETCH_WAIT_MS = 250


# A command line prints its own one-line error; librdkafka's reconnect chatter (one line per
# attempt, every 50 ms) would bury it, so CLI clients log only librdkafka's critical messages.
QUIET = {"log_level": 2}
