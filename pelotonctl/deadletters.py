"""The dead-letter topic, for operators: list the letters, show one decoded, send a fixed one back.

A letter's number is its offset in the dead-letter topic (one partition), so it never changes.
A replay goes to the letter's source topic with the original key and a header naming the letter;
a replayed job command gets a new command id (the job manager acts once per id, and the first
one was refused), and a job config is checked first, as `job create` checks it.
"""

from __future__ import annotations

import json
import time
import uuid

from confluent_kafka import Consumer, TopicPartition

from peloton.config import Settings
from peloton.runtime import QUIET, Emitter, kafka_access
from peloton.serde import DecodeError, registry
from peloton.topics import Catalogue
from pelotonctl.admin import NotFound, UserError, emitter, validate_job

TOPIC = "dead-letters"


def read_letters(settings: Settings, timeout: float = 5.0) -> list[dict]:
    """Every letter in the topic, oldest first, each with its number."""
    catalogue = Catalogue(settings.topic_prefix)
    spec = catalogue[TOPIC]
    serde = registry()
    reader = Consumer({
        **kafka_access(settings),
        "group.id": f"{catalogue.prefix}peloton.dead-letter-reader.{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "fetch.wait.max.ms": 10,
        **QUIET,
    })
    letters: list[dict] = []
    try:
        parts = [TopicPartition(spec.name, p, 0) for p in range(spec.partitions)]
        reader.assign(parts)
        deadline = time.monotonic() + timeout
        done: set[int] = set()
        while len(done) < len(parts):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the broker at {settings.bootstrap} did not give all of {spec.name} "
                                   f"within {timeout:g}s")
            for m in reader.consume(1000, 0.1):
                if m.error() is not None:
                    continue
                try:
                    _, value = serde.decode(m.value())
                except DecodeError:
                    continue  # not a letter (someone wrote there by hand)
                letters.append({"number": m.offset() if spec.partitions == 1 else f"{m.partition()}:{m.offset()}",
                                **value})
            # Read to the high-water mark of the fetch responses (no ListOffsets round trip).
            for tp in parts:
                _low, high = reader.get_watermark_offsets(tp, cached=True)
                position = reader.position([TopicPartition(tp.topic, tp.partition)])[0].offset
                if high >= 0 and (high == 0 or position >= high):
                    done.add(tp.partition)
    finally:
        reader.close()
    return letters


def summary(letter: dict) -> dict:
    """What `dead-letters list` shows of a letter."""
    return {"number": letter["number"], "time_ms": letter["timestamp_ms"], "stage": letter["stage"],
            "source_topic": letter["source_topic"], "partition": letter["partition"], "offset": letter["offset"],
            "reason": letter["reason"]}


def list_letters(settings: Settings, since_ms: int | None = None, stage: str | None = None) -> list[dict]:
    return [summary(letter) for letter in read_letters(settings)
            if (since_ms is None or letter["timestamp_ms"] >= since_ms) and (stage is None or letter["stage"] == stage)]


def find_letter(settings: Settings, number: str) -> dict:
    letters = read_letters(settings)
    for letter in letters:
        if str(letter["number"]) == str(number).strip():
            return letter
    raise NotFound(f"no dead letter {number} (there are {len(letters)}; `pelotonctl dead-letters list` shows them)")


def decode_original(value: bytes | None) -> dict:
    """The letter's original bytes, decoded where possible: the schema and record, or why not
    and the bytes as text."""
    if value is None:
        return {"schema": None, "value": None, "error": "the message had no value"}
    try:
        schema, record = registry().decode(value)
        return {"schema": schema, "value": record}
    except DecodeError as exc:
        return {"schema": None, "value": None, "error": str(exc), "text": value[:4096].decode("utf-8", "replace"),
                "bytes": len(value)}


def show(letter: dict) -> dict:
    original = decode_original(letter["value"])
    key = letter["key"].decode("utf-8", "replace") if letter["key"] is not None else None
    return {**summary(letter), "key": key, "original": original}


def fix(letter: dict, value: dict | None, sets: dict[str, str]) -> tuple[str, dict]:
    """The record to send again: the original decoded (or `value`, a whole record), with `sets`
    replacing top-level fields. Raises UserError when the result is not a valid record."""
    original = decode_original(letter["value"])
    schema = original["schema"]
    record = value if value is not None else original["value"]
    if schema is None or record is None:
        raise UserError(f"dead letter {letter['number']}'s original cannot be decoded ({original.get('error')}); "
                        f"give the whole fixed record with --value FILE and its schema with --schema")
    record = {**record}
    for field, text in sets.items():
        if field not in record:
            raise UserError(f"--set {field}: {schema} has no field {field!r} (fields: {', '.join(record)})")
        record[field] = text if isinstance(record[field], str) or record[field] is None else json.loads(text)
    if schema == "peloton.JobCommand":
        record["command_id"] = uuid.uuid4().hex  # the refused id stays refused; this is a new command
        record["timestamp_ms"] = int(time.time() * 1000)
        if record.get("kind") == "CREATE" and record.get("config"):
            validate_job(record["config"])
    try:
        registry().encode(schema, record)
    except (ValueError, TypeError, KeyError) as exc:
        raise UserError(f"the fixed record is not a valid {schema}: {exc}") from None
    return schema, record


def replay(settings: Settings, letter: dict, value: dict | None = None, sets: dict[str, str] | None = None,
           schema: str | None = None, out: Emitter | None = None, writable: frozenset[str] | None = None) -> dict:
    """Send the letter's message (fixed by `value` and `sets`, or as it was) back to its topic,
    through `out` (which signs job commands where it holds a token; a new emitter otherwise).
    `writable`: the topic ids the sender may write (the API's: job-commands), None for any."""
    catalogue = Catalogue(settings.topic_prefix)
    spec = catalogue.by_name.get(letter["source_topic"])
    if spec is None:
        raise UserError(f"dead letter {letter['number']} came from {letter['source_topic']!r}, not a topic of this "
                        f"pipeline (PELOTON_TOPIC_PREFIX={settings.topic_prefix!r})")
    if writable is not None and spec.id not in writable:
        writers = ", ".join(spec.written_by) or "nobody"
        raise UserError(f"dead letter {letter['number']} came from {spec.name}, which only {writers} may write: this "
                        f"sender replays letters of {', '.join(sorted(writable))} only (a letter of a stage's own "
                        f"topic goes back with that topic's credentials, by an operator on the cluster)")
    if value is None and not sets:
        data, sent_schema = letter["value"], decode_original(letter["value"])["schema"]
    else:
        if schema is not None and value is not None:
            sent_schema, record = schema, value
        else:
            sent_schema, record = fix(letter, value, sets or {})
        data = registry().encode(sent_schema, record)
    if sent_schema is not None and sent_schema not in spec.value_schemas:
        raise UserError(f"{sent_schema} is not allowed on {spec.name} (allowed: {', '.join(spec.value_schemas)})")
    if data is None:
        raise UserError(f"dead letter {letter['number']} has no value to send")
    out = out or emitter(settings)
    headers = [("peloton-replay-of", f"{catalogue[TOPIC].name}@{letter['number']}".encode()),
               *((out.headers_for(spec.name, data) or []) if out.headers_for else [])]
    failed: list[str] = []
    out.producer.produce(spec.name, key=letter["key"], value=data, partition=letter["partition"], headers=headers,
                         on_delivery=lambda err, _msg: err and failed.append(str(err)))
    if out.producer.flush(settings.flush_timeout_s) or failed:
        raise ConnectionError(f"not delivered to {settings.bootstrap}: {failed or 'no answer in time'}")
    return {"number": letter["number"], "topic": spec.name, "partition": letter["partition"], "schema": sent_schema,
            "bytes": len(data)}
