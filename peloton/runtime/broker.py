"""What a stage instance asks the broker beside its reads: the ends of partitions (how far a topic
has been written), and whether every topic is there as topics.yaml says, made again where one is
gone. Through one admin client, made at the first question."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from confluent_kafka import Consumer, KafkaException
from confluent_kafka.admin import OffsetSpec

from peloton.config import Settings
from peloton.runtime.clients import RECOVERY, kafka_access
from peloton.topics import Catalogue

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient

log = logging.getLogger("peloton.runtime")


class BrokerQuestions:
    def __init__(self, settings: Settings, catalogue: Catalogue) -> None:
        self.settings, self.catalogue = settings, catalogue
        self._admin: AdminClient | None = None

    def admin(self) -> AdminClient:
        if self._admin is None:
            from confluent_kafka.admin import AdminClient

            self._admin = AdminClient({**kafka_access(self.settings), **RECOVERY})
        return self._admin

    def ends(self, topic: str, partitions: list[int], timeout: float = 0.5) -> dict[int, int] | None:
        """The high-water marks of these partitions of any topic, asked of the broker now; None
        when it does not answer them all within `timeout`."""
        from peloton.runtime.readback import offsets_at

        name = self.catalogue[topic].name
        ends = offsets_at(self.admin(), [(name, p) for p in partitions], OffsetSpec.latest(), timeout)
        return {p: end for (_, p), end in ends.items()} if len(ends) == len(partitions) else None

    def check_topics(self, consumer: Consumer, first: bool) -> bool:
        """At start (`first`), check every topic against topics.yaml and say what differs; later,
        make again any topic that is gone (an operator deleted it, or the cluster was wiped):
        consumers would wait for it for ever, and produced messages would fail. True once the
        topics were checked."""
        from peloton.topics import apply_topics

        if not first:
            try:
                present = consumer.list_topics(timeout=2).topics
            except KafkaException:
                return False  # the broker is away; the loop waits for it
            missing = [t.name for t in self.catalogue if t.name not in present]
            if not missing:
                return False
            log.warning("topics missing on the broker (deleted, or the cluster was wiped?): %s; making them "
                        "from topics.yaml", ", ".join(missing))
        try:
            report = apply_topics(self.admin(), self.catalogue, fix=False)
        except Exception as exc:  # the broker is away, or another instance is making them too
            log.warning("could not check the topics: %s", exc)
            return False
        for row in report:
            if row["status"] not in ("ok", "created"):
                log.warning("topic %s %s (topics.yaml; `pelotonctl topics apply` sets it)", row["topic"], row["status"])
        return True
