"""Resource vectors with Peloton's arithmetic: per kind, clamped at zero, EPS-tolerant."""

from __future__ import annotations

from dataclasses import dataclass

from peloton.model.quick_init import quick_init

# Peloton treats values within EPS as equal and clamps tiny differences to zero.
EPS = 0.0009

KINDS = ("cpu", "gpu", "mem_mb", "disk_mb")


@quick_init  # every stage makes several per task
@dataclass(frozen=True, slots=True)
class Resources:
    cpu: float = 0.0
    mem_mb: float = 0.0
    disk_mb: float = 0.0
    gpu: float = 0.0

    def __add__(self, other: Resources) -> Resources:
        return Resources(
            self.cpu + other.cpu,
            self.mem_mb + other.mem_mb,
            self.disk_mb + other.disk_mb,
            self.gpu + other.gpu,
        )

    def __sub__(self, other: Resources) -> Resources:
        return Resources(
            clamped(self.cpu - other.cpu),
            clamped(self.mem_mb - other.mem_mb),
            clamped(self.disk_mb - other.disk_mb),
            clamped(self.gpu - other.gpu),
        )

    def scaled(self, factor: float) -> Resources:
        """Every kind times factor (a percentage of a reservation, say)."""
        return Resources(self.cpu * factor, self.mem_mb * factor, self.disk_mb * factor, self.gpu * factor)

    def without_cpu(self) -> Resources:
        """Every kind but cpu: what a revocable run takes of a host's room, its cpu being slack."""
        return Resources(0.0, self.mem_mb, self.disk_mb, self.gpu)

    def fits_in(self, other: Resources) -> bool:
        """True when every kind of self is <= other's, within EPS."""
        return (
            self.cpu <= other.cpu + EPS
            and self.mem_mb <= other.mem_mb + EPS
            and self.disk_mb <= other.disk_mb + EPS
            and self.gpu <= other.gpu + EPS
        )

    def to_record(self) -> dict:
        return {"cpu": self.cpu, "mem_mb": self.mem_mb, "disk_mb": self.disk_mb, "gpu": self.gpu}

    @staticmethod
    def from_record(rec: dict) -> Resources:
        return Resources(rec["cpu"], rec["mem_mb"], rec["disk_mb"], rec["gpu"])

    @staticmethod
    def of_read(rec: dict) -> Resources:
        """from_record for a record a stage read from a message, whose values are read-only: a job's
        alike tasks read from one bundle share one resources record (avrocodec's shared spans), so
        the last one asked is answered again without making another."""
        last = _LAST_READ[0]
        if rec is last[0]:
            return last[1]
        r = Resources(rec["cpu"], rec["mem_mb"], rec["disk_mb"], rec["gpu"])
        _LAST_READ[0] = (rec, r)  # one tuple, swapped whole: no thread pairs one record with another's
        return r


ZERO = Resources()
_LAST_READ: list[tuple[dict | None, Resources]] = [(None, ZERO)]  # (record, Resources.of_read of it)


def clamped(v: float) -> float:
    """A kind's value after a subtraction: below EPS it is zero (Peloton's arithmetic)."""
    return v if v >= EPS else 0.0


class ResourceSum:
    """A running total of Resources kept as four floats, made a Resources only when read: the
    stages add and take one per task run and read the total about once a batch, and the Resources
    made per change were about a tenth of entitle's CPU. The same arithmetic as Resources' + and -
    (taking clamps each kind at zero), so the totals are the same to the last bit."""

    __slots__ = ("_value", "cpu", "disk_mb", "gpu", "mem_mb")

    def __init__(self) -> None:
        self.cpu = self.mem_mb = self.disk_mb = self.gpu = 0.0
        self._value: Resources | None = ZERO

    @property
    def value(self) -> Resources:
        v = self._value
        if v is None:
            v = self._value = Resources(self.cpu, self.mem_mb, self.disk_mb, self.gpu)
        return v

    def add(self, r: Resources) -> None:
        self.cpu += r.cpu
        self.mem_mb += r.mem_mb
        self.disk_mb += r.disk_mb
        self.gpu += r.gpu
        self._value = None

    def take(self, r: Resources) -> None:
        self.cpu = clamped(self.cpu - r.cpu)
        self.mem_mb = clamped(self.mem_mb - r.mem_mb)
        self.disk_mb = clamped(self.disk_mb - r.disk_mb)
        self.gpu = clamped(self.gpu - r.gpu)
        self._value = None

    def clear(self) -> None:
        self.cpu = self.mem_mb = self.disk_mb = self.gpu = 0.0
        self._value = ZERO

    def fits_with(self, r: Resources, capacity: Resources) -> bool:
        """(value + r).fits_in(capacity), without making either."""
        return (self.cpu + r.cpu <= capacity.cpu + EPS and self.mem_mb + r.mem_mb <= capacity.mem_mb + EPS
                and self.disk_mb + r.disk_mb <= capacity.disk_mb + EPS and self.gpu + r.gpu <= capacity.gpu + EPS)


class Allocations:
    """Resources held per key (a task run), with their running total; charging a key twice or
    releasing one never held changes nothing, so replayed events are harmless."""

    __slots__ = ("by_key", "sum")

    def __init__(self) -> None:
        self.by_key: dict[str, Resources] = {}
        self.sum = ResourceSum()

    @property
    def total(self) -> Resources:
        return self.sum.value

    def charge(self, key: str, r: Resources) -> None:
        if key not in self.by_key:
            self.by_key[key] = r
            self.sum.add(r)

    def release(self, key: str) -> bool:
        r = self.by_key.pop(key, None)
        if r is None:
            return False
        self.sum.take(r)
        return True

    def __contains__(self, key: str) -> bool:
        return key in self.by_key

    def __len__(self) -> int:
        return len(self.by_key)
