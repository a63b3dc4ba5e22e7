"""Peloton's v0 ResourceManager and v1alpha ResourcePoolService over gRPC: a pool's id is its path,
v0's errors in its response fields and v1alpha's as status codes, only administrators change the
tree, and usage as entitle publishes it."""

from __future__ import annotations

import grpc
import pytest
import yaml
from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from peloton.api.v0 import peloton_pb2
from peloton.api.v0.respool import respool_pb2, respool_pb2_grpc
from peloton.api.v1alpha.respool import respool_pb2 as v1
from peloton.api.v1alpha.respool.svc import respool_svc_pb2 as v1svc
from peloton.api.v1alpha.respool.svc import respool_svc_pb2_grpc as v1grpc
from peloton.runtime import StaticView


def _resources(**figures: float) -> dict:
    return {"cpu": 0.0, "mem_mb": 0.0, "disk_mb": 0.0, "gpu": 0.0, **figures}


# What entitle publishes for /a: one cpu held, half of it by revocable runs, two more asked for.
PUBLISHED = {"/a": {"pool": "/a", "demand": _resources(cpu=2.0), "slack_demand": _resources(),
                    "allocation": _resources(cpu=1.0, mem_mb=128.0), "non_slack_allocation": _resources(cpu=0.5),
                    "slack_allocation": _resources(cpu=0.5), "waiting": []}}


@pytest.fixture
def v0(port) -> respool_pb2_grpc.ResourceManagerStub:
    # The API's entitlements view as the entitle stage would have filled it.
    port.door.use_view("entitlements", StaticView(PUBLISHED))
    return respool_pb2_grpc.ResourceManagerStub(port.channel)


def pool_config(name: str, parent: str = "root", cpu: float = 1.0, **fields) -> respool_pb2.ResourcePoolConfig:
    config = respool_pb2.ResourcePoolConfig(name=name, parent=peloton_pb2.ResourcePoolID(value=parent), **fields)
    for kind, amount in (("cpu", cpu), ("memory", 1024.0), ("disk", 1024.0)):
        config.resources.add(kind=kind, reservation=amount, limit=amount, share=1.0)
    return config


def pool_id(value: str) -> peloton_pb2.ResourcePoolID:
    return peloton_pb2.ResourcePoolID(value=value)


def test_an_administrator_creates_a_pool_at_its_parent_s_path_and_a_team_is_refused(port, v0) -> None:
    made = v0.CreateResourcePool(respool_pb2.CreateRequest(config=pool_config("c", owningTeam="team-c")),
                                 metadata=port.as_user("root"))
    assert not made.HasField("error") and made.result.value == "/c"
    assert port.store.list_pools()["/c"]["owning_team"] == "team-c"
    found = v0.LookupResourcePoolID(respool_pb2.LookupRequest(path=respool_pb2.ResourcePoolPath(value="/c")),
                                    metadata=port.as_user("alice"))
    assert found.id.value == "/c"
    again = v0.CreateResourcePool(respool_pb2.CreateRequest(config=pool_config("c")), metadata=port.as_user("root"))
    assert again.error.alreadyExists.id.value == "/c" and "already exists" in again.error.alreadyExists.message
    with pytest.raises(grpc.RpcError) as refused:
        v0.CreateResourcePool(respool_pb2.CreateRequest(config=pool_config("d")), metadata=port.as_user("alice"))
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "pool.create on /d refused: pool.create is for administrators" in refused.value.details()
    assert ("alice", "pool.create", "/d", False) in port.decisions()
    assert "/d" not in port.store.list_pools()


def test_a_config_the_tree_refuses_comes_in_invalid_resource_pool_config(port, v0) -> None:
    under_jobs = v0.CreateResourcePool(respool_pb2.CreateRequest(config=pool_config("x", parent="/a")),
                                       metadata=port.as_user("root"))
    error = under_jobs.error.invalidResourcePoolConfig
    assert error.id.value == "/a/x" and "leaf pool with jobs" in error.message
    nameless = v0.CreateResourcePool(respool_pb2.CreateRequest(config=pool_config("")), metadata=port.as_user("root"))
    assert "a new pool needs one" in nameless.error.invalidResourcePoolConfig.message
    too_big = pool_config("e")
    too_big.resources[0].limit = 0.5  # below its reservation of 1
    refused = v0.CreateResourcePool(respool_pb2.CreateRequest(config=too_big), metadata=port.as_user("root"))
    assert "limit 0.5 is below reservation 1" in refused.error.invalidResourcePoolConfig.message


def test_get_reads_the_config_children_and_usage(port, v0) -> None:
    got = v0.GetResourcePool(respool_pb2.GetRequest(id=pool_id("/a")), metadata=port.as_user("bob"))
    info = got.poolinfo
    assert (info.id.value, info.path.value, info.parent.value, list(info.children)) == ("/a", "/a", "root", [])
    assert (info.config.name, info.config.owningTeam, info.config.parent.value) == ("a", "team-a", "root")
    assert {r.kind: (r.reservation, r.limit, r.type) for r in info.config.resources}["cpu"] == (
        4.0, 4.0, respool_pb2.ELASTIC)
    assert info.config.policy == respool_pb2.PriorityFIFO and info.config.slackLimit.maxPercent == 20.0
    assert {u.kind: (u.allocation, u.slack) for u in info.usage}["cpu"] == (1.0, 0.5)
    root = v0.GetResourcePool(respool_pb2.GetRequest(includeChildPools=True), metadata=port.as_user("bob"))
    assert (root.poolinfo.id.value, root.poolinfo.path.value, root.poolinfo.HasField("parent")) == ("root", "/", False)
    assert [c.value for c in root.poolinfo.children] == ["/a", "/b"]
    assert [c.id.value for c in root.childPools] == ["/a", "/b"]
    # the root is the cluster: its reservation is h0's capacity, its usage its pools' together
    assert {r.kind: r.reservation for r in root.poolinfo.config.resources}["cpu"] == 8.0
    assert {u.kind: u.allocation for u in root.poolinfo.usage}["memory"] == 128.0
    missing = v0.GetResourcePool(respool_pb2.GetRequest(id=pool_id("/nope")), metadata=port.as_user("bob"))
    assert missing.error.notFound.id.value == "/nope" and "no resource pool '/nope'" in missing.error.notFound.message


def test_query_answers_every_pool_root_first_and_lookup_checks_the_path(port, v0) -> None:
    every = v0.Query(respool_pb2.QueryRequest(), metadata=port.as_user("bob")).resourcePools
    assert [(p.id.value, p.path.value) for p in every] == [("root", "/"), ("/a", "/a"), ("/b", "/b")]

    def lookup(path: str) -> respool_pb2.LookupResponse:
        return v0.LookupResourcePoolID(respool_pb2.LookupRequest(path=respool_pb2.ResourcePoolPath(value=path)),
                                       metadata=port.as_user("bob"))
    assert lookup("/").id.value == "root" and lookup("/b").id.value == "/b"
    assert lookup("").error.invalidPath.message == "path cannot be empty"
    assert "should begin with /" in lookup("b").error.invalidPath.message
    gone = lookup("/nope")
    assert gone.error.notFound.path.value == "/nope" and not gone.id.value


def test_delete_answers_peloton_s_fields(port, v0) -> None:
    def delete(path: str, user: str = "root") -> respool_pb2.DeleteResponse:
        return v0.DeleteResourcePool(respool_pb2.DeleteRequest(path=respool_pb2.ResourcePoolPath(value=path)),
                                     metadata=port.as_user(user))
    busy = delete("/a")
    assert busy.error.isBusy.id.value == "/a" and "has jobs that are not terminal" in busy.error.isBusy.message
    assert delete("/nope").error.notFound.path.value == "/nope"
    assert "cannot be deleted" in delete("/").error.notDeleted.message
    v0.CreateResourcePool(respool_pb2.CreateRequest(config=pool_config("c")), metadata=port.as_user("root"))
    v0.CreateResourcePool(respool_pb2.CreateRequest(config=pool_config("d", parent="/c")),
                          metadata=port.as_user("root"))
    not_leaf = delete("/c")
    assert not_leaf.error.isNotLeaf.id.value == "/c" and "has child pools (/c/d)" in not_leaf.error.isNotLeaf.message
    with pytest.raises(grpc.RpcError) as refused:
        delete("/b", user="bob")
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED and "pool.delete on /b" in refused.value.details()
    assert not delete("/b").HasField("error") and "/b" not in port.store.list_pools()


def test_update_replaces_the_config_or_says_why_not(port, v0) -> None:
    changed = pool_config("b", cpu=2.0, owningTeam="team-b", ldapGroups=["ops-b"])
    answer = v0.UpdateResourcePool(respool_pb2.UpdateRequest(id=pool_id("/b"), config=changed),
                                   metadata=port.as_user("root"))
    assert not answer.HasField("error")
    stored = port.store.list_pools()["/b"]
    assert stored["ldap_groups"] == ["ops-b"] and stored["resources"][0]["reservation"] == 2.0
    moved = v0.UpdateResourcePool(respool_pb2.UpdateRequest(id=pool_id("/b"), config=pool_config("b", parent="/a")),
                                  metadata=port.as_user("root"))
    assert "is not the parent of '/b'" in moved.error.invalidResourcePoolConfig.message
    missing = v0.UpdateResourcePool(respool_pb2.UpdateRequest(id=pool_id("/nope"), config=pool_config("nope")),
                                    metadata=port.as_user("root"))
    assert missing.error.notFound.id.value == "/nope"


def test_v1alpha_answers_errors_as_status_codes(port, v0) -> None:
    pools = v1grpc.ResourcePoolServiceStub(port.channel)
    spec = v1.ResourcePoolSpec(name="c", owning_team="team-c")
    spec.parent.value = "root"
    spec.resources.add(kind="cpu", reservation=1.0, limit=2.0, share=1.0, type=v1.RESERVATION_TYPE_STATIC)
    made = pools.CreateResourcePool(v1svc.CreateResourcePoolRequest(spec=spec), metadata=port.as_user("root"))
    assert made.respool_id.value == "/c"
    got = pools.GetResourcePool(v1svc.GetResourcePoolRequest(respool_id=made.respool_id), metadata=port.as_user("bob"))
    cpu = {r.kind: r for r in got.respool.spec.resources}["cpu"]
    assert (got.respool.respool_id.value, got.respool.spec.owning_team, cpu.limit, cpu.type) == (
        "/c", "team-c", 2.0, v1.RESERVATION_TYPE_STATIC)
    assert got.respool.spec.policy == v1.SCHEDULING_POLICY_PRIORITY_FIFO
    a = pools.GetResourcePool(v1svc.GetResourcePoolRequest(respool_id={"value": "/a"}), metadata=port.as_user("bob"))
    assert {u.kind: (u.allocation, u.slack) for u in a.respool.usages}["cpu"] == (1.0, 0.5)
    every = pools.QueryResourcePools(v1svc.QueryResourcePoolsRequest(), metadata=port.as_user("bob")).respools
    assert [p.respool_id.value for p in every] == ["root", "/a", "/b", "/c"]
    path = v1.ResourcePoolPath(value="/c")
    assert pools.LookupResourcePoolID(v1svc.LookupResourcePoolIDRequest(path=path),
                                      metadata=port.as_user("bob")).respool_id.value == "/c"

    def code(method, request, user: str = "root") -> tuple[grpc.StatusCode, str]:
        with pytest.raises(grpc.RpcError) as failed:
            method(request, metadata=port.as_user(user))
        return failed.value.code(), failed.value.details()
    # the same spec again is the pool made already; another at its path is not
    assert pools.CreateResourcePool(v1svc.CreateResourcePoolRequest(spec=spec),
                                    metadata=port.as_user("root")).respool_id.value == "/c"
    other = v1.ResourcePoolSpec(name="c", parent={"value": "root"})
    assert code(pools.CreateResourcePool, v1svc.CreateResourcePoolRequest(spec=other))[0] == \
        grpc.StatusCode.ALREADY_EXISTS
    status, detail = code(pools.CreateResourcePool, v1svc.CreateResourcePoolRequest(
        respool_id={"value": "some-uuid"}, spec=v1.ResourcePoolSpec(name="e")))
    assert status == grpc.StatusCode.INVALID_ARGUMENT and "a pool's id is its path here" in detail
    assert code(pools.DeleteResourcePool, v1svc.DeleteResourcePoolRequest(respool_id={"value": "/a"}))[0] == \
        grpc.StatusCode.FAILED_PRECONDITION
    assert code(pools.GetResourcePool, v1svc.GetResourcePoolRequest(respool_id={"value": "/nope"}))[0] == \
        grpc.StatusCode.NOT_FOUND
    assert code(pools.LookupResourcePoolID, v1svc.LookupResourcePoolIDRequest(
        path=v1.ResourcePoolPath(value="c")))[0] == grpc.StatusCode.INVALID_ARGUMENT
    status, detail = code(pools.UpdateResourcePool, v1svc.UpdateResourcePoolRequest(respool_id=made.respool_id,
                                                                                    spec=spec), user="alice")
    assert status == grpc.StatusCode.PERMISSION_DENIED and "pool.update on /c refused" in detail
    pools.UpdateResourcePool(v1svc.UpdateResourcePoolRequest(respool_id=made.respool_id, spec=spec, Force=True),
                             metadata=port.as_user("root"))
    pools.DeleteResourcePool(v1svc.DeleteResourcePoolRequest(respool_id=made.respool_id),
                             metadata=port.as_user("root"))
    assert "/c" not in port.store.list_pools()


# Each field's wire encoding: fields of one encoding read each other's values.
_WIRE = {FieldDescriptor.TYPE_DOUBLE: "fixed64", FieldDescriptor.TYPE_STRING: "bytes",
         FieldDescriptor.TYPE_MESSAGE: "bytes", **{t: "varint" for t in (
             FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_ENUM,
             FieldDescriptor.TYPE_BOOL, FieldDescriptor.TYPE_INT32)}}


def _wire(descriptor: Descriptor) -> dict:
    return {f.number: (_WIRE[f.type], f.is_repeated, _wire(f.message_type) if f.message_type else None)
            for f in descriptor.fields}


def test_v1alpha_s_respool_messages_are_v0_s_on_the_wire() -> None:
    """pool_shapes builds v0's messages and reads them as v1alpha's."""
    assert _wire(respool_pb2.ResourcePoolInfo.DESCRIPTOR) == _wire(v1.ResourcePoolInfo.DESCRIPTOR)
    assert _wire(respool_pb2.ResourcePoolConfig.DESCRIPTOR) == _wire(v1.ResourcePoolSpec.DESCRIPTOR)
    for name, number in respool_pb2.ReservationType.items():
        assert v1.ReservationType.Name(number).endswith(name) or number == 0
    assert respool_pb2.PriorityFIFO == v1.SCHEDULING_POLICY_PRIORITY_FIFO


# One of Peloton's integration-test pools (tests/integration/test_configs/test_respool_controller_limit.yaml).
PELOTON_POOL = """changeLog: null
name: TestPelotonResPool_integration_controller
owningTeam: team6
ldapGroups: [money, team6, otto]
description: "A test respool for peloton integration controller limit"
resources:
- {kind: cpu, reservation: 5, limit: 10, share: 1}
- {kind: memory, reservation: 1000, limit: 2000, share: 2}
- {kind: disk, reservation: 20000, limit: 30000, share: 1}
- {kind: gpu, reservation: 0, limit: 0, share: 1}
parent: {value: root}
controllerLimit: {maxPercent: 10}
"""


def test_a_pool_as_peloton_s_clients_write_it(port, v0) -> None:
    config = json_format.ParseDict(yaml.safe_load(PELOTON_POOL), respool_pb2.ResourcePoolConfig())
    made = v0.CreateResourcePool(respool_pb2.CreateRequest(config=config), metadata=port.as_user("root"))
    assert made.result.value == "/TestPelotonResPool_integration_controller"
    got = v0.GetResourcePool(respool_pb2.GetRequest(id=made.result), metadata=port.as_user("bob")).poolinfo.config
    assert (list(got.ldapGroups), got.controllerLimit.maxPercent) == (["money", "team6", "otto"], 10.0)
    assert {r.kind: (r.limit, r.share) for r in got.resources}["memory"] == (2000.0, 2.0)
