"""Peloton's v0 and v1alpha HostService over gRPC: hosts by state from the API's host-state view,
maintenance and host pools for administrators only. Maintenance reads
the host-state topic and sends its request through a producer of its own
(admin.request_maintenance): both are replaced here, the broker's part being for integration tests."""

from __future__ import annotations

import grpc
import pytest

from peloton.api.v0.host import host_pb2
from peloton.api.v0.host.svc import host_svc_pb2 as svc
from peloton.api.v0.host.svc import host_svc_pb2_grpc
from peloton.api.v1alpha.host import host_pb2 as v1host
from peloton.api.v1alpha.host.svc import host_svc_pb2 as v1svc
from peloton.api.v1alpha.host.svc import host_svc_pb2_grpc as v1grpc
from peloton.runtime import RecordingEmitter
from tests.builders.api import HOST


@pytest.fixture
def v0(port) -> host_svc_pb2_grpc.HostServiceStub:
    return host_svc_pb2_grpc.HostServiceStub(port.channel)


@pytest.fixture
def sent(monkeypatch) -> RecordingEmitter:
    """Two UP hosts on the host-state topic, and what maintenance sends, recorded."""
    out = RecordingEmitter("pelotonctl")
    monkeypatch.setattr("pelotonctl.admin.list_hosts", lambda _settings, wait_s=3.0: [HOST, {**HOST, "host_id": "h1"}])
    monkeypatch.setattr("pelotonctl.admin.emitter", lambda _settings, who="pelotonctl": out)
    return out


def test_query_hosts_by_state(port, v0) -> None:
    [h0] = v0.QueryHosts(svc.QueryHostsRequest(), metadata=port.as_user("bob")).host_infos
    assert (h0.hostname, h0.state, h0.goal_state) == ("h0", host_pb2.HOST_STATE_UP, host_pb2.HOST_STATE_UP)
    assert [(lb.key, lb.value) for lb in h0.labels] == [("hostname", "h0")]
    assert (h0.ip, h0.current_pool, h0.desired_pool) == ("", "default", "default")
    up = v0.QueryHosts(svc.QueryHostsRequest(host_states=[host_pb2.HOST_STATE_UP, host_pb2.HOST_STATE_DRAINING]),
                       metadata=port.as_user("bob"))
    assert [h.hostname for h in up.host_infos] == ["h0"]
    # Peloton answers nothing, not an error, for a state no host is in
    for states in ([host_pb2.HOST_STATE_DRAINED], [host_pb2.HOST_STATE_UNKNOWN], [host_pb2.HOST_STATE_INVALID]):
        assert not v0.QueryHosts(svc.QueryHostsRequest(host_states=states), metadata=port.as_user("bob")).host_infos
    v1 = v1grpc.HostServiceStub(port.channel)
    [same] = v1.QueryHosts(v1svc.QueryHostsRequest(host_states=[v1host.HOST_STATE_UP]),
                           metadata=port.as_user("alice")).host_infos
    assert (same.hostname, same.state) == ("h0", v1host.HOST_STATE_UP)
    with pytest.raises(grpc.RpcError) as unknown:
        v0.QueryHosts(svc.QueryHostsRequest())
    assert unknown.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_maintenance_is_for_administrators(port, v0, sent) -> None:
    for method, request in ((v0.StartMaintenance, svc.StartMaintenanceRequest(hostname="h0")),
                            (v0.CompleteMaintenance, svc.CompleteMaintenanceRequest(hostname="h0"))):
        with pytest.raises(grpc.RpcError) as refused:
            method(request, metadata=port.as_user("bob"))
        assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert refused.value.details().startswith("host.maintenance on h0 refused: host.maintenance is for "
                                                  "administrators")
    assert ("bob", "host.maintenance", "h0", False) in port.decisions()
    assert sent.take("placements") == []


def test_an_administrator_drains_a_host_and_brings_it_back(port, v0, sent) -> None:
    assert v0.StartMaintenance(svc.StartMaintenanceRequest(hostname="h0"), metadata=port.as_user("root")).hostname \
        == "h0"
    [(_topic, key, schema, request)] = sent.take("placements")
    assert (key, schema, request["action"], request["requested_by"]) == ("h0", "peloton.HostMaintenance", "START",
                                                                         "root")
    v1 = v1grpc.HostServiceStub(port.channel)
    done = v1.CompleteMaintenance(v1svc.CompleteMaintenanceRequest(hostname="h0"), metadata=port.as_user("root"))
    assert done.hostname == "h0" and sent.take("placements")[0][3]["action"] == "COMPLETE"
    assert ("root", "host.maintenance", "h0", True) in port.decisions()


def test_maintenance_of_an_unknown_host_or_a_drain_too_far_is_refused(port, v0, sent, monkeypatch) -> None:
    with pytest.raises(grpc.RpcError) as missing:
        v0.StartMaintenance(svc.StartMaintenanceRequest(hostname="nope"), metadata=port.as_user("root"))
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND and "no host 'nope' is known" in missing.value.details()
    with pytest.raises(grpc.RpcError) as nameless:
        v0.StartMaintenance(svc.StartMaintenanceRequest(), metadata=port.as_user("root"))
    assert nameless.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    # Peloton's deprecated list: each host tried, the failures named together
    with pytest.raises(grpc.RpcError) as partly:
        v0.StartMaintenance(svc.StartMaintenanceRequest(hostnames=["nope", "h1"]), metadata=port.as_user("root"))
    assert partly.value.code() == grpc.StatusCode.NOT_FOUND
    assert partly.value.details().startswith("nope: no host 'nope' is known") and "(h1 done)" in partly.value.details()
    assert [r[3]["host_id"] for r in sent.take("placements")] == ["h1"]
    monkeypatch.setattr("pelotonctl.admin.list_hosts", lambda _settings, wait_s=3.0: [HOST])
    with pytest.raises(grpc.RpcError) as last:
        v0.StartMaintenance(svc.StartMaintenanceRequest(hostname="h0"), metadata=port.as_user("root"))
    assert last.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "h0 is the last UP host" in last.value.details() and "no force" in last.value.details()
    assert sent.take("placements") == []


def test_host_pools_are_made_listed_changed_and_deleted_by_administrators(port, v0, sent) -> None:
    v1 = v1grpc.HostServiceStub(port.channel)
    with pytest.raises(grpc.RpcError) as refused:
        v0.CreateHostPool(svc.CreateHostPoolRequest(name="gpu"), metadata=port.as_user("bob"))
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    v0.CreateHostPool(svc.CreateHostPoolRequest(name="gpu"), metadata=port.as_user("root"))
    with pytest.raises(grpc.RpcError) as taken:
        v1.CreateHostPool(v1svc.CreateHostPoolRequest(name="gpu"), metadata=port.as_user("root"))
    assert taken.value.code() == grpc.StatusCode.ALREADY_EXISTS
    with pytest.raises(grpc.RpcError) as bad:
        v0.CreateHostPool(svc.CreateHostPoolRequest(name="no spaces"), metadata=port.as_user("root"))
    assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "host pool name" in bad.value.details()
    pools = v1.ListHostPools(v1svc.ListHostPoolsRequest(), metadata=port.as_user("bob")).pools
    assert [(p.name, list(p.hosts)) for p in pools] == [("default", ["h0"]), ("gpu", [])]
    v0.ChangeHostPool(svc.ChangeHostPoolRequest(hostname="h0", sourcePool="default", destinationPool="gpu"),
                      metadata=port.as_user("root"))
    [(_topic, key, schema, move)] = sent.take("placements")
    assert (key, schema, move["pool"], move["source_pool"], move["requested_by"]) == (
        "h0", "peloton.HostPoolChange", "gpu", "default", "root")
    for request, code, words in (
            (svc.ChangeHostPoolRequest(hostname="h0", destinationPool="nope"), grpc.StatusCode.NOT_FOUND,
             "no host pool 'nope'"),
            (svc.ChangeHostPoolRequest(hostname="h0", sourcePool="gpu", destinationPool="gpu"),
             grpc.StatusCode.INVALID_ARGUMENT, "host h0 is in host pool 'default', not 'gpu'")):
        with pytest.raises(grpc.RpcError) as wrong:
            v0.ChangeHostPool(request, metadata=port.as_user("root"))
        assert wrong.value.code() == code and words in wrong.value.details()
    with pytest.raises(grpc.RpcError) as default:
        v0.DeleteHostPool(svc.DeleteHostPoolRequest(name="default"), metadata=port.as_user("root"))
    assert default.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    v1.DeleteHostPool(v1svc.DeleteHostPoolRequest(name="gpu"), metadata=port.as_user("root"))
    assert port.store.host_pools() == {}
    with pytest.raises(grpc.RpcError) as moves:
        v0.MoveHosts(svc.MoveHostsRequest(sourcePool="shared", destinationPool="b"), metadata=port.as_user("root"))
    assert moves.value.code() == grpc.StatusCode.UNIMPLEMENTED and "ChangeHostPool" in moves.value.details()
