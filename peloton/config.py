"""Settings for every process, from the environment (PELOTON_*) with dev-friendly defaults.

Every period and timeout lives here so tests can shorten them instead of sleeping long.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, fields
from pathlib import Path

# The repository root holds topics.yaml and schemas/avro; an installed copy finds them the same way
# because the package is installed in editable mode from the checkout.
REPO_ROOT = Path(__file__).resolve().parent.parent


def home_dir() -> Path:
    return Path(os.environ.get("PELOTON_HOME") or (REPO_ROOT / ".peloton")).resolve()


@dataclass(frozen=True)
class Settings:
    bootstrap: str = "127.0.0.1:9092"
    topic_prefix: str = ""
    store_path: Path = field(default_factory=lambda: home_dir() / "peloton.db")
    home: Path = field(default_factory=home_dir)
    # Host inventory of the launch stage, e.g. "local:2:cpu=4,mem_mb=8192;sim:100:cpu=32".
    hosts: str = "local:2:cpu=8,mem_mb=16384,disk_mb=100000"
    sim_task_seconds: float = 1.0
    # Consumer group timing: Tansu joins a classic group in ~3 s with a 6 s session timeout.
    session_timeout_ms: int = 6000
    poll_timeout_s: float = 0.05
    max_batch: int = 1000
    # Entitle's admission tick, place's retry backoff for gangs that found no host.
    admission_tick_s: float = 0.1
    placement_backoff_s: float = 0.5
    # How long place counts its own placements on a host before host state must show them.
    placement_pending_ttl_s: float = 3.0

    @classmethod
    def from_env(cls, **overrides) -> Settings:
        home = home_dir()
        values: dict = {"home": home, "store_path": home / "peloton.db",
                        "bootstrap": _dev_stack_bootstrap(home) or cls.bootstrap}
        for f in fields(cls):
            raw = os.environ.get(_env_name(f.name))
            if raw not in (None, "") or (f.name == "topic_prefix" and raw is not None):
                values[f.name] = _parse(f.type, raw)
        values.update(overrides)
        return cls(**values)

    def env(self) -> dict[str, str]:
        """These settings as PELOTON_* variables, for starting child processes."""
        return {_env_name(f.name): str(getattr(self, f.name)) for f in fields(self)}


# Field -> variable: PELOTON_<FIELD>, but for the two whose names predate this table.
_ENV_NAMES = {"bootstrap": "PELOTON_KAFKA_BOOTSTRAP", "store_path": "PELOTON_STORE"}


def _env_name(field_name: str) -> str:
    return _ENV_NAMES.get(field_name) or f"PELOTON_{field_name.upper()}"


def _parse(type_name: str, raw: str):
    return {"int": int, "float": float, "Path": Path}.get(type_name, str)(raw)


def _dev_stack_bootstrap(home: Path) -> str | None:
    """A running dev stack records its broker address; the CLI finds it without flags."""
    state = home / "dev" / "stack.json"
    try:
        return json.loads(state.read_text())["bootstrap"]
    except (OSError, ValueError, KeyError):
        return None
