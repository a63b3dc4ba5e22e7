"""Pool configs, host inventories, job expansion, topic keying, held offsets."""

from __future__ import annotations

import json

import pytest

from peloton.model.constraint import LabelConstraint, OrConstraint
from peloton.model.jobconfig import parse_job_config
from peloton.model.pool import PoolConfigError, leaf_pool_error, parse_pool_config, pool_limit
from peloton.model.resources import Resources
from peloton.runtime import HeldOffsets
from peloton.topics import murmur2, partition_for
from stages.admit.expand import expand_job, gang_records, launch_spec, next_run
from stages.launch.inventory import InventoryError, parse_inventory
from stages.place.task_need import TaskNeed


@pytest.mark.parametrize("name", ["default_respool.yaml", "helloworld_pool.yaml"])
def test_pelotons_pool_files_parse_unchanged(peloton_examples, name: str) -> None:
    config = parse_pool_config((peloton_examples / name).read_text(), "/p")
    assert {r["kind"] for r in config["resources"]} == {"cpu", "memory", "disk", "gpu"}
    assert pool_limit(config).cpu in (12.0, 8.0)


def test_pool_errors_name_every_problem() -> None:
    text = ("resources:\n- kind: cpu\n  reservation: 5\n  limit: 2\n- kind: tpu\n  limit: 1\n"
            "controllerlimit: {maxpercent: 150}\n")
    with pytest.raises(PoolConfigError) as exc:
        parse_pool_config(text, "/p")
    message = str(exc.value)
    assert "limit 2.0 is below reservation 5.0" in message
    assert "resources[1].kind" in message and "150" in message


@pytest.mark.parametrize(
    "text, expected",
    [
        ("resources: 5\n", "resources: expected a list, got 5"),
        ("resources: cpu\n", "resources: expected a list, got 'cpu'"),
        ("resources: [cpu]\n", "resources[0]: expected a mapping, got 'cpu'"),
        ("resources: [{kind: [cpu]}]\n", "resources[0].kind: must be one of cpu, memory, disk, gpu, got a list"),
        ("resources: [{kind: cpu, limit: .inf}]\n", "resources[0].limit: expected a finite number, got inf"),
        ("resources: [{kind: cpu, reservation: .nan}]\n",
         "resources[0].reservation: expected a finite number, got nan"),
        ("resources: [{kind: cpu, share: -.inf}]\n", "resources[0].share: expected a finite number, got -inf"),
        ("resources: [{kind: cpu, limit: 0x" + "f" * 400 + "}]\n",
         "resources[0].limit: expected a finite number, got 4446"),
        ("resources: [{kind: cpu, limit: '4'}]\n", "resources[0].limit: expected a number, got '4'"),
        ("controllerlimit: 5\n", "controllerlimit: expected a mapping, got 5"),
        ("controllerlimit: [50]\n", "controllerlimit: expected a mapping, got a list"),
        ("slacklimit: high\n", "slacklimit: expected a mapping, got 'high'"),
        ("slacklimit: {maxpercent: .nan}\n", "slacklimit.maxpercent: expected a finite number, got nan"),
        ("slacklimit: {maxpercent: 101}\n", "slacklimit.maxpercent: must be <= 100, got 101.0"),
        ("policy: true\n", "policy: only 1 (PriorityFIFO) exists, got true"),
        ("name: {a: b}\n", "name: expected a string, got a mapping"),
        ("name: 0x" + "f" * 5000 + "\n", "name: expected a string, got an integer of 20000 bits"),
        ("owningteam: [a]\n", "owningteam: expected a string, got a list"),
        ("- a\n", "<document>: expected a mapping of pool config keys, got a list"),
        ("", "<document>: expected a mapping of pool config keys, got null"),
        ("Resources: []\nresources: []\n", "resources: given twice (keys are case-insensitive)"),
        ("a: &a [1, *a]\n", "line 1: alias *a refers to a node that contains it (a recursive alias)"),
        ("[" * 5000 + "]" * 5000, "line 1: nesting deeper than 64 levels"),
        ("resources: [{kind: cpu, limit: 2001-13-01}]\n", "line 1, column 32: invalid YAML: cannot read this value"),
        ("resources: [\n", "line 2, column 1: invalid YAML: expected the node content"),
    ],
)
def test_hostile_pool_files_are_pool_config_errors(text: str, expected: str) -> None:
    with pytest.raises(PoolConfigError) as exc:
        parse_pool_config(text, "/p")
    assert any(e.startswith(expected) for e in exc.value.errors), exc.value.errors


def test_a_pool_alias_bomb_is_refused_before_it_expands() -> None:
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, 9)]
    with pytest.raises(PoolConfigError) as exc:
        parse_pool_config("\n".join(lines), "/p")
    assert exc.value.errors == ["line 7: aliases expand to more than 1000000 nodes (a YAML alias bomb?)"]


def test_pool_keys_may_be_camel_case_and_a_wrong_amount_is_reported_once() -> None:
    config = parse_pool_config("name: team\nResources: [{Kind: cpu, Limit: 4, Reservation: 1}]\n"
                               "controllerLimit: {maxPercent: 50}\n", "/t")
    assert (config["name"], pool_limit(config).cpu, config["controller_limit_pct"]) == ("team", 4.0, 50.0)
    with pytest.raises(PoolConfigError) as exc:
        parse_pool_config("resources: [{kind: cpu, limit: .nan, reservation: 1}]\n", "/p")
    assert exc.value.errors == ["resources[0].limit: expected a finite number, got nan"]


def test_a_constraint_reaches_placement_as_the_same_typed_tree() -> None:
    text = """
instancecount: 2
defaultconfig:
  resource: {cpulimit: 1}
  command: {value: "true"}
  constraint:
    type: 3
    orConstraint:
      constraints:
      - {type: 1, labelconstraint: {kind: 2, condition: 2, requirement: 1, label: {key: zone, value: 7}}}
      - labelConstraint: {kind: TASK, condition: CONDITION_LESS_THAN, requirement: 2, label: {key: app, value: web}}
"""
    spec = parse_job_config(text)
    job, tasks = expand_job("j1", "/pool", spec, text, now_ms=1)
    record = tasks[1].spec["constraint_json"]
    assert json.loads(record)["type"] == "OR"
    assert TaskNeed.from_spec(tasks[1].spec).constraint == spec.tasks[1].constraint == OrConstraint((
        LabelConstraint("HOST", "EQUAL", "zone", "7", 1), LabelConstraint("TASK", "LESS_THAN", "app", "web", 2)))
    assert tasks[0].spec["constraint_json"] == record


def test_instances_alike_share_one_launch_spec_built_once_and_each_reads_as_if_built_alone() -> None:
    text = """
instancecount: 4
labels: [{key: team, value: a}]
defaultconfig:
  resource: {cpulimit: 1, memlimitmb: 64}
  ports: [{name: http, envname: PORT}]
  command: {value: "serve", environment: {MODE: fast}}
instanceconfig:
  2: {command: {value: "other"}}
"""
    spec = parse_job_config(text)
    assert spec.tasks[1].command is spec.tasks[3].command  # one template's objects
    assert spec.tasks[2].command.value == "other" and spec.tasks[1].instance == 1
    job, tasks = expand_job("j1", "/pool", spec, text, now_ms=1)
    for t in tasks:
        assert t.spec == launch_spec("j1", spec, spec.tasks[t.instance], 1), t.instance
    assert [t.spec["command"] for t in tasks] == ["serve", "serve", "other", "serve"]
    assert [(t.spec["task_id"], t.spec["instance"]) for t in tasks] == [(f"j1-{i}-1", i) for i in range(4)]
    assert tasks[0].spec["environment"] is tasks[1].spec["environment"]  # shared, never changed


def test_jobs_go_to_existing_leaf_pools_only() -> None:
    pools = {"/a": {"parent": "/"}, "/a/b": {"parent": "/a"}}
    assert leaf_pool_error(pools, "/a/b") is None
    assert "not a leaf" in leaf_pool_error(pools, "/a")
    assert "unknown resource pool '/x'" in leaf_pool_error(pools, "/x")


def test_inventory_spec_and_its_errors() -> None:
    hosts = parse_inventory("local:2:cpu=4;sim:3:cpu=32,mem_mb=1000", shards=4)
    assert [h.host_id for h in hosts] == ["local-0", "local-1", "sim-0", "sim-1", "sim-2"]
    assert hosts[2].capacity == Resources(cpu=32, mem_mb=1000, disk_mb=100000)
    assert all(h.shard == partition_for(h.host_id, 4) for h in hosts)
    for bad in ("mesos:2", "sim:x", "sim:2:cpus=4", "sim:2:cpu=many"):
        with pytest.raises(InventoryError):
            parse_inventory(bad, 4)


def test_murmur2_matches_kafkas_java_client() -> None:
    # Kafka's own test vectors (Utils.murmur2 returns them as signed ints).
    signed = lambda v: v - (1 << 32) if v >= 1 << 31 else v  # noqa: E731
    assert signed(murmur2(b"21")) == -973932308
    assert signed(murmur2(b"foobar")) == -790332482
    assert signed(murmur2(b"a-little-bit-long-string")) == -985981536
    assert murmur2(b"") == 275646681


def test_testjob_expands_into_tasks_gangs_and_reruns(peloton_examples) -> None:
    text = (peloton_examples / "testjob.yaml").read_text()
    job, tasks = expand_job("j1", "/pool", parse_job_config(text), text, now_ms=1)
    assert job.instance_count == 10 and len(tasks) == 10
    assert tasks[0].spec["controller"] and tasks[0].spec["command"] == "echo Hello instance 0 && sleep 100"
    assert tasks[0].spec["kill_grace_seconds"] == 40.0
    assert tasks[5].spec["task_id"] == "j1-5-1" and tasks[5].spec["labels"]["testKey0"] == "testVal0"
    gangs = gang_records(job, tasks, now_ms=1)
    assert len(gangs) == 10 and gangs[0]["priority"] == 22
    next_run(tasks[3], now_ms=2)
    assert (tasks[3].task_id, tasks[3].run_id, tasks[3].state) == ("j1-3-2", 2, "PENDING")
    assert tasks[3].spec["task_id"] == "j1-3-2" and tasks[3].gang_id == "j1-3-2"


def test_held_offsets_commit_no_further_than_the_oldest_held() -> None:
    held = HeldOffsets()
    tp = ("t", 0)
    for off in (5, 6, 7):
        held.hold(tp, off)
    held.release(tp, 6)
    assert held.lowest() == {tp: 5}
    held.release(tp, 5)
    assert held.lowest() == {tp: 7}
    held.release(tp, 7)
    assert held.lowest() == {}


def test_held_records_of_one_bundle_share_an_offset_and_each_must_be_released() -> None:
    held = HeldOffsets()
    tp = ("admitted-gangs", 0)
    for offset in (3, 3, 3, 4):
        held.hold(tp, offset)
    held.release(tp, 3)
    held.release(tp, 3)
    assert held.lowest() == {tp: 3}
    held.release(tp, 4)
    assert held.lowest() == {tp: 3}
    held.release(tp, 3)
    assert held.lowest() == {}


def test_settings_round_trip_through_the_environment(monkeypatch, tmp_path) -> None:
    from peloton.config import Settings

    monkeypatch.setenv("PELOTON_HOME", str(tmp_path))
    monkeypatch.setenv("PELOTON_KAFKA_BOOTSTRAP", "broker:1")
    monkeypatch.setenv("PELOTON_MAX_BATCH", "7")
    monkeypatch.setenv("PELOTON_SIM_TASK_SECONDS", "0.25")
    s = Settings.from_env()
    assert (s.bootstrap, s.max_batch, s.sim_task_seconds) == ("broker:1", 7, 0.25)
    assert s.store == str(tmp_path / "peloton.db")
    assert Settings.from_env(max_batch=3).max_batch == 3
    for name, value in s.env().items():
        monkeypatch.setenv(name, value)
    assert Settings.from_env() == s
