"""A stage fed by hand, for the stage-alone benchmarks (job_manager.py, entitle_stage.py): the
records it reads as the runtime hands them over (decoded from the bundles a stage sends, outside
the clock), and an emitter that bundles and encodes what it sends, as the runtime's does, then
drops it. No Kafka."""

from __future__ import annotations

from peloton.runtime import Emitter, Record, decode_message
from peloton.serde import registry
from peloton.topics import Catalogue


class Dropped(Emitter):
    """Bundles and encodes what the stage emits, as the runtime's emitter does, then drops it."""

    def send(self) -> None:
        self.produced += len(self._messages())


def dropped(catalogue: Catalogue, stage: str) -> Dropped:
    emitter = Dropped(None, catalogue, registry(), stage)
    emitter.holding = True  # as in a stage's turn: what is emitted leaves in bundles at send()
    return emitter


def records(catalogue: Catalogue, topic: str, key: str, schema: str, values: list[dict]) -> list[Record]:
    """The records a reader gets from the messages a stage sends these values in."""
    emitter = dropped(catalogue, "bench")
    for v in values:
        emitter.emit(topic, key, schema, v)
    spec = catalogue[topic]
    return [r for _, _, raw, _ in emitter._messages()
            for r in decode_message(registry(), spec, 0, 0, key.encode(), raw)]


def host_state(host_id: str, cpu: float = 64.0) -> dict:
    """A HostState record of an idle simulated host."""
    return {"host_id": host_id, "shard": 0, "driver": "sim", "state": "UP",
            "capacity": {"cpu": cpu, "mem_mb": 262144.0, "disk_mb": 1000000.0, "gpu": 0.0},
            "allocated": {"cpu": 0.0, "mem_mb": 0.0, "disk_mb": 0.0, "gpu": 0.0}, "task_count": 0,
            "labels": {}, "applied_placements": [], "updated_ms": 1, "task_labels": [], "job_tasks": {},
            "used_ports": [], "port_ranges": []}
