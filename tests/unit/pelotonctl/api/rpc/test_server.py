"""The gRPC port as generic tools meet it: the standard health service, server reflection listing
every service of proto/, TLS when the API has a certificate, and every method either served or
refused with its reason."""

from __future__ import annotations

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from peloton.config import Settings
from pelotonctl.api.rpc import catalog, server
from pelotonctl.dev.tls import make_certificates


def test_health_answers_serving_for_the_server_and_each_service(port) -> None:
    health = health_pb2_grpc.HealthStub(port.channel)
    for name in ("", "peloton.api.v0.job.JobManager", "peloton.api.v1alpha.job.stateless.svc.JobService"):
        answer = health.Check(health_pb2.HealthCheckRequest(service=name))
        assert answer.status == health_pb2.HealthCheckResponse.SERVING
    with pytest.raises(grpc.RpcError) as unknown:
        health.Check(health_pb2.HealthCheckRequest(service="no.such.Service"))
    assert unknown.value.code() == grpc.StatusCode.NOT_FOUND


def test_reflection_lists_every_service_and_describes_their_files(port) -> None:
    stub = reflection_pb2_grpc.ServerReflectionStub(port.channel)
    [listed] = stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
    names = {s.name for s in listed.list_services_response.service}
    assert {s.full_name for s in server.services()} <= names
    assert {"grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection"} <= names
    assert len(server.services()) == 16
    [described] = stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(
        file_containing_symbol="peloton.api.v0.job.JobManager")]))
    assert described.file_descriptor_response.file_descriptor_proto  # with its imports, for grpcurl's describe


def test_every_method_is_served_or_says_why_not() -> None:
    methods = [server.method_name(m) for s in server.services() for m in s.methods]
    assert len(methods) == 123
    assert server.unaccounted() == []
    for name in methods:
        if name not in catalog.SERVED:
            reason = catalog.not_served_reason(name)
            assert reason and len(reason) > 20, name


def test_the_port_speaks_tls_when_the_api_has_a_certificate(port, tmp_path) -> None:
    ca, pem = make_certificates(tmp_path / "tls")
    settings = Settings(home=tmp_path, api_tls_cert=str(pem), api_tls_key=str(pem))
    secured, bound = server.build(port.door, settings, "127.0.0.1", 0)
    secured.start()
    try:
        trusted = grpc.secure_channel(f"127.0.0.1:{bound}", grpc.ssl_channel_credentials(ca.read_bytes()))
        health = health_pb2_grpc.HealthStub(trusted)
        assert health.Check(health_pb2.HealthCheckRequest(), timeout=10).status == \
            health_pb2.HealthCheckResponse.SERVING
        plain = health_pb2_grpc.HealthStub(grpc.insecure_channel(f"127.0.0.1:{bound}"))
        with pytest.raises(grpc.RpcError) as refused:
            plain.Check(health_pb2.HealthCheckRequest(), timeout=5)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        secured.stop(0).wait()

