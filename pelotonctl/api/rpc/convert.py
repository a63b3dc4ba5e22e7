"""Between Peloton's protobuf messages and what the API's routes take and give: a job config
message as the YAML text a job file holds, and a stored YAML (Peloton's files lowercase their keys;
json_format does not) back as a message; times as Peloton's RFC 3339 strings; pool ids."""

from __future__ import annotations

import datetime
from typing import Any

import yaml
from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

# Peloton's id of the root pool; any other pool's id here is its path.
ROOT_POOL_ID = "root"


def as_yaml(message: Message, drop: tuple[str, ...] = ()) -> str:
    """The message as a job file's YAML: keys as JSON spells the fields (camelCase, as Peloton's
    job and spec files do), enums by name, fields left unset left out; `drop` names top-level
    keys the caller passes on apart (the pool)."""
    doc = json_format.MessageToDict(message)
    for name in drop:
        doc.pop(name, None)
    return yaml.safe_dump(doc, sort_keys=False)


def loose_parse(doc: Any, message: Message) -> Message:
    """A document whose keys match the message's fields in any case and with or without
    underscores (a job file's `instancecount`, a proto's `instance_count`, JSON's `instanceCount`)
    parsed into `message`; keys the message does not have are left out."""
    if isinstance(doc, dict):
        json_format.ParseDict(_keyed(doc, message.DESCRIPTOR), message, ignore_unknown_fields=True)
    return message


def fold(key: Any) -> str:
    """A key as Peloton's files and json_format may spell it, in one form: no underscores, lower case."""
    return str(key).replace("_", "").lower()


def _keyed(doc: dict, descriptor: Descriptor) -> dict:
    by_fold = {fold(f.name): f for f in descriptor.fields}
    out: dict[str, Any] = {}
    for key, value in doc.items():
        field = by_fold.get(fold(str(key)))
        if field is None:
            continue
        out[field.name] = _value(value, field)
    return out


def _value(value: Any, field: FieldDescriptor) -> Any:
    if field.type == FieldDescriptor.TYPE_MESSAGE and not _is_map(field):
        inner = field.message_type
        if inner.full_name.startswith("google.protobuf."):
            return value
        if isinstance(value, list):
            return [_keyed(v, inner) if isinstance(v, dict) else v for v in value]
        return _keyed(value, inner) if isinstance(value, dict) else value
    if _is_map(field) and isinstance(value, dict):
        value_field = field.message_type.fields_by_name["value"]
        return {k: _value(v, value_field) for k, v in value.items()}
    if field.type == FieldDescriptor.TYPE_ENUM and isinstance(value, str):
        names = {v.name.lower(): v.name for v in field.enum_type.values}
        return names.get(value.lower(), value)
    return value


def _is_map(field: FieldDescriptor) -> bool:
    return (field.type == FieldDescriptor.TYPE_MESSAGE and field.message_type.has_options
            and field.message_type.GetOptions().map_entry)


def from_yaml(text: str | None, message: Message) -> Message:
    """A stored config (YAML text) as `message`; one that is not YAML leaves it empty."""
    try:
        doc = yaml.safe_load(text or "")
    except yaml.YAMLError:
        return message
    return loose_parse(doc, message)


def rfc3339(ms: int | None) -> str:
    """Epoch milliseconds as Peloton's time strings ("" for a time not reached)."""
    if not ms:
        return ""
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


def within(job: Any, created: Any | None, completed: Any | None) -> bool:
    """Whether the job lies in a query's time ranges (TimeRange messages, None where not given):
    the bounds the store's query does not apply, creation's max and completion's range. A job
    not ended is outside any completion range."""
    if created is not None and created.HasField("max") and job.created_ms > created.max.ToMilliseconds():
        return False
    if completed is None:
        return True
    if job.completed_ms is None:
        return False
    if completed.HasField("min") and job.completed_ms < completed.min.ToMilliseconds():
        return False
    return not (completed.HasField("max") and job.completed_ms > completed.max.ToMilliseconds())


def pool_path(pool_id: str) -> str:
    """A pool id as this API gives them (a path; Peloton's "root" is /) as a path."""
    value = (pool_id or "").strip()
    if value in ("", ROOT_POOL_ID):
        return "/"
    return "/" + value.strip("/")


def pool_id(path: str) -> str:
    return ROOT_POOL_ID if path in ("", "/") else path


def enum_value(enum: Any, name: str | None, default: str) -> int:
    """An enum's number for our state word; `default` where Peloton has no such word."""
    try:
        return int(enum.Value(name or default))
    except ValueError:
        return int(enum.Value(default))
