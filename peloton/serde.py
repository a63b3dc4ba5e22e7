"""Avro serde in Confluent wire framing: magic byte 0, 4-byte big-endian schema id, Avro binary.

Schemas come from schemas/avro (one .avsc per type, ids in ids.yaml), parsed once per process.
Each message names its writer schema by id, so a reader can resolve an older or newer writer
against its own reader schema, and a schema registry can replace ids.yaml later.
"""

from __future__ import annotations

import contextlib
import io
import json
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fastavro
import yaml

from peloton.avrocodec import Unsupported, compile_codec, compile_head_reader
from peloton.config import REPO_ROOT

SCHEMA_DIR = REPO_ROOT / "schemas" / "avro"
# Fields alike in many records of a bundle, one after another, which the codecs read and write
# about once (avrocodec: shared spans, each its first and last field, None: to the end): a task's
# launch spec after its ids (its job's config); a task status after its run and host (its state,
# reason, time); a gang's fields between its id and its tasks (its job's), and its time; an
# admission's and a placement's time (one per batch); a release's after its task id (its job's,
# its end's kind, the batch's time).
SHARED_SPANS: dict[str, tuple[tuple[str, str | None], ...]] = {
    "peloton.TaskLaunchSpec": (("resources", None),), "peloton.TaskStatus": (("state", None),),
    "peloton.GangDemand": (("job_id", "placement_strategy"), ("created_ms", None)),
    "peloton.AdmittedGang": (("admitted_ms", None),), "peloton.Placement": (("placed_ms", None),),
    "peloton.TaskRelease": (("job_id", None),)}
# Records a stage passes on as it read them: entitle sends each gang it reads from a GangDemands
# bundle inside its AdmittedGang, and place each task's launch spec it reads in an AdmittedGang
# inside its Placement. Read from those messages (KEEP_BYTES: message -> the records it keeps),
# such a record keeps its bytes (avrocodec.Encoded), and any writer of it writes them again
# rather than encoding it anew.
PASSED_ON = frozenset({"peloton.GangDemand", "peloton.TaskLaunchSpec"})
KEEP_BYTES = {"peloton.GangDemands": frozenset({"peloton.GangDemand"}),
              "peloton.AdmittedGangs": frozenset({"peloton.TaskLaunchSpec"}),
              "peloton.AdmittedGang": frozenset({"peloton.TaskLaunchSpec"})}
_HEADER = struct.Struct(">bI")
MAGIC = 0


class DecodeError(ValueError):
    """The bytes are not a message of a schema we know."""


class SchemaRegistry:
    """Schemas by name (the newest version, used to write) and by id (every version, to read).

    ids.yaml maps `peloton.Name` to the id of its current version and `peloton.Name@N` to the id
    of an older version N, kept in Name.vN.avsc: what an older writer wrote is read with its own
    schema and resolved into the current one (new fields take their defaults)."""

    def __init__(self, schema_dir: Path = SCHEMA_DIR):
        ids = yaml.safe_load((schema_dir / "ids.yaml").read_text())
        named: dict[str, Any] = {}
        self.by_name: dict[str, tuple[int, Any]] = {}
        self.by_id: dict[int, tuple[str, Any]] = {}
        older: dict[int, tuple[str, dict]] = {}
        for name, schema_id in ids.items():
            base, _, version = name.partition("@")
            short = base.split(".")[-1]
            if version:
                older[schema_id] = (base, json.loads((schema_dir / f"{short}.v{version}.avsc").read_text()))
                continue
            raw = json.loads((schema_dir / f"{short}.avsc").read_text())
            parsed = fastavro.parse_schema(raw, named_schemas=named)
            self.by_name[name] = (schema_id, parsed)
            self.by_id[schema_id] = (name, parsed)
        self._writers: dict[int, Any] = {}  # id of an older version -> its parsed writer schema
        for schema_id, (name, raw) in older.items():
            # Parsed against a copy, so an old version never replaces a current named type; the
            # types it writes out in full (its own, and any older nested type) are its own.
            own = _defined_names(raw)
            known = {n: s for n, s in named.items() if n not in own}
            self._writers[schema_id] = fastavro.parse_schema(raw, named_schemas=known)
            self.by_id[schema_id] = (name, self.by_name[name][1])
        self.named = named  # name -> parsed schema, for references between files
        # Functions made for each current schema (avrocodec: a third of fastavro's time); fastavro
        # reads what older versions wrote, resolving it into the current schema.
        self._codecs: dict[str, tuple[Callable[[dict], bytes], Callable[[bytes, int], dict]]] = {}
        for name, (_id, parsed) in self.by_name.items():
            with contextlib.suppress(Unsupported):
                self._codecs[name] = compile_codec(parsed, named, SHARED_SPANS, PASSED_ON, KEEP_BYTES.get(name, ()))

    def encode(self, name: str, record: dict) -> bytes:
        return self.header(name) + self.encode_body(name, record)

    def header(self, name: str) -> bytes:
        return _HEADER.pack(MAGIC, self.by_name[name][0])

    def encode_body(self, name: str, record: dict) -> bytes:
        """The Avro payload alone, without the framing. Raises ValueError for a record that does
        not fit the schema."""
        codec = self._codecs.get(name)
        if codec is None:
            buf = io.BytesIO()
            fastavro.schemaless_writer(buf, self.by_name[name][1], record)
            return buf.getvalue()
        try:
            return codec[0](record)
        except Exception as exc:  # a missing field, a value of the wrong type
            raise ValueError(f"not a valid {name}: {type(exc).__name__}: {exc}") from exc

    def bundle(self, item: str, bodies: list[bytes], key: str) -> bytes:
        """One message of the bundle schema of `item` holding the encoded items (encode_body), made
        by joining their bytes: an Avro array is a count, the items' bytes and a 0. The bundle's
        array is its last field; a field before it (TaskStatuses' job_id) carries the key."""
        bundle, _field, key_field = BUNDLES[item]
        prefix = _avro_string(key) if key_field else b""
        return self.header(bundle) + prefix + _avro_long(len(bodies)) + b"".join(bodies) + b"\x00"

    def decode(self, data: bytes | None) -> tuple[str, dict]:
        if data is None or len(data) < 5:
            raise DecodeError("message is shorter than the 5-byte Confluent header")
        magic, schema_id = _HEADER.unpack_from(data)
        if magic != MAGIC:
            raise DecodeError(f"magic byte {magic}, expected {MAGIC} (not Confluent-framed Avro)")
        entry = self.by_id.get(schema_id)
        if entry is None:
            raise DecodeError(f"unknown schema id {schema_id}")
        name, schema = entry
        writer = self._writers.get(schema_id, schema)
        codec = self._codecs.get(name) if writer is schema else None
        try:
            if codec is not None:
                return name, codec[1](data, 5)
            # Every schema here is a record, which fastavro reads as a dict (its type: any Avro value).
            record: dict = fastavro.schemaless_reader(  # type: ignore[assignment]
                io.BytesIO(data[5:]), writer, schema if writer is not schema else None)
        except Exception as exc:  # fastavro raises several types on corrupt payloads
            raise DecodeError(f"payload does not decode as {name}: {exc.__class__.__name__}: {exc}") from exc
        return name, record

    def head_decoder(self, name: str, last: str) -> Callable[[bytes | None], tuple[str, dict]]:
        """A decode() for a reader that needs the fields of `name` up to `last` only, and reads no
        further (avrocodec.compile_head_reader); other schemas and older versions of this one it
        decodes in full."""
        read = compile_head_reader(self.by_name[name][1], self.named, last)
        header = self.header(name)

        def decode(data: bytes | None) -> tuple[str, dict]:
            if data is None or not data.startswith(header):
                return self.decode(data)
            try:
                return name, read(data, 5)
            except Exception as exc:
                raise DecodeError(f"payload does not decode as {name}: {exc.__class__.__name__}: {exc}") from exc

        return decode

    def schema(self, name: str) -> Any:
        return self.by_name[name][1]


# Bundles: several records of one schema and one key in one message, as the runtime's Emitter
# sends what a batch produced (a message per record would cost the broker and every reader far
# more than the record itself). Item schema -> (bundle schema, its array field, the field before
# it that carries the key, if any). The runtime hands readers each item as a record of its own.
BUNDLES: dict[str, tuple[str, str, str | None]] = {
    "peloton.GangDemand": ("peloton.GangDemands", "gangs", None),
    "peloton.TaskRelease": ("peloton.TaskReleases", "releases", None),
    "peloton.AdmittedGang": ("peloton.AdmittedGangs", "gangs", None),
    "peloton.Placement": ("peloton.Placements", "placements", None),
    "peloton.TaskStatus": ("peloton.TaskStatuses", "statuses", "job_id"),
}
BUNDLED: dict[str, tuple[str, str]] = {bundle: (item, field) for item, (bundle, field, _) in BUNDLES.items()}


def unbundle(schema: str, value: dict) -> tuple[str, list[dict]]:
    """(item schema, items) of a bundle; a record that is no bundle is its own one item."""
    if schema in BUNDLED:
        item, field = BUNDLED[schema]
        return item, value[field]
    return schema, [value]


def _avro_long(n: int) -> bytes:
    n = (n << 1) ^ (n >> 63)  # zigzag
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _avro_string(text: str) -> bytes:
    data = text.encode()
    return _avro_long(len(data)) + data


def _defined_names(schema: Any, namespace: str = "") -> set[str]:
    """Full names of the record, enum and fixed types a raw schema defines in place."""
    if isinstance(schema, list):  # a union
        return set().union(*(_defined_names(branch, namespace) for branch in schema))
    if not isinstance(schema, dict):
        return set()  # a primitive, or a reference to a type defined elsewhere
    found: set[str] = set()
    if schema.get("type") in ("record", "enum", "fixed"):
        namespace = schema.get("namespace", namespace)
        name = schema["name"]
        found.add(name if "." in name or not namespace else f"{namespace}.{name}")
    for f in schema.get("fields", []):
        found |= _defined_names(f["type"], namespace)
    for key in ("type", "items", "values"):
        if isinstance(schema.get(key), (dict, list)):
            found |= _defined_names(schema[key], namespace)
    return found


_default: SchemaRegistry | None = None


def registry() -> SchemaRegistry:
    global _default
    if _default is None:
        _default = SchemaRegistry()
    return _default
