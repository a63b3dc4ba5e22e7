"""The records a stage reads: one decoded message, or one record of a bundle as if it came alone."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from peloton.serde import SchemaRegistry, unbundle

if TYPE_CHECKING:
    from confluent_kafka._types import HeadersType

    from peloton.topics import TopicSpec


def now_ms() -> int:
    """Wall-clock milliseconds, as records carry their times."""
    return int(time.time() * 1000)


@dataclass(slots=True)
class Record:
    """One decoded input message."""

    topic: str  # logical topic id
    partition: int
    offset: int
    key: str | None
    schema: str
    value: dict
    raw_key: bytes | None
    raw_value: bytes | None  # for an item of a bundle, the whole bundle
    index: int = -1  # the item's place in its bundle (serde.BUNDLES); -1: the message was this record alone
    headers: tuple = ()  # the message's Kafka headers, (name, bytes) pairs (a job command's signature)


class WrongSchema(ValueError):
    """A message of a schema its topic does not carry."""


def decode_message(serde: SchemaRegistry, spec: TopicSpec, partition: int, offset: int, raw_key: bytes | None,
                   raw_value: bytes | None, headers: HeadersType | None = None) -> list[Record]:
    """The records of one message: itself, or each record of a bundle as if it came alone.
    Raises DecodeError or WrongSchema."""
    schema, value = serde.decode(raw_value)
    if schema not in spec.value_schemas:
        raise WrongSchema(f"schema {schema} is not allowed on {spec.id} (allowed: {', '.join(spec.value_schemas)})")
    key = raw_key.decode("utf-8", "replace") if raw_key is not None else None
    item, values = unbundle(schema, value)
    pairs = tuple(headers or ())
    if item == schema:
        return [Record(spec.id, partition, offset, key, schema, value, raw_key, raw_value, -1, pairs)]
    return [Record(spec.id, partition, offset, key, item, v, raw_key, raw_value, i, pairs)
            for i, v in enumerate(values)]
