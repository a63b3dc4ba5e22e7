"""Thousands of malformed and hostile messages, interleaved with valid jobs, on a real broker:
every bad one becomes a dead letter with a reason, no stage exits, grows past 500 MB or stalls,
and every valid job succeeds with each instance run exactly once."""

from __future__ import annotations

import random
import struct
import time
import uuid
from itertools import pairwise
from pathlib import Path

import pytest
from confluent_kafka import Producer

from peloton.runtime import kafka_access, now_ms
from peloton.serde import registry
from peloton.topics import Catalogue
from pelotonctl.admin import emitter
from tests.integration.helpers import command

pytestmark = pytest.mark.integration

VALID = """
name: valid-{n}
instancecount: 3
sla: {{minimumRunningInstances: 2}}
defaultconfig:
  resource: {{cpulimit: 0.5, memlimitmb: 32, disklimitmb: 1}}
  command: {{shell: true, value: 'true'}}
  constraint:
    type: 1
    labelConstraint: {{kind: 2, condition: 2, label: {{key: driver, value: sim}}, requirement: 1}}
"""

TASK = "  resource: {{cpulimit: {cpu}, memlimitmb: {mem}}}\n  command: {{shell: true, value: 'true'}}\n"


def job_with(task_fields: str = "", top: str = "") -> str:
    return f"name: bad\n{top}defaultconfig:\n{task_fields or TASK.format(cpu=1, mem=8)}"


def hostile_configs(rng: random.Random) -> list[str]:
    """Job configs a stage must refuse: bombs, depth, and impossible or mistyped values in every
    field a stage evaluates."""
    laughs = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n" for p, c in pairwise("abcdefghi"))
    out = [
        laughs,
        "a: &a [*a]\n",
        "[" * 5000 + "]" * 5000,
        "".join(" " * i + "k:\n" for i in range(200)) + " " * 200 + "v\n",  # block style, 200 deep
        "{k: " * 2000 + "v" + "}" * 2000,  # flow style, 2,000 deep
        job_with(TASK.format(cpu=1, mem=8) + "  constraint:\n    andconstraint:\n      constraints: "
                 + laughs.replace("\n", " ")),
        "name: [unclosed\n",
        "- just\n- a list\n",
        "\x00\x01\x02",
        job_with(top="instancecount: 1000000000\n"),
        job_with(top="instancecount: -1\n"),
        job_with(top="instancecount: lots\n"),
        job_with(top="sla: {priority: 99999999999}\n"),
        job_with(top="sla: {minimumRunningInstances: 100}\ninstancecount: 100\n"),  # gang above the pool limit
        job_with(top="placementstrategy: SIDEWAYS\n"),
        job_with(top="type: 42\n"),
        job_with(TASK.format(cpu=".inf", mem=8)),
        job_with(TASK.format(cpu=".nan", mem=8)),
        job_with(TASK.format(cpu=-1, mem=8)),
        job_with(TASK.format(cpu="abc", mem=8)),
        job_with(TASK.format(cpu=1e9, mem=8)),
        job_with(TASK.format(cpu=1, mem="1e400")),
        job_with(TASK.format(cpu=40, mem=8)),  # larger than every host
        job_with("  resource: {cpulimit: 1}\n"),  # no command
        job_with(TASK.format(cpu=1, mem=8)
                 + "  constraint:\n    labelconstraint: {kind: 2, label: {key: a, value: b}, requirement: abc}\n"),
        job_with(TASK.format(cpu=1, mem=8) + "  constraint:\n    type: 2\n    andconstraint: {constraints: [x, 3]}\n"),
        job_with(TASK.format(cpu=1, mem=8) + "  constraint:\n    type: 3\n    orconstraint: {constraints: 7}\n"),
        job_with(TASK.format(cpu=1, mem=8) + "  constraint:\n    type: 99\n"),
        job_with(TASK.format(cpu=1, mem=8) + "  constraint: "
                 + "{type: 2, andconstraint: {constraints: [" * 40 + "]}}" * 40 + "\n"),
        job_with(TASK.format(cpu=1, mem=8) + "  ports: [{name: p, value: 99999}]\n"),
        job_with(TASK.format(cpu=1, mem=8) + "  restartpolicy: {maxfailures: -1}\n"),
        job_with(TASK.format(cpu=1, mem=8) + "  killgraceperiodseconds: 99999999999\n"),
        # four tasks in one gang whose records add up past the broker's message limit
        job_with("  resource: {cpulimit: 0.1, memlimitmb: 1}\n  command: {shell: true, value: '"
                 + "x" * 300_000 + "'}\n", top="instancecount: 4\nsla: {minimumRunningInstances: 4}\n"),
    ]
    for _ in range(40):  # random bytes decoded as text
        out.append(bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 300))).decode("latin-1"))
    return out


def framed(schema_id: int, body: bytes) -> bytes:
    return struct.pack(">bI", 0, schema_id) + body


def test_hostile_input_is_dead_lettered_and_every_valid_job_runs_once(pipeline_factory) -> None:
    rng = random.Random(5)
    p = pipeline_factory(hosts="sim:8:cpu=16,mem_mb=65536,disk_mb=100000", sim_task_seconds=0.05)
    p.start_all()
    # the hosts on host-state first: admit refuses a task larger than every host only once it
    # knows them (before, the job is accepted and waits in place, saying it fits on no host)
    assert len(p.read_topic("host-state", expect=8, timeout=30)) >= 8
    cat = Catalogue(p.settings.topic_prefix)
    reg = registry()
    raw = Producer({**kafka_access(p.settings), "message.max.bytes": 8_000_000,
                    "partitioner": "murmur2_random", "linger.ms": 5})
    out = emitter(p.settings, "fuzz")
    bad_keys: set[bytes] = set()

    undelivered: list[str] = []
    extra_letters = 0  # dead letters beyond one per bad message

    def bad(topic: str, value: bytes) -> None:
        key = f"bad-{len(bad_keys)}".encode()
        bad_keys.add(key)
        raw.produce(cat[topic].name, key=key, value=value,
                    on_delivery=lambda err, msg: err and undelivered.append(f"{msg.key()}: {err}"))

    configs = hostile_configs(rng)
    good_cmd = reg.encode("peloton.JobCommand", command("x", VALID.format(n=0)))
    valid_ids = []
    for i in range(2000):
        kind = i % 10
        if kind == 0:
            bad("job-commands", bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 64))))
        elif kind == 1:
            bad("job-commands", good_cmd[: rng.randint(5, len(good_cmd) - 1)])  # truncated Avro
        elif kind == 2:
            bad("job-commands", framed(rng.choice([0, 4, 9999, 2**31]), good_cmd[5:]))  # wrong schema id
        elif kind == 3:
            bad("job-commands", reg.encode("peloton.JobCommand", command(
                rng.choice(["", "../../etc/passwd", "a/b", "x" * 500, "ok\x00id"]), VALID.format(n=i))))
        elif kind == 4:
            bad("job-commands", reg.encode("peloton.JobCommand", command(f"j{i}", VALID.format(n=i),
                                                                         pool=rng.choice(["/nowhere", "", "/"]))))
        elif kind == 5:
            bad("job-commands", reg.encode("peloton.JobCommand", command(f"j{i}", VALID.format(n=i), kind="DROP")))
        elif kind in (6, 7):
            bad("job-commands", reg.encode("peloton.JobCommand", command(f"j{i}", configs[i % len(configs)])))
        elif kind == 8 and i % 20 == 18:  # a status of many runs, none of which a task can use
            job = rng.choice(["nobody", valid_ids[-1] if valid_ids else "nobody"])
            runs = rng.randint(1, 4)
            extra_letters += runs - 1  # each run is dead-lettered alone
            bad("task-status", reg.encode("peloton.TaskStatusRuns", {
                "event_id": uuid.uuid4().hex, "job_id": job,
                "state": rng.choice(["TASK_UNKNOWN", "TASK_RUNNING", "TASK_FINISHED", "TASK_FAILED"]),
                "reason": rng.choice(["", "x" * 300]), "message": "", "exit_code": rng.choice([None, 0, -1]),
                "signal": None, "health": rng.choice(["", "HEALTHY", "\x00"]), "timestamp_ms": now_ms(),
                "runs": [{"instance": rng.choice([-5, 2**31 - 1]) if job != "nobody" else rng.randint(-5, 5),
                          "run_id": rng.choice([0, 1, -1]), "host_id": rng.choice(["", "sim-0", "nowhere"]),
                          "offset_ms": rng.choice([0, -2**31, 2**31 - 1])} for _ in range(runs)]}))
        elif kind == 8:  # statuses no task can use: unknown jobs or instances, mismatched ids
            job = rng.choice(["nobody", valid_ids[-1] if valid_ids else "nobody"])
            instance = rng.choice([-5, 2**31 - 1]) if job != "nobody" else rng.choice([-5, 0, 2**31 - 1])
            bad("task-status", reg.encode("peloton.TaskStatus", {
                "event_id": uuid.uuid4().hex, "task_id": rng.choice([f"{job}-0-1", "x", ""]), "job_id": job,
                "instance": instance, "run_id": rng.choice([0, 1, -1]),
                "host_id": "", "state": rng.choice(["TASK_UNKNOWN", "TASK_RUNNING", "TASK_FINISHED"]),
                "reason": "", "message": "", "exit_code": None, "signal": None, "timestamp_ms": now_ms()}))
        else:
            bad("task-status", bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 200))))
        if i % 100 == 50:  # valid jobs in between
            job_id = f"valid-{i}"
            out.emit("job-commands", job_id, "peloton.JobCommand", command(job_id, VALID.format(n=i)))
            out.flush()
            valid_ids.append(job_id)
    # a config larger than the broker's message limit, from a producer that allows it: Kafka
    # refuses it at the door (message.max.bytes, 1 MB), so no stage ever reads it
    bad("job-commands", reg.encode("peloton.JobCommand", command("huge", "name: huge\n# " + "y" * 3_000_000)))
    huge_key = f"bad-{len(bad_keys) - 1}".encode()
    assert raw.flush(30) == 0
    assert len(undelivered) == 1 and "MSG_SIZE_TOO_LARGE" in undelivered[0] and str(huge_key) in undelivered[0], \
        undelivered[:5]
    bad_keys.discard(huge_key)

    started = time.monotonic()
    for job_id in valid_ids:
        assert p.wait_job(job_id, timeout=180) == "SUCCEEDED"
    for job_id in valid_ids:
        # (a hostile status of a run alive on a host, of an instance the job does not have, has
        # the job manager kill that run as an orphan: the kill's claim counts for that instance)
        runs = {i: n for i, n in p.store.launch_counts(job_id).items() if 0 <= i < 3}
        assert runs == {0: 1, 1: 1, 2: 1}, f"{job_id}: {runs}"
    letters = p.read_topic("dead-letters", expect=len(bad_keys) + extra_letters, timeout=120)
    lettered = {dl["key"] for dl in letters}
    missing = sorted(bad_keys - lettered)[:10]
    assert not missing, f"{len(bad_keys - lettered)} bad messages left no dead letter, e.g. {missing}"
    assert all(dl["reason"] for dl in letters)
    for instance, proc in p.procs.items():
        assert proc.poll() is None, f"{instance} exited with {proc.returncode}; see {p.log(instance)}"
        status = Path(f"/proc/{proc.pid}/status").read_text().splitlines()
        peak_kb = int(next(line.split()[1] for line in status if line.startswith("VmHWM")))
        assert peak_kb < 500 * 1024, f"{instance} peaked at {peak_kb // 1024} MB"
    print(f"{len(bad_keys)} bad messages dead-lettered, {len(valid_ids)} valid jobs done "
          f"{time.monotonic() - started:.1f}s after the last was sent")
