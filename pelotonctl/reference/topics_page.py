"""topics.md: topics.yaml (with its comments) and the Avro schemas of schemas/avro with their ids."""

from __future__ import annotations

import json
from typing import Any

from pelotonctl.reference.markdown import banner, cell, code, paragraphs, slug, table


def _split_comment(line: str) -> tuple[str, str]:
    """A YAML line's content and its trailing comment (a # outside quotes, after a space)."""
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i].rstrip(), line[i + 1:].strip()
    return line.rstrip(), ""


def topics_comments(text: str) -> tuple[list[str], dict[str, dict[str, list[str]]]]:
    """topics.yaml's comments: the blocks before `topics:` (each a list of lines), and per topic
    id, per field, the comment lines above it and after it on its line ("" for the topic's own)."""
    intro: list[str] = []
    topics: dict[str, dict[str, list[str]]] = {}
    pending: list[str] = []
    topic = None
    in_topics = False
    for line in text.splitlines():
        content, comment = _split_comment(line)
        if not content.strip():
            if comment:
                pending.append(comment)
            elif pending and not in_topics:
                intro.append("\n".join(pending))
                pending = []
            continue
        indent = len(content) - len(content.lstrip())
        if not in_topics:
            if pending and indent == 0:
                intro.append("\n".join(pending))
            pending = []
            in_topics = content.strip() == "topics:"
            continue
        if indent == 2:
            topic = content.strip().rstrip(":")
            topics[topic] = {"": [*pending, *([comment] if comment else [])]}
        elif indent >= 4 and topic is not None:
            field = content.strip().split(":", 1)[0]
            topics[topic].setdefault(field, []).extend([*pending, *([comment] if comment else [])])
        pending = []
    return intro, topics


def _duration(ms: int) -> str:
    seconds = ms / 1000
    for unit, size in (("days", 86400), ("hours", 3600), ("minutes", 60), ("seconds", 1)):
        if seconds >= size and seconds % size == 0:
            n = int(seconds // size)
            return f"{n} {unit[:-1] if n == 1 else unit}"
    return f"{seconds:g} seconds"


def _config_value(key: str, value: str) -> str:
    if key.endswith(".ms") and value.isdigit():
        return f"{code(key)} {code(value)} ({_duration(int(value))})"
    if key.endswith(".bytes") and value.isdigit():
        return f"{code(key)} {code(value)} ({int(value) / 2**20:g} MiB)"
    return f"{code(key)} {code(value)}"


def schema_catalogue() -> tuple[dict[str, int], dict[str, dict[str, int]], dict[str, Any]]:
    """ids.yaml's current schemas (name -> id), older versions (name -> {version: id}), and each
    current schema's parsed .avsc."""
    import yaml

    from peloton.serde import SCHEMA_DIR

    ids = yaml.safe_load((SCHEMA_DIR / "ids.yaml").read_text())
    current = {name: i for name, i in ids.items() if "@" not in name}
    older: dict[str, dict[str, int]] = {}
    for name, i in ids.items():
        if "@" in name:
            base, version = name.split("@")
            older.setdefault(base, {})[version] = i
    schemas = {name: json.loads((SCHEMA_DIR / f"{name.split('.')[-1]}.avsc").read_text()) for name in current}
    return current, older, schemas


def _schema_anchor(name: str) -> str:
    return "schema-" + slug(name)


def _avro_type(t: Any, known: set[str], namespace: str = "peloton") -> str:
    if isinstance(t, str):
        full = t if "." in t else f"{namespace}.{t}"
        return f"[{t}](#{_schema_anchor(full)})" if full in known else code(t)
    if isinstance(t, list):
        return " or ".join(_avro_type(x, known, namespace) for x in t)
    kind = t.get("type")
    if kind == "array":
        return f"array of {_avro_type(t['items'], known, namespace)}"
    if kind == "map":
        return f"map of {_avro_type(t['values'], known, namespace)}"
    if kind == "enum":
        return f"enum {code(t['name'])} ({', '.join(code(s) for s in t['symbols'])})"
    if kind == "record":
        return f"record {code(t['name'])} ({', '.join(code(f['name']) for f in t['fields'])})"
    if kind == "fixed":
        return f"fixed {code(t['name'])} ({t['size']} bytes)"
    logical = f", {t['logicalType']}" if "logicalType" in t else ""
    return code(kind) + logical


def topics_md() -> str:
    from peloton.topics import TOPICS_FILE, Catalogue

    catalogue = list(Catalogue())
    intro, comments = topics_comments(TOPICS_FILE.read_text())
    current, older, schemas = schema_catalogue()
    known = set(current)
    used_by: dict[str, list[Any]] = {}
    for t in catalogue:
        for s in t.value_schemas:
            used_by.setdefault(s, []).append(t)
    out = [banner("topics.yaml and schemas/avro", "Topics and schemas"), "# Topics and schemas\n\n",
           f"Every topic of the pipeline ({len(catalogue)}, from `topics.yaml`) and every message schema "
           f"({len(current)}, from `schemas/avro`, their ids from `schemas/avro/ids.yaml`). Names are shown "
           "without `PELOTON_TOPIC_PREFIX`. `pelotonctl topics apply` creates the topics and sets their config; "
           "`pelotonctl topics acls` prints the Kafka ACLs that follow *written by* and *read by*.\n\n"]
    out += [paragraphs(block) + "\n\n" for block in intro]
    out.append(table(["Topic", "Partitions", "Key", "Cleanup", "Written by", "Read by"],
                     [[f"[{code(t.name)}](#{slug(t.id)})", str(t.partitions), cell(t.key), t.cleanup_policy,
                       cell(", ".join(t.written_by)), cell(", ".join(t.read_by))] for t in catalogue]) + "\n")
    for t in catalogue:
        notes = comments.get(t.id, {})

        def said(field: str, notes: dict[str, list[str]] = notes) -> str:
            return " — " + cell(" ".join(notes[field])) if notes.get(field) else ""

        out.append(f"## {t.name} {{ #{slug(t.id)} }}\n\n")
        if notes.get(""):
            out.append(paragraphs("\n".join(notes[""])) + "\n\n")
        config = dict(t.config)
        retention = ("compacted: the last record of each key is kept" if t.cleanup_policy == "compact" else
                     _duration(int(config["retention.ms"])) if "retention.ms" in config else "the broker's default")
        rows = [["Id in the code", code(t.id) + said("name")],
                ["Partitions", str(t.partitions) + said("partitions")],
                ["Key", cell(t.key) + said("key")],
                ["Cleanup policy", code(t.cleanup_policy) + said("cleanup_policy")],
                ["Retention", retention],
                ["Config", "<br>".join(_config_value(k, v) for k, v in config.items()) + said("config")],
                ["Value schemas", ", ".join(f"[{s}](#{_schema_anchor(s)}) (id {current[s]})" for s in t.value_schemas)
                 + said("value_schemas")],
                ["Written by", cell(", ".join(t.written_by)) + said("written_by")],
                ["Read by", cell(", ".join(t.read_by)) + said("read_by")]]
        if t.read_back_by:
            rows.append(["Read back by", cell(", ".join(t.read_back_by)) + said("read_back_by")])
        out.append(table(["Property", "Value"], rows) + "\n")
    out.append("## Schemas { #schemas }\n\n"
               "Each message is framed as Confluent's wire format: a zero byte, the schema's id (4 bytes), then "
               "the Avro body. An id never changes meaning: a changed schema gets a new id, and the older versions "
               "listed stay readable.\n\n")
    for name, schema_id in current.items():
        schema = schemas[name]
        out.append(f"### {name} {{ #{_schema_anchor(name)} }}\n\n")
        facts = [f"Id {schema_id}"]
        if older.get(name):
            facts.append("older versions still read: " + ", ".join(f"v{v} (id {i})" for v, i in older[name].items()))
        if used_by.get(name):
            facts.append("on " + ", ".join(f"[{code(t.name)}](#{slug(t.id)})" for t in used_by[name]))
        else:
            facts.append("inside other schemas")
        out.append("; ".join(facts) + ".\n\n")
        if schema.get("doc"):
            out.append(paragraphs(schema["doc"]) + "\n\n")
        namespace = schema.get("namespace", "peloton")
        rows = [[code(f["name"]), _avro_type(f["type"], known, namespace),
                 code(json.dumps(f["default"])) if "default" in f else "", cell(f.get("doc", ""))]
                for f in schema.get("fields", [])]
        if rows:
            out.append(table(["Field", "Type", "Default", "Description"], rows) + "\n")
    return "".join(out).rstrip() + "\n"
