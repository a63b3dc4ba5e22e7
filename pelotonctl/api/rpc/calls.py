"""One gRPC call as the API's routes see a request: who sends it (the bearer token in the call's
metadata, as the HTTP Authorization header carries it), the Door, and the exceptions the routes
raise turned into gRPC status codes. Peloton's YARPC metadata (rpc-caller, rpc-service,
rpc-encoding) is accepted and ignored."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import grpc
from confluent_kafka import KafkaException
from fastapi.security import HTTPAuthorizationCredentials

from peloton.runtime import BrokerUnavailable, DeliveryError
from peloton.store import store_unavailable
from pelotonctl import admin
from pelotonctl.api import logs
from pelotonctl.api.door import Door
from pelotonctl.api.identity import Unauthenticated
from pelotonctl.api.refusals import Refused
from pelotonctl.api.storeguard import ANSWER, Answer

log = logging.getLogger("peloton.api.grpc")

# The HTTP answers the routes raise (Refused.status), as gRPC codes.
CODES = {400: grpc.StatusCode.INVALID_ARGUMENT, 401: grpc.StatusCode.UNAUTHENTICATED,
         403: grpc.StatusCode.PERMISSION_DENIED, 404: grpc.StatusCode.NOT_FOUND,
         409: grpc.StatusCode.ALREADY_EXISTS, 412: grpc.StatusCode.FAILED_PRECONDITION,
         423: grpc.StatusCode.FAILED_PRECONDITION, 503: grpc.StatusCode.UNAVAILABLE}


class Failed(Exception):
    """A gRPC status with its detail, raised by a method: ABORTED for a stale entity version,
    ALREADY_EXISTS, OUT_OF_RANGE and the like."""

    def __init__(self, code: grpc.StatusCode, detail: str) -> None:
        super().__init__(detail)
        self.code, self.detail = code, detail


class NotServed(Failed):
    """UNIMPLEMENTED, with why the method has no meaning here."""

    def __init__(self, detail: str) -> None:
        super().__init__(grpc.StatusCode.UNIMPLEMENTED, detail)


@dataclass
class Call:
    """What a method gets besides its request: the Door, the caller's credentials as a route takes
    them, and the gRPC context (for deadlines and cancellation of streams)."""

    door: Door
    creds: HTTPAuthorizationCredentials | None
    context: grpc.ServicerContext
    method: str

    @property
    def store(self) -> Any:
        return self.door.store

    @property
    def settings(self) -> Any:
        return self.door.settings

    def active(self) -> bool:
        return self.context.is_active()


def credentials(metadata: Any) -> HTTPAuthorizationCredentials | None:
    """The call's `authorization` metadata as the HTTP API reads its header ("Bearer <token>");
    a value without a scheme still reaches the check, which refuses it with the reason."""
    header = next((value for key, value in metadata or () if key == "authorization"), None)
    if not header:
        return None
    scheme, _, token = str(header).partition(" ")
    return HTTPAuthorizationCredentials(scheme=scheme, credentials=token.strip())


def status_of(exc: BaseException, settings: Any) -> tuple[grpc.StatusCode, str]:
    """The gRPC status an exception answers with: the same outcomes as the HTTP API's
    (app._answer_errors), in gRPC's words."""
    if isinstance(exc, Failed):
        return exc.code, exc.detail
    if isinstance(exc, Unauthenticated):
        return grpc.StatusCode.UNAUTHENTICATED, str(exc)
    if isinstance(exc, Refused):
        return CODES.get(exc.status, grpc.StatusCode.FAILED_PRECONDITION), exc.reason
    if isinstance(exc, admin.AlreadyExists):
        return grpc.StatusCode.ALREADY_EXISTS, str(exc)
    if isinstance(exc, admin.NotFound | logs.NoLogs):
        return grpc.StatusCode.NOT_FOUND, str(exc)
    if isinstance(exc, admin.UserError):
        return grpc.StatusCode.INVALID_ARGUMENT, str(exc)
    if isinstance(exc, KafkaException | DeliveryError | BrokerUnavailable):
        return grpc.StatusCode.UNAVAILABLE, f"the broker at {settings.bootstrap} is unavailable: {exc}"
    if isinstance(exc, logs.LogsUnavailable):
        return grpc.StatusCode.UNAVAILABLE, str(exc)
    if isinstance(exc, store_unavailable(every_backend=True)):
        return grpc.StatusCode.UNAVAILABLE, f"the store is unavailable: {exc}"
    log.exception("unexpected error in a gRPC call", exc_info=exc)
    return grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {exc}"


Unary = Callable[[Call, Any], Any]
Streaming = Callable[[Call, Any], Iterator[Any]]


def unary_handler(door: Door, name: str, fn: Unary) -> Callable[[Any, grpc.ServicerContext], Any]:
    """fn as a gRPC unary handler: the call made, every exception answered with its status."""
    def handle(request: Any, context: grpc.ServicerContext) -> Any:
        call = _call(door, name, context)
        try:
            return fn(call, request)
        except Exception as exc:  # every outcome becomes a status; none reaches grpc unanswered
            code, detail = status_of(exc, door.settings)
            context.abort(code, detail)
    return handle


def stream_handler(door: Door, name: str, fn: Streaming) -> Callable[[Any, grpc.ServicerContext], Iterator[Any]]:
    """fn (a generator of responses) as a gRPC server-streaming handler."""
    def handle(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        call = _call(door, name, context)
        try:
            yield from fn(call, request)
        except Exception as exc:
            code, detail = status_of(exc, door.settings)
            context.abort(code, detail)
    return handle


def _call(door: Door, name: str, context: grpc.ServicerContext) -> Call:
    # Store calls name the method in a StoreAway line, as a route names its endpoint.
    ANSWER.set(Answer(name.rsplit("/", 1)[-1]))
    return Call(door, credentials(context.invocation_metadata()), context, name)
