"""What the gRPC port serves: every method of every service in proto/ is either served (a function
registered here by `served`) or answers UNIMPLEMENTED with the reason NOT_SERVED gives. The
server refuses to start with a method that is neither, and the docs' table is made from both."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

# "package.Service/Method" -> (the function, whether it streams its answers)
SERVED: dict[str, tuple[Callable[..., Any], bool]] = {}
# What a served method does here, where its function's docstring does not say (one made by a factory).
WHAT: dict[str, str] = {}

MESOS = "Mesos-only: there is no Mesos master here"
_CACHE = "the job manager here keeps no cache apart from the store: Get reads what the store has"
_V0_SVC = ("Peloton's v0 {svc} was never served by its job manager (its clients call {old}); "
           "call {old} here too")

# Why a method is not served, by "package.Service/Method", or by "package.Service" for all of its.
NOT_SERVED: dict[str, str] = {
    "peloton.api.v0.job.svc.JobService": _V0_SVC.format(svc="JobService", old="peloton.api.v0.job.JobManager"),
    "peloton.api.v0.task.svc.TaskService": _V0_SVC.format(svc="TaskService", old="peloton.api.v0.task.TaskManager"),
    "peloton.api.v0.respool.ResourcePoolService": _V0_SVC.format(
        svc="ResourcePoolService", old="peloton.api.v0.respool.ResourceManager"),
    "peloton.api.v0.job.JobManager/Refresh": "there is no job cache to load again from the store: " + _CACHE,
    "peloton.api.v0.job.JobManager/GetCache": _CACHE,
    "peloton.api.v0.task.TaskManager/Refresh": "there is no task cache to load again from the store: " + _CACHE,
    "peloton.api.v0.task.TaskManager/GetCache": _CACHE,
    "peloton.api.v0.update.svc.UpdateService/GetUpdateCache": _CACHE,
    "peloton.api.v1alpha.job.stateless.svc.JobService/RefreshJob": "there is no job cache to load again: " + _CACHE,
    "peloton.api.v1alpha.job.stateless.svc.JobService/GetJobCache": _CACHE,
    "peloton.api.v1alpha.pod.svc.PodService/RefreshPod": "there is no pod cache to load again: " + _CACHE,
    "peloton.api.v1alpha.pod.svc.PodService/GetPodCache": _CACHE,
}


def served(name: str, streams: bool = False, what: str = "") -> Callable[[F], F]:
    """Registers fn(call, request) as the method `name` ("package.Service/Method"); with streams,
    fn yields the responses of a server stream. `what` says what it does here where fn's
    docstring does not."""
    def mark(fn: F) -> F:
        if name in SERVED:
            raise ValueError(f"{name} is served twice")
        SERVED[name] = (fn, streams)
        if what:
            WHAT[name] = what
        return fn
    return mark


def described(name: str) -> str:
    """What the served method does here: its `what`, or its docstring's first paragraph."""
    import inspect

    fn = SERVED[name][0]
    return WHAT.get(name) or (inspect.getdoc(fn) or "").split("\n\n")[0]


def not_served(name: str, reason: str) -> None:
    """Says why the method (or every method of the service) `name` is not served; kept beside the
    methods of its service that are."""
    NOT_SERVED[name] = reason


def not_served_reason(name: str) -> str | None:
    service = name.split("/", 1)[0]
    return NOT_SERVED.get(name) or NOT_SERVED.get(service)

