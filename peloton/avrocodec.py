"""Avro binary encoders and decoders made for one schema each, as Python source compiled once.

Why: every record a stage sends is encoded once and decoded once per hop, and fastavro's generic
writer and reader, which walk the schema for every record, took 10-30 us a record here (a
TaskStatus 14 us each way, a GangDemand 26). A function written for the schema does the same in
a third of that. The bytes are plain Avro binary, the same fastavro writes (the unit tests
compare the two on every schema); fastavro still reads older writer versions (schema
resolution) and anything these functions do not cover.

Covered: null, boolean, int, long, double, string, bytes, enum, array, map, record, and unions of
null with one other type; `Unsupported` is raised for the rest.

A shared span: fields of a record, one after another, that are alike in many records near each
other (a job's tasks' launch specs are alike but for their ids; a host manager's statuses but for
their runs and hosts; a job's gangs but for their ids and tasks). The writer keeps the last few
spans' bytes and reuses them where the values come again; the reader keeps the last few spans'
bytes and values, and where the same bytes follow, hands out the same values without reading them
again (Avro's bytes delimit themselves, so the same bytes read as the same values and end at the
same place). So a bundle of a job's 1,000 alike tasks reads and writes its spec about once;
records that share a span share its value objects, which readers treat as read-only. The reader
of a record whose longest span has three fields or more keeps that record whole as a dict (the
span's values in place) and hands out a copy of it with the other fields set: copying a dict is
cheaper than writing one out.

A record passed on: a stage that sends on a record as it read it (entitle, each gang; place,
each task's launch spec) can have it read as an `Encoded`, which keeps its bytes, and the writers
of its schema write those again.
A head reader reads a large record's leading fields and stops (compile_head_reader).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Collection
from typing import Any, NoReturn, Self

_DOUBLE = struct.Struct("<d")
_PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}


# Spans a record's writer and reader each keep, per span: a host's statuses go out interleaved (a
# run's TASK_STARTING, then its TASK_RUNNING, then the next run's), so one kept span would never
# match.
SPANS_KEPT = 4


class Encoded(dict):
    """A record as a reader decoded it, with its bytes (`raw`), for a stage that passes it on
    unchanged (entitle sends the gangs it reads as they came): a writer of its schema writes
    those bytes again instead of encoding it anew. Setting or removing a key drops them; the
    values inside are read-only by convention, as shared spans' are."""

    __slots__ = ("raw",)
    raw: bytes | None

    def __setitem__(self, key: Any, value: Any) -> None:
        self.raw = None
        dict.__setitem__(self, key, value)

    def __delitem__(self, key: Any) -> None:
        self.raw = None
        dict.__delitem__(self, key)

    def pop(self, *args: Any) -> Any:
        self.raw = None
        return dict.pop(self, *args)

    def popitem(self) -> tuple[Any, Any]:
        self.raw = None
        return dict.popitem(self)

    def setdefault(self, key: Any, default: Any = None) -> Any:
        if key not in self:
            self.raw = None
        return dict.setdefault(self, key, default)

    def update(self, *args: Any, **kwargs: Any) -> None:
        self.raw = None
        dict.update(self, *args, **kwargs)

    def clear(self) -> None:
        self.raw = None
        dict.clear(self)

    # mypy wants an __ior__ overloaded as dict's __or__ is; this one only wraps dict's own.
    def __ior__(self, other: Any) -> Self:  # type: ignore[misc]
        self.raw = None
        return dict.__ior__(self, other)


class Unsupported(ValueError):
    """A schema this module does not compile (fastavro serves it instead)."""


class Truncated(ValueError):
    """The bytes end before the record does, or say a negative length."""


def write_long(out: bytearray, n: int) -> None:
    n = (n << 1) ^ (n >> 63)  # zigzag
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def read_long(data: bytes, pos: int) -> tuple[int, int]:
    n = shift = 0
    while True:
        b = data[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        if b < 0x80:
            return (n >> 1) ^ -(n & 1), pos
        shift += 7


def _truncated(*_args: object) -> NoReturn:
    raise Truncated("the record's bytes end early or hold a negative length")


class _Source:
    """Lines of generated code, and the constants they refer to."""

    def __init__(self, named: dict[str, Any], shared_spans: dict[str, tuple[tuple[str, str | None], ...]],
                 raw: Collection[str] = (), keep_raw: Collection[str] = ()):
        self.named = named
        self.shared_spans = shared_spans  # record's full name -> its spans (first field, last or None: the end)
        self.raw = raw  # records whose writer writes an Encoded one's bytes again
        self.keep_raw = keep_raw  # records whose reader keeps their bytes (an Encoded), in this codec
        self.functions: dict[str, list[str]] = {}  # function name -> its lines
        self.constants: dict[str, Any] = {}
        self._n = 0

    def var(self, stem: str = "v") -> str:
        self._n += 1
        return f"{stem}{self._n}"

    def constant(self, value: Any, stem: str) -> str:
        name = f"_{stem}{len(self.constants)}"
        self.constants[name] = value
        return name


def _resolve(schema: Any, named: dict[str, Any]) -> Any:
    if isinstance(schema, str) and schema not in _PRIMITIVES:
        if schema not in named:
            raise Unsupported(f"unknown named type {schema}")
        return named[schema]
    if isinstance(schema, dict) and schema.get("type") in _PRIMITIVES and len(
            [k for k in schema if not k.startswith("__")]) == 1:
        return schema["type"]
    return schema


def _null_union(schema: list) -> tuple[int, Any]:
    """(index of null, the other branch) of a union of null with one other type."""
    if len(schema) != 2 or "null" not in schema or schema[0] == schema[1]:
        raise Unsupported(f"union {schema}")
    i = schema.index("null")
    return i, schema[1 - i]


def _record_name(schema: dict) -> str:
    return "".join(c if c.isalnum() else "_" for c in schema["name"])


# -- writer ------------------------------------------------------------------------------------
def _write(src: _Source, schema: Any, value: str, lines: list[str], ind: str) -> None:
    schema = _resolve(schema, src.named)
    if schema == "null":
        return
    if schema == "boolean":
        lines.append(f"{ind}out.append(1 if {value} else 0)")
    elif schema in ("int", "long"):
        _small(value, lines, ind)
    elif schema == "double":
        lines.append(f"{ind}out += pack_double({value})")
    elif schema == "string":
        b = src.var("b")
        lines.append(f"{ind}{b} = {value}.encode()")
        _small(f"len({b})", lines, ind)
        lines.append(f"{ind}out += {b}")
    elif schema == "bytes":
        _small(f"len({value})", lines, ind)
        lines.append(f"{ind}out += {value}")
    elif isinstance(schema, list):
        null_at, other = _null_union(schema)
        lines += [f"{ind}if {value} is None:", f"{ind}    out.append({2 * null_at})", f"{ind}else:",
                  f"{ind}    out.append({2 * (1 - null_at)})"]
        _write(src, other, value, lines, ind + "    ")
    elif isinstance(schema, str):
        raise Unsupported(f"type {schema}")
    elif schema["type"] == "enum":
        encoded = {}
        for i, symbol in enumerate(schema["symbols"]):
            write_long(buf := bytearray(), i)
            encoded[symbol] = bytes(buf)
        lines.append(f"{ind}out += {src.constant(encoded, 'enum')}[{value}]")
    elif schema["type"] == "array":
        items, item = src.var("items"), src.var("item")
        lines += [f"{ind}{items} = {value}", f"{ind}if {items}:", f"{ind}    write_long(out, len({items}))",
                  f"{ind}    for {item} in {items}:"]
        _write(src, schema["items"], item, lines, ind + "        ")
        lines.append(f"{ind}out.append(0)")
    elif schema["type"] == "map":
        entries, key, item = src.var("map"), src.var("key"), src.var("item")
        lines += [f"{ind}{entries} = {value}", f"{ind}if {entries}:", f"{ind}    write_long(out, len({entries}))",
                  f"{ind}    for {key}, {item} in {entries}.items():"]
        _write(src, "string", key, lines, ind + "        ")
        _write(src, schema["values"], item, lines, ind + "        ")
        lines.append(f"{ind}out.append(0)")
    elif isinstance(schema, str):
        raise Unsupported(f"type {schema}")
    elif schema["type"] == "record":
        lines.append(f"{ind}{_record_writer(src, schema)}({value}, out)")
    else:
        raise Unsupported(f"type {schema}")


def _small(value: str, lines: list[str], ind: str) -> None:
    """Write a long: 0 to 63 (most lengths and counts) inline as one byte, the rest by write_long."""
    n = "n"
    lines += [f"{ind}{n} = {value}", f"{ind}if 0 <= {n} < 64:", f"{ind}    out.append({n} << 1)",
              f"{ind}else:", f"{ind}    write_long(out, {n})"]


def _record_writer(src: _Source, schema: dict) -> str:
    name = f"write_{_record_name(schema)}"
    if name in src.functions:
        return name
    src.functions[name] = []  # claimed first: a record that refers to itself
    lines = [f"def {name}(r, out):"]
    if schema["name"] in src.raw:  # read and passed on unchanged: its bytes again
        lines += ["    if r.__class__ is Encoded:", "        raw = r.raw", "        if raw is not None:",
                  "            out += raw", "            return"]
    fields = schema["fields"]
    spans = _spans(src, schema)
    at = 0
    while at < len(fields):
        until = spans.get(at)
        if until is None:
            _write(src, fields[at]["type"], _field_value(src, fields[at], lines), lines, "    ")
            at += 1
            continue
        # The bytes of the last few spans written, reused while their values come again.
        memo = src.constant([()], "span")
        values = [_field_value(src, field, lines) for field in fields[at:until]]
        lines += ["    now = (" + ", ".join(values) + ",)", f"    kept = {memo}[0]", "    for written, values in kept:",
                  "        if values == now:", "            out += written", "            break",
                  "    else:", "        start = len(out)"]
        for field, v in zip(fields[at:until], values, strict=True):
            _write(src, field["type"], v, lines, "        ")
        lines.append(f"        {memo}[0] = ((bytes(out[start:]), now),) + kept[:SPANS_KEPT - 1]")
        at = until
    if len(lines) == 1:
        lines.append("    pass")
    src.functions[name] = lines
    return name


def _field_value(src: _Source, field: dict, lines: list[str]) -> str:
    v = src.var()
    if "default" in field:
        lines.append(f"    {v} = r.get({field['name']!r}, {src.constant(field['default'], 'default')})")
    elif isinstance(field["type"], list) and "null" in field["type"]:
        lines.append(f"    {v} = r.get({field['name']!r})")
    else:
        lines.append(f"    {v} = r[{field['name']!r}]")
    return v


def _spans(src: _Source, schema: dict) -> dict[int, int]:
    """The record's shared spans: index of each one's first field -> index past its last."""
    names = [f["name"] for f in schema["fields"]]
    out: dict[int, int] = {}
    covered = 0
    for first, last in src.shared_spans.get(schema["name"], ()):
        for name in (first, last):
            if name is not None and name not in names:
                raise ValueError(f"{schema['name']} has no field {name} for a shared span")
        start, until = names.index(first), (names.index(last) + 1 if last is not None else len(names))
        if start < covered or until <= start:
            raise ValueError(f"{schema['name']}'s shared spans must follow one another: {first}..{last}")
        out[start], covered = until, until
    return out


# -- reader ------------------------------------------------------------------------------------
def _long(target: str, lines: list[str], ind: str) -> None:
    """Read a long into target: one or two bytes inline (-8192 to 8191: counts, lengths, most
    instances, a run's time offset), longer ones by read_long."""
    lines += [f"{ind}b = data[pos]", f"{ind}if b < 0x80:", f"{ind}    {target} = (b >> 1) ^ -(b & 1)",
              f"{ind}    pos += 1", f"{ind}elif data[pos + 1] < 0x80:",
              f"{ind}    b = (b & 0x7F) | (data[pos + 1] << 7)", f"{ind}    {target} = (b >> 1) ^ -(b & 1)",
              f"{ind}    pos += 2", f"{ind}else:", f"{ind}    {target}, pos = read_long(data, pos)"]


def _read(src: _Source, schema: Any, target: str, lines: list[str], ind: str) -> None:
    schema = _resolve(schema, src.named)
    if schema == "null":
        lines.append(f"{ind}{target} = None")
    elif schema == "boolean":
        lines += [f"{ind}{target} = data[pos] != 0", f"{ind}pos += 1"]
    elif schema in ("int", "long"):
        _long(target, lines, ind)
    elif schema == "double":
        lines += [f"{ind}{target} = unpack_double(data, pos)[0]", f"{ind}pos += 8"]
    elif schema in ("string", "bytes"):
        n = src.var("n")
        _long(n, lines, ind)
        lines += [f"{ind}if {n} < 0 or pos + {n} > end:", f"{ind}    truncated()"]
        decode = ".decode()" if schema == "string" else ""
        lines += [f"{ind}{target} = data[pos:pos + {n}]{decode}", f"{ind}pos += {n}"]
    elif isinstance(schema, list):
        null_at, other = _null_union(schema)
        branch = src.var("branch")
        _long(branch, lines, ind)
        lines += [f"{ind}if {branch} == {null_at}:", f"{ind}    {target} = None",
                  f"{ind}elif {branch} == {1 - null_at}:"]
        _read(src, other, target, lines, ind + "    ")
        lines += [f"{ind}else:", f"{ind}    raise ValueError(f'union branch {{{branch}}} of 2')"]
    elif isinstance(schema, str):
        raise Unsupported(f"type {schema}")
    elif schema["type"] == "enum":
        symbols = src.constant(tuple(schema["symbols"]), "symbols")
        index = src.var("index")
        _long(index, lines, ind)
        lines += [f"{ind}if {index} < 0:", f"{ind}    raise ValueError(f'enum index {{{index}}}')",
                  f"{ind}{target} = {symbols}[{index}]"]
    elif schema["type"] in ("array", "map"):
        count, item = src.var("count"), src.var("item")
        lines.append(f"{ind}{target} = {{}}" if schema["type"] == "map" else f"{ind}{target} = []")
        lines.append(f"{ind}while True:")
        _long(count, lines, ind + "    ")
        lines += [f"{ind}    if {count} == 0:", f"{ind}        break", f"{ind}    if {count} < 0:",
                  f"{ind}        {count} = -{count}", f"{ind}        _size, pos = read_long(data, pos)",
                  f"{ind}    for _ in range({count}):"]
        if schema["type"] == "map":
            key = src.var("key")
            _read(src, "string", key, lines, ind + "        ")
            _read(src, schema["values"], item, lines, ind + "        ")
            lines.append(f"{ind}        {target}[{key}] = {item}")
        else:
            _read(src, schema["items"], item, lines, ind + "        ")
            lines.append(f"{ind}        {target}.append({item})")
    elif schema["type"] == "record":
        lines.append(f"{ind}{target}, pos = {_record_reader(src, schema)}(data, pos, end)")
    else:
        raise Unsupported(f"type {schema}")


def _record_reader(src: _Source, schema: dict) -> str:
    name = f"read_{_record_name(schema)}"
    if name in src.functions:
        return name
    src.functions[name] = []
    lines = [f"def {name}(data, pos, end):"]
    keep = schema["name"] in src.keep_raw
    if keep:
        lines.append("    record_start = pos")
    fields = schema["fields"]
    spans = _spans(src, schema)
    # The longest span of three fields or more also keeps the record as a dict with that span's
    # values in place (its other fields None): a record is then that dict copied, the rest set,
    # which is cheaper than writing a wide record out whole.
    widest = max(spans.items(), key=lambda span: span[1] - span[0], default=None)
    templated = widest if widest is not None and widest[1] - widest[0] >= 3 else None
    names = []  # (field, local) of the fields set one by one
    at = 0
    while at < len(fields):
        until = spans.get(at)
        if until is None:
            v = src.var()
            _read(src, fields[at]["type"], v, lines, "    ")
            names.append((fields[at]["name"], v))
            at += 1
            continue
        # The same bytes as one of the last few spans read: the same values (pairs in one tuple,
        # swapped whole, so a reader on another thread never pairs one span's bytes with another's
        # values).
        memo = src.constant([()], "span")
        span = [(field["name"], src.var()) for field in fields[at:until]]
        unpack = ", ".join(v for _, v in span) + ","
        whole = templated is not None and templated[0] == at  # kept as the record's template
        lines += [f"    kept = {memo}[0]", "    for read, values in kept:", "        if data.startswith(read, pos):",
                  f"            {'template' if whole else unpack} = values", "            pos += len(read)",
                  "            break", "    else:", "        start = pos"]
        for field, (_, v) in zip(fields[at:until], span, strict=True):
            _read(src, field["type"], v, lines, "        ")
        if whole:
            in_span = dict(span)
            template = "{" + ", ".join(f"{f['name']!r}: {in_span.get(f['name'], 'None')}" for f in fields) + "}"
            lines.append(f"        template = {template}")
        else:
            names += span
        lines.append(f"        {memo}[0] = ((data[start:pos], {'template' if whole else f'({unpack})'}),) "
                     "+ kept[:SPANS_KEPT - 1]")
        at = until
    if templated is not None:
        # Encoded's own __setitem__ would drop the bytes: dict's sets the fields.
        lines.append("    r = Encoded(template)" if keep else "    r = template.copy()")
        lines += [f"    set_field(r, {n!r}, {v})" if keep else f"    r[{n!r}] = {v}" for n, v in names]
        lines += ["    r.raw = data[record_start:pos]"] if keep else []
        lines.append("    return r, pos")
    else:
        record = "{" + ", ".join(f"{n!r}: {v}" for n, v in names) + "}"
        if keep:
            lines += [f"    r = Encoded({record})", "    r.raw = data[record_start:pos]", "    return r, pos"]
        else:
            lines.append(f"    return {record}, pos")
    src.functions[name] = lines
    return name


def _compiled(src: _Source, title: str) -> dict[str, Any]:
    """The generated functions, compiled: their names -> the functions."""
    code = "\n\n".join("\n".join(lines) for lines in src.functions.values())
    scope: dict[str, Any] = {"write_long": write_long, "read_long": read_long, "truncated": _truncated,
                             "SPANS_KEPT": SPANS_KEPT, "Encoded": Encoded, "set_field": dict.__setitem__,
                             "pack_double": _DOUBLE.pack, "unpack_double": _DOUBLE.unpack_from, **src.constants}
    exec(compile(code, title, "exec"), scope)  # noqa: S102 - our own generated source
    return scope


def compile_head_reader(schema: dict, named: dict[str, Any], last: str) -> Callable[[bytes, int], dict]:
    """decode(data, pos) -> the record's fields up to `last` (Avro writes fields in order), not
    reading the rest: for a reader that needs a few leading fields of a large record it keeps
    many of (a host's state and capacity out of its whole HostState). Only for a record that is
    the whole message: it does not find where the record ends. Raises Unsupported."""
    names = [f["name"] for f in schema["fields"]]
    if last not in names:
        raise ValueError(f"{schema['name']} has no field {last}")
    head = {**schema, "name": f"{schema['name']}.head", "fields": schema["fields"][:names.index(last) + 1]}
    src = _Source(named, {})
    reader = _record_reader(src, head)
    read = _compiled(src, f"<avro head reader {schema['name']}>")[reader]

    def decode(data: bytes, pos: int = 0) -> dict:
        return read(data, pos, len(data))[0]

    return decode


def compile_codec(schema: dict, named: dict[str, Any],
                  shared_spans: dict[str, tuple[tuple[str, str | None], ...]] | None = None,
                  raw: Collection[str] = (), keep_raw: Collection[str] = (),
                  ) -> tuple[Callable[[dict], bytes], Callable[[bytes, int], dict]]:
    """(encode(record) -> bytes, decode(data, pos) -> record) for a parsed record schema; `named`
    holds the parsed named types it refers to; `shared_spans` maps a record's full name to its
    shared spans (the module's docstring), each (first field, last field or None for the last).
    The records named in `raw` are written as their bytes where they are an Encoded one; those
    named in `keep_raw` are read as Encoded ones. Raises Unsupported."""
    src = _Source(named, shared_spans or {}, raw, keep_raw)
    writer, reader = _record_writer(src, schema), _record_reader(src, schema)
    scope = _compiled(src, f"<avro codec {schema['name']}>")
    write, read = scope[writer], scope[reader]

    def encode(record: dict) -> bytes:
        out = bytearray()
        write(record, out)
        return bytes(out)

    def decode(data: bytes, pos: int = 0) -> dict:
        record, end = read(data, pos, len(data))
        if end > len(data):
            raise Truncated("the record's bytes end early")
        return record

    return encode, decode
