"""Settings for every process, from the environment (PELOTON_*) with dev-friendly defaults.

Every period and timeout lives here so tests can shorten them instead of sleeping long.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

# The repository root holds topics.yaml and schemas/avro; an installed copy finds them the same way
# because the package is installed in editable mode from the checkout.
REPO_ROOT = Path(__file__).resolve().parent.parent


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    return float(raw) if raw not in (None, "") else default


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    return int(raw) if raw not in (None, "") else default


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
    host_state_period_s: float = 1.0

    @classmethod
    def from_env(cls, **overrides) -> Settings:
        home = home_dir()
        bootstrap = os.environ.get("PELOTON_KAFKA_BOOTSTRAP") or _dev_stack_bootstrap(home) or cls.bootstrap
        s = cls(
            bootstrap=bootstrap,
            topic_prefix=os.environ.get("PELOTON_TOPIC_PREFIX", ""),
            store_path=Path(os.environ.get("PELOTON_STORE") or home / "peloton.db"),
            home=home,
            hosts=os.environ.get("PELOTON_HOSTS") or cls.hosts,
            sim_task_seconds=_env_float("PELOTON_SIM_TASK_SECONDS", cls.sim_task_seconds),
            session_timeout_ms=_env_int("PELOTON_SESSION_TIMEOUT_MS", cls.session_timeout_ms),
            poll_timeout_s=_env_float("PELOTON_POLL_TIMEOUT_S", cls.poll_timeout_s),
            max_batch=_env_int("PELOTON_MAX_BATCH", cls.max_batch),
            admission_tick_s=_env_float("PELOTON_ADMISSION_TICK_S", cls.admission_tick_s),
            placement_backoff_s=_env_float("PELOTON_PLACEMENT_BACKOFF_S", cls.placement_backoff_s),
            placement_pending_ttl_s=_env_float("PELOTON_PLACEMENT_PENDING_TTL_S", cls.placement_pending_ttl_s),
            host_state_period_s=_env_float("PELOTON_HOST_STATE_PERIOD_S", cls.host_state_period_s),
        )
        return replace(s, **overrides) if overrides else s

    def env(self) -> dict[str, str]:
        """These settings as PELOTON_* variables, for starting child processes."""
        return {
            "PELOTON_KAFKA_BOOTSTRAP": self.bootstrap,
            "PELOTON_TOPIC_PREFIX": self.topic_prefix,
            "PELOTON_STORE": str(self.store_path),
            "PELOTON_HOME": str(self.home),
            "PELOTON_HOSTS": self.hosts,
            "PELOTON_SIM_TASK_SECONDS": str(self.sim_task_seconds),
            "PELOTON_SESSION_TIMEOUT_MS": str(self.session_timeout_ms),
            "PELOTON_POLL_TIMEOUT_S": str(self.poll_timeout_s),
            "PELOTON_MAX_BATCH": str(self.max_batch),
            "PELOTON_ADMISSION_TICK_S": str(self.admission_tick_s),
            "PELOTON_PLACEMENT_BACKOFF_S": str(self.placement_backoff_s),
            "PELOTON_PLACEMENT_PENDING_TTL_S": str(self.placement_pending_ttl_s),
            "PELOTON_HOST_STATE_PERIOD_S": str(self.host_state_period_s),
        }


def _dev_stack_bootstrap(home: Path) -> str | None:
    """A running dev stack records its broker address; the CLI finds it without flags."""
    state = home / "dev" / "stack.json"
    try:
        return json.loads(state.read_text())["bootstrap"]
    except (OSError, ValueError, KeyError):
        return None
