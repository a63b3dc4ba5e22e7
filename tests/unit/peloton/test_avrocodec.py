"""The generated Avro functions write exactly fastavro's bytes and read exactly its records, for
every schema of the project, and refuse what fastavro refuses."""

from __future__ import annotations

import copy
import io
import random
import struct

import fastavro
import pytest

from peloton.avrocodec import Encoded, Truncated, compile_codec
from peloton.serde import SHARED_SPANS, DecodeError, registry

REG = registry()
PRIMITIVES = {"null", "boolean", "int", "long", "double", "bytes", "string"}


def value_of(schema, rnd: random.Random, depth: int = 0):
    """A random value of a parsed schema, with the edge cases: empty and long strings, non-ASCII,
    large and negative numbers, null branches, empty and non-empty arrays and maps."""
    if isinstance(schema, str) and schema not in PRIMITIVES:
        schema = REG.named[schema]
    if isinstance(schema, dict) and schema.get("type") in PRIMITIVES:
        schema = schema["type"]
    if schema == "null":
        return None
    if schema == "boolean":
        return rnd.random() < 0.5
    if schema == "int":
        return rnd.choice([0, 1, -1, 63, 64, -65, 2**31 - 1, -2**31, rnd.randint(-1000, 1000)])
    if schema == "long":
        return rnd.choice([0, 5, -64, 2**63 - 1, -2**63, 1_700_000_000_000, rnd.randint(-10**12, 10**12)])
    if schema == "double":
        return rnd.choice([0.0, -1.5, 1e300, 0.1, float(rnd.randint(0, 99))])
    if schema == "string":
        return rnd.choice(["", "a", "héllo ✓", "x" * 200, f"s{rnd.randint(0, 10**6)}"])
    if schema == "bytes":
        return rnd.choice([b"", b"\x00\xff", bytes(rnd.randrange(256) for _ in range(100))])
    if isinstance(schema, list):
        branch = rnd.choice(schema)
        return value_of(branch, rnd, depth)
    kind = schema["type"]
    if kind == "enum":
        return rnd.choice(schema["symbols"])
    if kind == "array":
        return [value_of(schema["items"], rnd, depth + 1) for _ in range(rnd.choice([0, 1, 3, 70]) if depth < 2 else 1)]
    if kind == "map":
        return {f"k{i}é": value_of(schema["values"], rnd, depth + 1)
                for i in range(rnd.choice([0, 1, 70]) if depth < 2 else 1)}
    if kind == "record":
        return {f["name"]: value_of(f["type"], rnd, depth + 1) for f in schema["fields"]}
    raise AssertionError(f"no values for {schema}")


def fastavro_bytes(name: str, record: dict) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, REG.schema(name), record)
    return buf.getvalue()


def fastavro_record(name: str, data: bytes) -> dict:
    return fastavro.schemaless_reader(io.BytesIO(data), REG.schema(name), None)


@pytest.mark.parametrize("name", sorted(REG.by_name))
def test_every_schema_compiles_and_agrees_with_fastavro_both_ways(name: str) -> None:
    encode, decode = compile_codec(REG.schema(name), REG.named)
    rnd = random.Random(name)
    for _ in range(40):
        record = value_of(REG.schema(name), rnd)
        data = encode(record)
        assert data == fastavro_bytes(name, record)
        assert decode(data) == fastavro_record(name, data) == record
        assert REG.decode(REG.encode(name, record)) == (name, record)


def test_a_field_left_out_takes_its_default_as_fastavro_gives_it() -> None:
    record = {"task_id": "j-0-1", "job_id": "j", "pool": "/p", "timestamp_ms": 7}  # reason has a default
    assert REG.encode_body("peloton.TaskRelease", record) == fastavro_bytes("peloton.TaskRelease", record)
    assert REG.decode(REG.encode("peloton.TaskRelease", record))[1]["reason"] == ""


def test_a_record_that_does_not_fit_its_schema_is_a_value_error_naming_it() -> None:
    with pytest.raises(ValueError, match="not a valid peloton.TaskRelease: KeyError: 'pool'"):
        REG.encode_body("peloton.TaskRelease", {"task_id": "j-0-1", "job_id": "j", "timestamp_ms": 7})
    with pytest.raises(ValueError, match="not a valid peloton.TaskRelease"):
        REG.encode_body("peloton.TaskRelease", {"task_id": 5, "job_id": "j", "pool": "/p", "timestamp_ms": 7})


def test_bytes_that_end_early_or_lie_are_refused_not_read_past() -> None:
    _, decode = compile_codec(REG.schema("peloton.TaskRelease"), REG.named)
    data = REG.encode_body("peloton.TaskRelease", {"task_id": "j-0-1", "job_id": "j", "pool": "/p",
                                                   "reason": "r", "timestamp_ms": 1_700_000_000_000})
    for cut in range(len(data)):
        with pytest.raises((Truncated, IndexError)):
            decode(data[:cut])
    with pytest.raises(Truncated):
        decode(b"\x03" + data[1:])  # a string of length -2
    status = REG.encode_body("peloton.TaskStatus", value_of(REG.schema("peloton.TaskStatus"), random.Random(1)))
    framed = REG.encode("peloton.TaskStatus", REG.decode(REG.header("peloton.TaskStatus") + status)[1])
    with pytest.raises(DecodeError):  # through the registry: a DecodeError, as every bad payload
        REG.decode(framed[:-3])


def test_longs_of_one_two_and_more_bytes_read_as_fastavro_reads_them() -> None:
    _, decode = compile_codec(REG.schema("peloton.TaskRelease"), REG.named)
    for n in (0, -1, 63, -64, 64, -65, 8191, -8192, 8192, -8193, 2**31 - 1, -2**31, 2**53, -2**63):
        record = {"task_id": "t", "job_id": "j", "pool": "/p", "reason": "r", "timestamp_ms": n}
        data = fastavro_bytes("peloton.TaskRelease", record)
        assert decode(data) == record, n
        if n in (64, -65, 8191, -8192):  # two bytes, the second cut off
            with pytest.raises((Truncated, IndexError)):
                decode(data[:-1])


def test_an_enum_index_out_of_range_is_refused() -> None:
    _, decode = compile_codec(REG.schema("peloton.TaskStatus"), REG.named)
    record = value_of(REG.schema("peloton.TaskStatus"), random.Random(2))
    record.update(event_id="", task_id="", job_id="", instance=0, run_id=0, host_id="")
    data = bytearray(REG.encode_body("peloton.TaskStatus", record))
    data[6] = 0x01  # the state's index: zigzag -1
    with pytest.raises(ValueError, match="enum index -1"):
        decode(bytes(data))
    data[6] = 0x7E  # 63: past the last symbol
    with pytest.raises(IndexError):
        decode(bytes(data))


def _gang(spec: dict, instance: int, **changes) -> dict:
    task = {**spec, "task_id": f"j-{instance}-1", "instance": instance, **changes}
    return {"gang_id": f"j-{instance}", "job_id": "j", "pool": "/p", "priority": 0, "preemptible": True,
            "revocable": False, "not_before_ms": 0, "avoid_hosts": [], "placement_strategy": "", "tasks": [task],
            "created_ms": 1_700_000_000_000 + instance}


def test_alike_launch_specs_read_and_write_their_shared_tail_once_and_as_fastavro_does() -> None:
    encode, decode = compile_codec(REG.schema("peloton.GangDemands"), REG.named, SHARED_SPANS)
    spec = value_of(REG.named["peloton.TaskLaunchSpec"], random.Random(3))
    spec.update(environment={"A": "1"}, labels={"team": "x"}, prefer_host="")
    other = {**value_of(REG.named["peloton.TaskLaunchSpec"], random.Random(4)), "environment": {"B": "2"}}
    # Runs of alike specs, broken by another spec, by a copy equal to the first (not the same
    # objects), and by one tail field changed on one task.
    gangs = [_gang(spec, 0), _gang(spec, 1), _gang(other, 2), _gang(spec, 3), _gang(spec, 4, prefer_host="h9"),
             _gang(copy.deepcopy(spec), 5), _gang(spec, 6)]
    record = {"gangs": gangs}
    data = encode(record)
    assert data == fastavro_bytes("peloton.GangDemands", record)
    read = decode(data)
    assert read == fastavro_record("peloton.GangDemands", data) == record
    tasks = [g["tasks"][0] for g in read["gangs"]]
    # Alike tasks in a row share their tail's values, read once; a changed tail is read anew.
    assert tasks[1]["environment"] is tasks[0]["environment"]
    assert tasks[3]["environment"] is not tasks[2]["environment"]
    assert tasks[6]["environment"] is tasks[5]["environment"]
    assert tasks[4]["prefer_host"] == "h9" and tasks[5]["prefer_host"] == ""
    # Each is a dict of its own in the schema's order, though alike ones are copies of one kept
    # record: a change to one is seen in no other, nor in the next read.
    assert list(tasks[1]) == [f["name"] for f in REG.named["peloton.TaskLaunchSpec"]["fields"]]
    tasks[0]["prefer_host"] = "changed"
    assert tasks[1]["prefer_host"] == "" and decode(data)["gangs"][1]["tasks"][0]["prefer_host"] == ""
    assert encode(record) == data  # the writer's kept tail, reused, writes the same bytes again
    for cut in range(0, len(data), 7):  # bytes cut inside a tail that began like the last one
        with pytest.raises((Truncated, IndexError, struct.error)):
            decode(data[:cut])
    assert decode(data) == record  # and a failed read leaves nothing wrong behind


def test_a_jobs_gangs_read_and_write_their_job_fields_once_between_their_ids_and_tasks() -> None:
    encode, decode = compile_codec(REG.schema("peloton.GangDemands"), REG.named, SHARED_SPANS)
    spec = value_of(REG.named["peloton.TaskLaunchSpec"], random.Random(6))
    gangs = [_gang(spec, i) for i in range(6)]
    for g in gangs:
        g.update(avoid_hosts=["h1", "h2"], created_ms=1_700_000_000_000)
    gangs[2]["priority"] = 3  # a field inside the span: that gang's span is read anew
    gangs[3]["avoid_hosts"] = ["h1", "h2"]  # equal values, other objects: the same bytes
    gangs[4]["created_ms"] = 1_700_000_000_001  # the second span, at the record's end
    record = {"gangs": gangs}
    data = encode(record)
    assert data == fastavro_bytes("peloton.GangDemands", record)
    read = decode(data)["gangs"]
    assert read == fastavro_record("peloton.GangDemands", data)["gangs"] == gangs
    assert read[1]["avoid_hosts"] is read[0]["avoid_hosts"] and read[3]["avoid_hosts"] is read[0]["avoid_hosts"]
    assert read[2]["avoid_hosts"] is not read[0]["avoid_hosts"] and read[2]["priority"] == 3
    assert [g["created_ms"] for g in read] == [g["created_ms"] for g in gangs]
    assert read[5]["created_ms"] is read[0]["created_ms"] and read[4]["created_ms"] is not read[0]["created_ms"]
    assert encode(record) == data
    for cut in range(0, len(data), 5):  # cut inside a span that began like a kept one
        with pytest.raises((Truncated, IndexError, struct.error)):
            decode(data[:cut])
    assert decode(data)["gangs"] == gangs


def test_shared_spans_must_name_fields_of_the_record_in_order() -> None:
    schema = REG.schema("peloton.GangDemand")
    with pytest.raises(ValueError, match="no field nope"):
        compile_codec(schema, REG.named, {"peloton.GangDemand": (("nope", None),)})
    with pytest.raises(ValueError, match="follow one another"):
        compile_codec(schema, REG.named, {"peloton.GangDemand": (("pool", "priority"), ("job_id", "pool"))})


def test_interleaved_statuses_share_their_few_tails_and_read_as_fastavro_does() -> None:
    # A host manager's statuses alternate between states run by run (a run's TASK_STARTING, then
    # its TASK_RUNNING): each of those tails is kept, not only the last one.
    encode, decode = compile_codec(REG.schema("peloton.TaskStatuses"), REG.named, SHARED_SPANS)
    states = ["TASK_STARTING", "TASK_RUNNING"] * 4 + ["TASK_FINISHED", "TASK_KILLED", "TASK_LOST", "TASK_FAILED",
                                                      "TASK_STARTING", "TASK_RUNNING"]
    statuses = [{"event_id": f"e{i}", "task_id": f"j-{i // 2}-1", "job_id": "j", "instance": i // 2, "run_id": 1,
                 "host_id": f"h{i // 2}", "state": state, "reason": "", "message": "", "exit_code": None,
                 "signal": None, "timestamp_ms": 1_700_000_000_000, "health": ""} for i, state in enumerate(states)]
    record = {"job_id": "j", "statuses": statuses}
    data = encode(record)
    assert data == fastavro_bytes("peloton.TaskStatuses", record)
    read = decode(data)
    assert read == fastavro_record("peloton.TaskStatuses", data) == record
    assert encode(record) == data
    stamps = [s["timestamp_ms"] for s in read["statuses"]]  # a large int: one object per read
    assert stamps[2] is stamps[0] and stamps[7] is stamps[1]  # the two alternating tails, each read once
    assert stamps[8] is not stamps[0]
    # Four other tails came between the last TASK_STARTING and the one before: it was read anew.
    assert stamps[12] is not stamps[0] and stamps[13] is not stamps[1]
    for cut in range(0, len(data), 5):
        with pytest.raises((Truncated, IndexError, struct.error)):
            decode(data[:cut])
    assert decode(data) == record


def test_a_gang_read_from_a_demand_bundle_is_sent_on_as_its_bytes_until_changed() -> None:
    spec = value_of(REG.named["peloton.TaskLaunchSpec"], random.Random(5))
    gangs = [_gang(spec, i) for i in range(3)]
    name, bundle = REG.decode(REG.bundle("peloton.GangDemand", [REG.encode_body("peloton.GangDemand", g)
                                                                 for g in gangs], "/p"))
    read = bundle["gangs"]
    assert all(isinstance(g, Encoded) and g.raw for g in read) and read == gangs
    for g, plain in zip(read, gangs, strict=True):
        admitted = REG.encode_body("peloton.AdmittedGang", {"gang": g, "admitted_ms": 7})
        assert admitted == REG.encode_body("peloton.AdmittedGang", {"gang": plain, "admitted_ms": 7})
        assert admitted == fastavro_bytes("peloton.AdmittedGang", {"gang": plain, "admitted_ms": 7})
    kept = read[2]
    kept.raw = b"\x01\x02"  # what is written is the bytes kept, not an encoding of the values
    assert REG.encode_body("peloton.AdmittedGang", {"gang": kept, "admitted_ms": 7}) == b"\x01\x02\x0e"
    # Changed, it is encoded anew: its bytes are dropped by any change of a key.
    changed = read[0]
    changed["priority"] = 9
    assert changed.raw is None
    again = REG.decode(REG.header("peloton.AdmittedGang") + REG.encode_body(
        "peloton.AdmittedGang", {"gang": changed, "admitted_ms": 7}))[1]
    assert again["gang"]["priority"] == 9
    for change in (lambda g: g.pop("pool"), lambda g: g.update(pool="/q"), lambda g: g.setdefault("x", 1),
                   lambda g: g.__delitem__("pool"), lambda g: g.clear()):
        g = REG.decode(REG.bundle("peloton.GangDemand", [REG.encode_body("peloton.GangDemand", gangs[1])] * 2,
                                  "/p"))[1]["gangs"][0]
        change(g)
        assert g.raw is None
    # Read anywhere else (place's AdmittedGangs, a lone GangDemand), a gang is a plain dict.
    lone = REG.decode(REG.encode("peloton.GangDemand", gangs[0]))[1]
    assert type(lone) is dict
    assert type(REG.decode(REG.encode("peloton.AdmittedGang", {"gang": read[1], "admitted_ms": 1}))[1]["gang"]) is dict


def test_a_task_spec_read_from_an_admitted_gang_goes_into_its_placement_as_its_bytes() -> None:
    spec = value_of(REG.named["peloton.TaskLaunchSpec"], random.Random(6))
    gangs = [_gang(spec, i) for i in range(3)]  # alike tasks: their specs share a tail
    admitted = [REG.encode_body("peloton.AdmittedGang", {"gang": g, "admitted_ms": 7}) for g in gangs]
    read = [a["gang"] for a in REG.decode(REG.bundle("peloton.AdmittedGang", admitted, None))[1]["gangs"]]
    tasks = [t for g in read for t in g["tasks"]]
    assert all(isinstance(t, Encoded) for t in tasks) and read == gangs
    for t, plain in zip(tasks, [t for g in gangs for t in g["tasks"]], strict=True):
        assert t.raw == REG.encode_body("peloton.TaskLaunchSpec", plain)  # the whole record, its tail too
        placement = {"placement_id": "p", "gang_id": "g", "pool": "/p", "shard": 1, "placed_ms": 9,
                     "assignments": [{"host_id": "h1", "task": t, "ports": {}}]}
        assert REG.encode_body("peloton.Placement", placement) == fastavro_bytes(
            "peloton.Placement", {**placement, "assignments": [{"host_id": "h1", "task": plain, "ports": {}}]})
    tasks[0]["prefer_host"] = "h9"  # changed: encoded anew
    assert tasks[0].raw is None
    placement = {"placement_id": "p", "gang_id": "g", "pool": "/p", "shard": 1, "placed_ms": 9,
                 "assignments": [{"host_id": "h1", "task": tasks[0], "ports": {}}]}
    back = REG.decode(REG.encode("peloton.Placement", placement))[1]
    assert back["assignments"][0]["task"]["prefer_host"] == "h9"
    # A lone AdmittedGang keeps them too; a gang's own bytes are kept only where entitle reads them.
    lone = REG.decode(REG.encode("peloton.AdmittedGang", {"gang": gangs[0], "admitted_ms": 1}))[1]
    assert type(lone["gang"]) is dict and isinstance(lone["gang"]["tasks"][0], Encoded)
