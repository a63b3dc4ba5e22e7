"""The wire contract: Confluent framing, every schema round-trips, and evolution stays backward
compatible (a reader of an older schema reads what a newer writer wrote, and the reverse)."""

from __future__ import annotations

import io
import json
import struct
from pathlib import Path

import fastavro
import pytest

from peloton.serde import SCHEMA_DIR, DecodeError, SchemaRegistry, registry
from peloton.topics import Catalogue

SNAPSHOTS = Path(__file__).parent / "schema_snapshots"


def sample(schema, named: dict):
    """A valid value for a parsed schema: defaults where given, else a small typed value."""
    if isinstance(schema, str):
        primitives = {"string": "s", "int": 7, "long": 7, "double": 1.5, "float": 1.5, "boolean": True,
                      "bytes": b"\x00\x01", "null": None}
        return primitives[schema] if schema in primitives else sample(named[schema], named)
    if isinstance(schema, list):
        return sample(schema[-1], named)  # the non-null branch of our ["null", X] unions
    t = schema["type"]
    if t == "record":
        named[schema["name"]] = schema
        return {f["name"]: sample(f["type"], named) for f in schema["fields"]}
    if t == "enum":
        named[schema["name"]] = schema
        return schema["symbols"][1]
    if t == "array":
        return [sample(schema["items"], named)]
    if t == "map":
        return {"k": sample(schema["values"], named)}
    return sample(t, named)


@pytest.mark.parametrize("name", sorted(registry().by_name))
def test_every_schema_round_trips_in_confluent_framing(name: str) -> None:
    reg = registry()
    schema_id, parsed = reg.by_name[name]
    record = sample(parsed, dict(reg.named))
    data = reg.encode(name, record)
    assert data[0] == 0 and struct.unpack(">I", data[1:5])[0] == schema_id
    decoded_name, decoded = reg.decode(data)
    assert decoded_name == name
    assert decoded == record


def test_undecodable_bytes_raise_a_clear_decode_error() -> None:
    reg = registry()
    with pytest.raises(DecodeError, match="shorter than"):
        reg.decode(b"\x00\x01")
    with pytest.raises(DecodeError, match="magic byte"):
        reg.decode(b"\x07\x00\x00\x00\x03garbage")
    with pytest.raises(DecodeError, match="unknown schema id 9999"):
        reg.decode(b"\x00" + struct.pack(">I", 9999) + b"x")
    with pytest.raises(DecodeError, match="does not decode as peloton.JobCommand"):
        reg.decode(b"\x00" + struct.pack(">I", 3) + b"\xff\xff\xff\xff\xff\xff")


def test_every_topic_names_schemas_that_exist() -> None:
    reg = registry()
    for topic in Catalogue():
        for schema in topic.value_schemas:
            assert schema in reg.by_name, f"{topic.id} names unknown schema {schema}"


def _evolve(raw: dict) -> dict:
    """A newer version of a record schema: one more field, with a default (the rule we keep)."""
    newer = json.loads(json.dumps(raw))
    newer["fields"].append({"name": "added_later", "type": "string", "default": "x"})
    return newer


@pytest.mark.parametrize("name", ["peloton.JobCommand", "peloton.TaskStatus", "peloton.DeadLetter"])
def test_an_older_reader_reads_a_newer_writer(name: str) -> None:
    raw = json.loads((SCHEMA_DIR / f"{name.split('.')[-1]}.avsc").read_text())
    old = fastavro.parse_schema(raw)
    new = fastavro.parse_schema(_evolve(raw))
    record = {**sample(old, {}), "added_later": "from the future"}
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, new, record)
    read = fastavro.schemaless_reader(io.BytesIO(buf.getvalue()), new, old)
    assert "added_later" not in read
    assert read == {k: v for k, v in record.items() if k != "added_later"}
    # and the newer reader fills the default into what the older writer wrote
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, old, read)
    assert fastavro.schemaless_reader(io.BytesIO(buf.getvalue()), old, new)["added_later"] == "x"


def test_current_schemas_stay_compatible_with_released_snapshots() -> None:
    """schemas/avro may only change compatibly with every snapshot in schema_snapshots/:
    data each side writes must be readable by the other side's schema."""
    released = SchemaRegistry(SNAPSHOTS)
    current = registry()
    for name, (_, old) in released.by_name.items():
        assert name in current.by_name, f"{name} was released and must not disappear"
        new = current.schema(name)
        for writer, reader in ((new, old), (old, new)):
            record = sample(writer, dict(current.named))
            buf = io.BytesIO()
            fastavro.schemaless_writer(buf, writer, record)
            fastavro.schemaless_reader(io.BytesIO(buf.getvalue()), writer, reader)


def test_a_record_written_with_an_older_schema_version_reads_into_the_current_one() -> None:
    reg = registry()
    old = fastavro.parse_schema(json.loads((SCHEMA_DIR / "PoolEntitlement.v1.avsc").read_text()),
                                named_schemas=dict(reg.named))
    zero = {"cpu": 0.0, "mem_mb": 0.0, "disk_mb": 0.0, "gpu": 0.0}
    record = {"pool": "/a", "entitlement": zero, "allocation": zero, "demand": zero, "queued_gangs": 2,
              "computed_ms": 5}
    buf = io.BytesIO()
    buf.write(struct.pack(">bI", 0, 11))  # the id the first version was published under
    fastavro.schemaless_writer(buf, old, record)
    name, decoded = reg.decode(buf.getvalue())
    assert name == "peloton.PoolEntitlement"
    assert decoded["waiting"] == [] and decoded["slack_allocation"] == zero and decoded["preempting"] == 0
    assert {k: decoded[k] for k in record} == record
    assert reg.encode(name, decoded)[1:5] == struct.pack(">I", 16)  # writers use the newest id


def written_by_older_version(reg, schema_id: int, record: dict) -> bytes:
    """The bytes an older writer of that schema id would have sent."""
    buf = io.BytesIO()
    buf.write(struct.pack(">bI", 0, schema_id))
    fastavro.schemaless_writer(buf, reg._writers[schema_id], record)
    return buf.getvalue()


def test_an_older_version_that_embeds_an_older_nested_type_still_reads() -> None:
    """AdmittedGang 1 embeds GangDemand 1, from before gangs said whether they are revocable;
    AdmittedGang 2 embeds GangDemand 2, from before gangs named the hosts to avoid."""
    reg = registry()
    gang = {"gang_id": "g", "job_id": "j", "pool": "/p", "priority": 3, "preemptible": False,
            "placement_strategy": "PACK_HOST", "tasks": [], "created_ms": 1}
    for schema_id, record, name in ((6, {"gang": gang, "admitted_ms": 2}, "peloton.AdmittedGang"),
                                    (4, gang, "peloton.GangDemand"),
                                    (15, {"gang": gang, "admitted_ms": 2}, "peloton.AdmittedGang"),
                                    (14, gang, "peloton.GangDemand")):
        decoded_name, decoded = reg.decode(written_by_older_version(reg, schema_id, record))
        assert decoded_name == name
        g = decoded.get("gang", decoded)
        assert g["revocable"] is False and g["priority"] == 3 and g["avoid_hosts"] == []


def test_records_written_before_launch_specs_named_their_ports_still_read() -> None:
    """GangDemand 3, AdmittedGang 3 and Placement 1 embed the TaskLaunchSpec of their time."""
    reg = registry()
    task = {"task_id": "j-0-1", "job_id": "j", "instance": 0, "run_id": 1,
            "resources": {"cpu": 1.0, "mem_mb": 1.0, "disk_mb": 0.0, "gpu": 0.0}, "dynamic_ports": 2,
            "command": "true", "shell": True, "arguments": [], "environment": {}, "labels": {},
            "constraint_json": None, "kill_grace_seconds": 1.0, "controller": False}
    gang = {"gang_id": "g", "job_id": "j", "pool": "/p", "priority": 0, "preemptible": True, "revocable": False,
            "not_before_ms": 0, "avoid_hosts": ["h9"], "placement_strategy": "PACK_HOST", "tasks": [task],
            "created_ms": 1}
    placement = {"placement_id": "p", "gang_id": "g", "pool": "/p", "shard": 0,
                 "assignments": [{"host_id": "h1", "task": task}], "placed_ms": 1}
    for schema_id, record, name in ((20, gang, "peloton.GangDemand"),
                                    (21, {"gang": gang, "admitted_ms": 2}, "peloton.AdmittedGang"),
                                    (7, placement, "peloton.Placement")):
        decoded_name, decoded = reg.decode(written_by_older_version(reg, schema_id, record))
        assert decoded_name == name
        if name == "peloton.Placement":
            [assignment] = decoded["assignments"]
            spec = assignment["task"]
            assert assignment["ports"] == {}
        else:
            [spec] = decoded.get("gang", decoded)["tasks"]
        assert spec["dynamic_ports"] == 2 and spec["ports"] == []


def test_records_written_before_launch_specs_named_the_user_still_read() -> None:
    """The schemas that embed a TaskLaunchSpec (and their bundles), and AgentCommand, as written
    before tasks named their user: read into the current ones with no user (the agent's choice)."""
    reg = registry()
    task = {"task_id": "j-0-1", "job_id": "j", "instance": 0, "run_id": 1,
            "resources": {"cpu": 1.0, "mem_mb": 1.0, "disk_mb": 0.0, "gpu": 0.0}, "dynamic_ports": 1,
            "ports": [{"name": "http", "value": 0, "env_name": "PORT"}], "command": "true", "shell": True,
            "arguments": [], "environment": {}, "labels": {}, "constraint_json": None, "kill_grace_seconds": 1.0,
            "controller": False}
    gang = {"gang_id": "g", "job_id": "j", "pool": "/p", "priority": 0, "preemptible": True, "revocable": False,
            "not_before_ms": 0, "avoid_hosts": [], "placement_strategy": "PACK_HOST", "tasks": [task],
            "created_ms": 1}
    admitted = {"gang": gang, "admitted_ms": 2}
    placement = {"placement_id": "p", "gang_id": "g", "pool": "/p", "shard": 0,
                 "assignments": [{"host_id": "h1", "task": task, "ports": {"http": 31000}}], "placed_ms": 1}
    launch = {"task_id": "j-0-1", "job_id": "j", "instance": 0, "run_id": 1, "command": "true", "shell": True,
              "arguments": [], "environment": {}, "resources": task["resources"], "kill_grace_seconds": 1.0}
    agent_command = {"command_id": "c", "host_id": "h1", "launches": [launch], "kills": [], "sent_ms": 1}
    cases = ((27, gang, "peloton.GangDemand"), (34, {"gangs": [gang]}, "peloton.GangDemands"),
             (28, admitted, "peloton.AdmittedGang"), (36, {"gangs": [admitted]}, "peloton.AdmittedGangs"),
             (29, placement, "peloton.Placement"), (37, {"placements": [placement]}, "peloton.Placements"),
             (22, agent_command, "peloton.AgentCommand"))
    for schema_id, record, name in cases:
        decoded_name, decoded = reg.decode(written_by_older_version(reg, schema_id, record))
        assert decoded_name == name
        specs = {
            "peloton.GangDemand": lambda d: d["tasks"],
            "peloton.GangDemands": lambda d: d["gangs"][0]["tasks"],
            "peloton.AdmittedGang": lambda d: d["gang"]["tasks"],
            "peloton.AdmittedGangs": lambda d: d["gangs"][0]["gang"]["tasks"],
            "peloton.Placement": lambda d: [a["task"] for a in d["assignments"]],
            "peloton.Placements": lambda d: [a["task"] for a in d["placements"][0]["assignments"]],
            "peloton.AgentCommand": lambda d: d["launches"],
        }[name](decoded)
        assert [(s["task_id"], s["user"]) for s in specs] == [("j-0-1", "")], name
        if "ports" in specs[0]:
            assert specs[0]["ports"] == task["ports"]
    # and what is written now names the user
    _, back = reg.decode(reg.encode("peloton.GangDemand", {**gang, "tasks": [{**task, "user": "alice"}]}))
    assert back["tasks"][0]["user"] == "alice"


def test_a_head_decoder_reads_a_records_leading_fields_and_the_rest_in_full() -> None:
    reg = registry()
    host = sample(reg.schema("peloton.HostState"), dict(reg.named))
    host.update(host_id="h1", state="DRAINING", capacity={"cpu": 8.0, "mem_mb": 1.0, "disk_mb": 2.0, "gpu": 0.0},
                applied_placements=["p"] * 50, job_tasks={f"j{i}": i for i in range(50)})
    head = reg.head_decoder("peloton.HostState", "capacity")
    data = reg.encode("peloton.HostState", host)
    name, value = head(data)
    assert name == "peloton.HostState"
    assert value == {k: host[k] for k in ("host_id", "shard", "driver", "state", "reachable", "capacity")}
    # An older version of the record, and any other schema, are decoded in full.
    older = {k: v for k, v in host.items() if k != "log_url"}
    assert head(written_by_older_version(reg, 38, older))[1]["job_tasks"] == host["job_tasks"]
    release = {"task_id": "t", "job_id": "j", "pool": "/p", "reason": "TASK_FINISHED", "timestamp_ms": 1}
    assert head(reg.encode("peloton.TaskRelease", release)) == ("peloton.TaskRelease", release)
    with pytest.raises(DecodeError):  # its head cut short
        head(data[:12])
    with pytest.raises(DecodeError):
        head(b"\x00\x00")
    with pytest.raises(ValueError, match="no field"):
        reg.head_decoder("peloton.HostState", "nothing")
