"""Whether a consumer group, settled, lists a consumer: asked in a process of its own.

librdkafka's admin requests that go to a group's coordinator (DescribeConsumerGroups and the
like) can abort the process that makes them when the coordinator's connection drops as the
request goes out (librdkafka#4605 and #3663; a fix is open upstream, PR #5397). A stage asks
exactly while the brokers are in trouble: admit and place aborted so (rdkafka_queue.h,
`eonce->refcnt > 0`) when they asked during a whole-cluster restart. A child process that aborts
only means "not known this time".

    python -m peloton.runtime.membership GROUP   prints {"state": ..., "client_ids": [...], "partitions": {...}}"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

from peloton.config import Settings

log = logging.getLogger("peloton.runtime")

REQUEST_TIMEOUT_S = 5.0


def group_members(settings: Settings, group: str) -> dict | None:
    """{"state": STABLE | EMPTY | ..., "client_ids": [...], "partitions": {client id: partitions it
    holds}} of the group, or None when the broker did not say (away, slow, or the asking process
    died)."""
    try:
        done = subprocess.run([sys.executable, "-m", "peloton.runtime.membership", group], capture_output=True,
                              text=True, timeout=REQUEST_TIMEOUT_S + 10, env={**os.environ, **settings.env()})
        if done.returncode == 0:
            return json.loads(done.stdout)
        why = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1][:300]
    except subprocess.TimeoutExpired:
        why = f"no answer in {REQUEST_TIMEOUT_S + 10:.0f}s"
    except (OSError, ValueError) as exc:  # no process to be had (memory, limits), or a garbled answer
        why = str(exc)
    log.info("could not describe group %s: %s", group, why)
    return None


def main() -> None:
    from confluent_kafka.admin import AdminClient

    from peloton.runtime.clients import QUIET, RECOVERY, kafka_access

    [group] = sys.argv[1:]
    admin = AdminClient({**kafka_access(Settings.from_env()), **RECOVERY, **QUIET})
    desc = admin.describe_consumer_groups([group], request_timeout=REQUEST_TIMEOUT_S)[group].result()
    print(json.dumps({"state": desc.state.name, "client_ids": [m.client_id for m in desc.members],
                      "partitions": {m.client_id: len(m.assignment.topic_partitions) if m.assignment else 0
                                     for m in desc.members}}))


if __name__ == "__main__":
    main()


class MembershipWatch:
    """When an instance holding no partition should ask whether its group counts it at all: after
    `after_s` without one, and then as often. A member with nothing to do (more instances than
    partitions) is asked about, and stays as it is while its group lists it."""

    def __init__(self, after_s: float) -> None:
        self.after_s = after_s
        self.unassigned_since: float | None = None
        self.next_check = 0.0

    def due(self, assigned: bool, now: float) -> float | None:
        """How long it has held nothing, when a check is due now; else None."""
        if assigned:
            self.unassigned_since = None
            return None
        if self.unassigned_since is None:
            self.unassigned_since = now
        if now - self.unassigned_since < self.after_s or now < self.next_check:
            return None
        self.next_check = now + self.after_s
        return now - self.unassigned_since

    def rejoined(self, now: float) -> None:
        self.unassigned_since = now
