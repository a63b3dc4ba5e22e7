"""The gRPC server of one API instance: every service of proto/ under Peloton's names (served or
answering UNIMPLEMENTED with the reason), the standard health service and server reflection, on a
port of its own beside the HTTP one, with TLS when the API has a certificate."""

from __future__ import annotations

import functools
import importlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import message_factory
from google.protobuf.descriptor import MethodDescriptor, ServiceDescriptor
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from peloton.config import Settings
from pelotonctl.api.door import Door
from pelotonctl.api.rpc import calls, catalog

# The modules that register the served methods (catalog.served), imported before the server is made.
SERVICERS = ("v0_jobs", "v0_tasks", "v0_respools", "v0_updates", "v0_hosts", "v0_volumes",
             "v1_stateless", "v1_pods", "v1_respools", "v1_hosts", "v1_volumes", "v1_watch", "v1_admin")
# Calls served at once; a stream (Watch, ListJobs) holds a worker while it lasts.
WORKERS = 32


class NotGenerated(RuntimeError):
    """The Python modules of proto/ are missing: `make install` generates them."""


@functools.cache
def services() -> tuple[ServiceDescriptor, ...]:
    """Every service of proto/, from the generated modules (peloton.api.*), sorted by name: read
    once (building the server and checking its catalogue both ask)."""
    try:
        import peloton.api as generated
    except ImportError:
        raise NotGenerated("the gRPC API's modules are not generated: run `make install` (it generates "
                           "peloton/api from proto/)") from None
    found: dict[str, ServiceDescriptor] = {}
    for root in generated.__path__:  # a namespace package: its folders hold no __init__.py to walk
        for path in sorted(Path(root).rglob("*_pb2.py")):
            parts = path.relative_to(root).with_suffix("").parts
            module = importlib.import_module(".".join(("peloton", "api", *parts)))
            found.update((s.full_name, s) for s in module.DESCRIPTOR.services_by_name.values())
    if not found:
        raise NotGenerated("no gRPC service found in peloton.api: run `make install`")
    return tuple(found[name] for name in sorted(found))


def method_name(method: MethodDescriptor) -> str:
    return f"{method.containing_service.full_name}/{method.name}"


def unaccounted() -> list[str]:
    """Methods neither served nor given a reason (the server refuses to start with any)."""
    for name in SERVICERS:
        importlib.import_module(f"pelotonctl.api.rpc.{name}")
    return [method_name(m) for s in services() for m in s.methods
            if method_name(m) not in catalog.SERVED and catalog.not_served_reason(method_name(m)) is None]


def build(door: Door, settings: Settings, host: str, port: int) -> tuple[grpc.Server, int]:
    """The server with every service added, bound to host:port (0: a free port); not started."""
    missing = unaccounted()
    if missing:
        raise RuntimeError(f"gRPC methods neither served nor refused with a reason: {', '.join(missing)}")
    server = grpc.server(ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="grpc"))
    names = []
    for service in services():
        server.add_generic_rpc_handlers((_handlers(door, service),))
        names.append(service.full_name)
    checker = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(checker, server)
    for name in ("", *names):
        checker.set(name, health_pb2.HealthCheckResponse.SERVING)
    reflection.enable_server_reflection((*names, health.SERVICE_NAME, reflection.SERVICE_NAME), server)
    address = f"{host}:{port}"
    if settings.api_tls_cert:
        key = Path(settings.api_tls_key).read_bytes()
        cert = Path(settings.api_tls_cert).read_bytes()
        bound = server.add_secure_port(address, grpc.ssl_server_credentials([(key, cert)]))
    else:
        bound = server.add_insecure_port(address)
    if not bound:
        raise OSError(f"the gRPC port {address} cannot be bound")
    return server, bound


def _handlers(door: Door, service: ServiceDescriptor) -> grpc.GenericRpcHandler:
    handlers: dict[str, grpc.RpcMethodHandler] = {}
    for method in service.methods:
        name = method_name(method)
        request = message_factory.GetMessageClass(method.input_type)
        response = message_factory.GetMessageClass(method.output_type)
        options: dict[str, Any] = {"request_deserializer": request.FromString,
                                   "response_serializer": response.SerializeToString}
        fn, streams = catalog.SERVED.get(name) or (_refuser(catalog.not_served_reason(name) or ""), False)
        if streams or method.server_streaming:
            handlers[method.name] = grpc.unary_stream_rpc_method_handler(
                calls.stream_handler(door, name, _streamed(fn, streams)), **options)
        else:
            handlers[method.name] = grpc.unary_unary_rpc_method_handler(calls.unary_handler(door, name, fn), **options)
    return grpc.method_handlers_generic_handler(service.full_name, handlers)


def _refuser(reason: str) -> Any:
    def refuse(_call: calls.Call, _request: Any) -> Any:
        raise calls.NotServed(f"not served here: {reason}")
    return refuse


def _streamed(fn: Any, streams: bool) -> Any:
    """fn as a generator: a refusal (or any unary fn) raised when the stream starts."""
    if streams:
        return fn

    def once(call: calls.Call, request: Any) -> Any:
        yield fn(call, request)
    return once
