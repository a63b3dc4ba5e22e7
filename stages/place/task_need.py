"""What one task asks of a host, decoded once from its launch spec: resources, constraint, labels,
job and ports. Pure: no Kafka. A spec no host could honour is refused here, as it is decoded."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TypeGuard

from peloton.model.constraint import Constraint, constraint_from_json
from peloton.model.resources import Resources

MAX_PORT = 65535


class LaunchSpecError(ValueError):
    """A launch spec's ports that no host could honour (negative counts, ports out of range,
    one static port twice): refused as the spec is decoded, not while placing."""



# The last launch spec's asks and the TaskNeed made of them (see from_spec): one tuple, swapped whole.
_LAST: list = [None]


@dataclass(slots=True)
class TaskNeed:
    """What one task asks of a host, decoded once from its launch spec."""

    task_id: str
    resources: Resources
    constraint: Constraint | None = None
    labels: dict[str, str] = field(default_factory=dict)
    job_id: str = ""
    dynamic_ports: int = 0
    static_ports: tuple[int, ...] = ()
    prefer_host: str = ""  # an in-place replacement's previous host: taken first where it fits
    image: str = ""  # the container image it runs in: only hosts with a runtime take it
    revocable: bool = False  # its gang runs on slack: its cpu is the hosts' slack, not their free cpu

    @staticmethod
    def from_spec(spec: Mapping) -> TaskNeed:
        """Raises ConstraintError for a constraint_json that is not a valid constraint and
        LaunchSpecError for ports no host could give: any producer can write launch specs, and a
        bad one must fail here, as it is decoded, not in the middle of placing a gang.

        Ports: `ports` ([{name, value, env_name}], value 0 = dynamic) wins when present;
        otherwise `dynamic_ports` counts the dynamic ones."""
        # A job's alike tasks come one after another with equal (mostly the very same) values
        # (avrocodec's shared spans): what they ask is decoded for the first and shared after it.
        asks = (spec["resources"], spec.get("constraint_json"), spec.get("labels"), spec.get("ports"),
                spec.get("dynamic_ports", 0), spec.get("image"))
        last = _LAST[0]
        if last is not None and last[0] == asks:
            like = last[1]
        else:
            c = asks[1]
            dynamic, static = _ports_of(spec)
            like = TaskNeed("", Resources.from_record(asks[0]), constraint_from_json(c) if c else None,
                            dict(asks[2] or {}), "", dynamic, static, "", asks[5] or "")
            _LAST[0] = (asks, like)
        return TaskNeed(spec["task_id"], like.resources, like.constraint, like.labels, spec.get("job_id") or "",
                        like.dynamic_ports, like.static_ports, spec.get("prefer_host") or "", like.image)

    def same_needs(self, other: TaskNeed) -> bool:
        """Whether a host that takes one takes the other alike (all but the task id equal)."""
        return (self.resources == other.resources and self.constraint == other.constraint
                and self.labels == other.labels and self.job_id == other.job_id
                and self.dynamic_ports == other.dynamic_ports and self.static_ports == other.static_ports
                and self.image == other.image and self.revocable == other.revocable
                and not self.prefer_host and not other.prefer_host)


def port_names(spec: Mapping, ports: tuple[int, ...]) -> dict[str, int]:
    """Name -> port for the ports placement picked, in the order _ports_of reads them
    and pick_ports gives them: static first, in the order the spec names them, then dynamic."""
    if not ports:
        return {}
    named = spec.get("ports") or []
    order = [p["name"] for p in named if p["value"]] + [p["name"] for p in named if not p["value"]]
    order += [f"dynamic-{i}" for i in range(len(ports) - len(order))]
    return dict(zip(order, ports, strict=True))


def _ports_of(spec: Mapping) -> tuple[int, tuple[int, ...]]:
    ports = spec.get("ports")
    if not ports:  # none named (or a spec from before they were): dynamic_ports counts them
        dynamic = spec.get("dynamic_ports", 0) or 0
        if not _is_int(dynamic) or not 0 <= dynamic <= MAX_PORT:
            raise LaunchSpecError(f"dynamic_ports: expected 0 to {MAX_PORT}, got {dynamic!r}")
        return dynamic, ()
    if not isinstance(ports, list):
        raise LaunchSpecError(f"ports: expected a list, got {type(ports).__name__}")
    dynamic = 0
    static: list[int] = []
    for i, port in enumerate(ports):
        value = port.get("value", 0) if isinstance(port, Mapping) else None
        if not _is_int(value) or not 0 <= value <= MAX_PORT:
            raise LaunchSpecError(f"ports[{i}].value: expected 0 (dynamic) to {MAX_PORT}, got {value!r}")
        if value == 0:
            dynamic += 1
        elif value in static:
            raise LaunchSpecError(f"ports[{i}].value: port {value} is asked for twice")
        else:
            static.append(value)
    return dynamic, tuple(static)


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)
