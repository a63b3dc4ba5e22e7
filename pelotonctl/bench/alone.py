"""A stage fed by hand, for the stage-alone benchmarks (job_manager.py, entitle_stage.py): the
records it reads as the runtime hands them over (decoded from the bundles a stage sends, outside
the clock), an emitter that bundles and encodes what it sends, as the runtime's does, then drops
it, a store with one pool large enough that nothing waits, and its CPU counted step by step. No
Kafka."""

from __future__ import annotations

import time
from pathlib import Path

from peloton.model.pool import parse_pool_config
from peloton.runtime import Emitter, Record, decode_message
from peloton.serde import registry
from peloton.store import open_store
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


def launch_spec(job_id: str, instance: int) -> dict:
    """The TaskLaunchSpec of a small task's first run, as admit makes it (a one-task gang's)."""
    return {"task_id": f"{job_id}-{instance}-1", "job_id": job_id, "instance": instance, "run_id": 1,
            "resources": {"cpu": 0.01, "mem_mb": 16.0, "disk_mb": 0.0, "gpu": 0.0}, "dynamic_ports": 0,
            "ports": [], "command": "true", "shell": True, "arguments": [], "environment": {}, "labels": {},
            "constraint_json": None, "kill_grace_seconds": 30.0, "controller": False, "image": "", "user": "",
            "health_check_json": None, "prefer_host": ""}


# A pool no bench's demand reaches the limit of: every gang is admitted at once, nothing waits.
POOL = """
resources:
- {kind: cpu, reservation: 1000000, limit: 1000000, share: 1}
- {kind: memory, reservation: 1000000000, limit: 1000000000, share: 1}
- {kind: disk, reservation: 1000000000, limit: 1000000000, share: 1}
"""


def pooled_store(home: Path):
    """A SQLite store in `home` holding the one pool /p (POOL)."""
    store = open_store(home / "peloton.db")
    store.put_pool("/p", parse_pool_config(POOL, "/p"))
    return store


def batches(count: int, size: int) -> list[range]:
    """0..count in ranges of `size`: the runs of a job a turn holds."""
    return [range(k, min(k + size, count)) for k in range(0, count, size)]


class CpuByStep:
    """The stage's CPU seconds per step: each timed piece of work, and the sending of what it
    emitted, counted to its step."""

    def __init__(self, emitter: Dropped):
        self.emitter = emitter
        self.seconds: dict[str, float] = {}

    def timed(self, step: str, work) -> None:
        start = time.process_time()
        work()
        self.emitter.send()
        self.seconds[step] = self.seconds.get(step, 0.0) + time.process_time() - start

    def per_task(self, tasks: int) -> dict:
        """cpu_us_per_task (each step) and cpu_us_per_task_total, over `tasks` tasks."""
        return {"cpu_us_per_task": {step: round(s / tasks * 1e6, 1) for step, s in self.seconds.items()},
                "cpu_us_per_task_total": round(sum(self.seconds.values()) / tasks * 1e6, 1)}
