"""A task's health check, as Peloton defines it (v0 `healthCheck`, the stateless spec's
`livenessCheck`): read and checked at submission, carried to the agent in the launch spec as
JSON, and run there (peloton/host/health.py).

A check is a COMMAND (exit 0 is healthy) or an HTTP GET (a status from 200 to 399 is healthy).
The first runs `initialIntervalSecs` after the run starts, the next ones `intervalSecs` apart;
one that takes longer than `timeoutSecs` failed; `maxConsecutiveFailures` failures in a row make
the run UNHEALTHY, and the agent kills it (a SERVICE task then runs again, with its backoff).

A task's health state is Peloton's: DISABLED (no check, or not enabled), HEALTH_UNKNOWN (running,
no check answered yet), HEALTHY, UNHEALTHY."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

DISABLED = "DISABLED"
HEALTH_UNKNOWN = "HEALTH_UNKNOWN"
HEALTHY = "HEALTHY"
UNHEALTHY = "UNHEALTHY"

# Peloton's defaults (HealthCheckConfig): the first check 15 s after the start, then every 10 s,
# 3 failures in a row, 20 s for each.
DEFAULT_INITIAL_INTERVAL_S = 15
DEFAULT_INTERVAL_S = 10
DEFAULT_MAX_CONSECUTIVE_FAILURES = 3
DEFAULT_TIMEOUT_S = 20
MAX_SECONDS = 24 * 3600


def serving(state: str, health: str) -> bool:
    """A run that counts as up: RUNNING, and HEALTHY where it has a health check (a run whose check
    has not answered yet, or failed, is down for an update's batch and a disruption budget)."""
    return state == "RUNNING" and health not in (HEALTH_UNKNOWN, UNHEALTHY)


COMMAND, HTTP = "COMMAND", "HTTP"
# Peloton's words and proto enum numbers, as its YAML files may write them: v0 HealthCheckConfig's
# COMMAND (1) and HTTP (2), v1alpha HealthCheckSpec's HEALTH_CHECK_TYPE_COMMAND and _HTTP.
_TYPES = {"COMMAND": COMMAND, "HTTP": HTTP, "1": COMMAND, "2": HTTP,
          "HEALTH_CHECK_TYPE_COMMAND": COMMAND, "HEALTH_CHECK_TYPE_HTTP": HTTP}


@dataclass(frozen=True, slots=True)
class HealthCheck:
    type: str  # COMMAND or HTTP
    command: str = ""  # COMMAND: run with /bin/sh -c, in the task's sandbox and environment
    http_scheme: str = "http"
    http_port: int = 0
    http_path: str = "/"
    initial_interval_s: float = DEFAULT_INITIAL_INTERVAL_S
    interval_s: float = DEFAULT_INTERVAL_S
    max_consecutive_failures: int = DEFAULT_MAX_CONSECUTIVE_FAILURES
    timeout_s: float = DEFAULT_TIMEOUT_S

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | None) -> HealthCheck | None:
        """The check a launch spec carries (None: none). Unknown keys are dropped, so a newer
        job manager's field never stops an older agent."""
        if not text:
            return None
        raw = json.loads(text)
        known = {k: v for k, v in raw.items() if k in cls.__dataclass_fields__}
        return cls(**known)


def parse_health_check(raw: dict | None, path: str = "healthcheck") -> tuple[HealthCheck | None, list[tuple[str, str]]]:
    """(the check to run, problems as (field path, message)) of a health check block as written
    (keys lowercased). A block without `enabled: true` is no check (Peloton runs only enabled
    ones), and is not checked further."""
    if not raw or raw.get("enabled") is not True:
        return None, []
    problems: list[tuple[str, str]] = []

    def number(key: str, default: float, integer: bool = False) -> float:
        value = raw.get(key)
        if value is None or value == 0:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and not isinstance(value, int)):
            problems.append((f"{path}.{key}", f"expected a {'whole ' if integer else ''}number of "
                                              f"{'failures' if integer else 'seconds'}, got {value!r}"))
            return default
        if value < 0 or value > MAX_SECONDS:
            problems.append((f"{path}.{key}", f"{value} is out of range (0 to {MAX_SECONDS})"))
            return default
        return value

    kind = _TYPES.get(str(raw.get("type", "")).upper())
    if kind is None:
        problems.append((f"{path}.type", f"{raw.get('type')!r} is not a health check type (COMMAND or HTTP)"))
        return None, problems
    timing: dict[str, Any] = dict(
        initial_interval_s=number("initialintervalsecs", DEFAULT_INITIAL_INTERVAL_S),
        interval_s=number("intervalsecs", DEFAULT_INTERVAL_S),
        max_consecutive_failures=int(number("maxconsecutivefailures", DEFAULT_MAX_CONSECUTIVE_FAILURES, integer=True)),
        timeout_s=number("timeoutsecs", DEFAULT_TIMEOUT_S),
    )
    if kind == COMMAND:
        block = raw.get("commandcheck")
        command = block.get("command") if isinstance(block, dict) else None
        if not isinstance(command, str) or not command.strip():
            problems.append((f"{path}.commandcheck.command", "a COMMAND health check needs a command"))
            return None, problems
        return (HealthCheck(COMMAND, command=command, **timing) if not problems else None), problems
    block = raw.get("httpcheck")
    if not isinstance(block, dict):
        problems.append((f"{path}.httpcheck", "an HTTP health check needs httpcheck with a port"))
        return None, problems
    port, scheme, where = block.get("port"), str(block.get("scheme") or "http").lower(), block.get("path") or "/"
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        problems.append((f"{path}.httpcheck.port", f"expected a port from 1 to 65535, got {port!r}"))
    if scheme not in ("http", "https"):
        problems.append((f"{path}.httpcheck.scheme", f"{scheme!r} is not http or https"))
    if not isinstance(where, str) or not where.startswith("/"):
        problems.append((f"{path}.httpcheck.path", f"expected a path starting with /, got {where!r}"))
    if problems or not isinstance(port, int):  # a port that is no int is among the problems
        return None, problems
    return HealthCheck(HTTP, http_scheme=scheme, http_port=port, http_path=where, **timing), problems
