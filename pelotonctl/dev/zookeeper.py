"""A throwaway ZooKeeper, for the tests and `dev up --store postgres`: Debian's `zookeeper`
package, started in the foreground on a free 127.0.0.1 port with its own data directory and log.

    proc, address = start_zookeeper(tmp_path / "zk")   # address is "127.0.0.1:PORT"
    ...
    stop_zookeeper(proc)

A start takes about 0.6 s here (a small JVM: -Xmx128m, serial GC, no JMX).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from peloton.private import private_dir
from pelotonctl.dev.processes import free_port, tail

ZK_SERVER = Path("/usr/share/zookeeper/bin/zkServer.sh")
# zkEnv.sh fixes the class path to zookeeper.jar, whose manifest names no SLF4J binding, so the
# server would log nothing; a later -cp in JVMFLAGS wins and adds the simple binding when present.
ZK_CLASSPATH = ["/etc/zookeeper/conf", "/usr/share/java/zookeeper.jar"]
SLF4J_SIMPLE = Path("/usr/share/java/slf4j-simple.jar")
INSTALL_COMMAND = "apt-get install -y zookeeper"


class ZooKeeperError(RuntimeError):
    """ZooKeeper is not installed, or did not start; the message says what to do."""


def four_letter_word(address: str, word: str = "ruok", timeout: float = 0.5) -> str:
    """Send a four-letter command ("ruok", "stat", "mntr") and return the answer ('' if none)."""
    host, port = address.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=timeout) as s:
            s.sendall(word.encode())
            chunks = []
            while chunk := s.recv(4096):
                chunks.append(chunk)
            return b"".join(chunks).decode(errors="replace")
    except OSError:
        return ""


def start_zookeeper(dir: Path, port: int | None = None, timeout: float = 60.0) -> tuple[subprocess.Popen, str]:
    """Start ZooKeeper with its data in `dir`/data and its log in `dir`/zookeeper.log; return the
    process and "127.0.0.1:PORT" once it answers `ruok`. Given the `port` and `dir` of a server
    that was stopped, this starts it again with what it had (pass a new `dir` for a fresh one)."""
    if not ZK_SERVER.exists():
        raise ZooKeeperError(f"ZooKeeper is not installed ({ZK_SERVER} is missing); install Debian's package "
                             f"with `{INSTALL_COMMAND}` (after `apt-get update`), which `make test` runs when it can")
    if shutil.which("java") is None:
        raise ZooKeeperError(f"ZooKeeper needs Java and `java` is not on PATH; `{INSTALL_COMMAND}` installs "
                             "the default JRE with it")
    dir = Path(dir).resolve()
    private_dir(dir / "data")
    private_dir(dir)
    attempts = 1 if port else 3  # a free port can be taken by someone else before ZooKeeper binds it
    for attempt in range(attempts):
        chosen = port or free_port()
        try:
            return _start(dir, chosen, timeout)
        except ZooKeeperError as exc:
            if attempt + 1 == attempts or "Address already in use" not in str(exc):
                raise
    raise AssertionError("unreachable")


def _start(dir: Path, port: int, timeout: float) -> tuple[subprocess.Popen, str]:
    cfg = dir / "zoo.cfg"
    cfg.write_text("\n".join([
        "tickTime=2000",
        f"dataDir={dir / 'data'}",
        f"clientPort={port}",
        "clientPortAddress=127.0.0.1",
        "admin.enableServer=false",
        # What the stack asks (is it serving); `envi`, `dump` and `cons` would tell anyone on the
        # machine the server's environment, sessions and clients.
        "4lw.commands.whitelist=srvr,ruok,mntr",
        "maxClientCnxns=0",
        "",
    ]))
    classpath = ZK_CLASSPATH + ([str(SLF4J_SIMPLE)] if SLF4J_SIMPLE.exists() else [])
    env = {
        **os.environ,
        "JVMFLAGS": " ".join([
            "-Xmx128m", "-Xss512k", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            # zkEnv.sh sets ZOO_LOG_DIR itself; these later -D flags win over its.
            f"-Dzookeeper.log.dir={dir}", "-Dzookeeper.log.file=zookeeper.log",
            "-Dorg.slf4j.simpleLogger.showDateTime=true", "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
            "-cp", ":".join(classpath),
        ]),
        "ZOO_LOG_DIR": str(dir),
        "JMXDISABLE": "true",
    }
    log_path = dir / "zookeeper.log"
    address = f"127.0.0.1:{port}"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen([str(ZK_SERVER), "start-foreground", str(cfg)], env=env, cwd=str(dir),
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        # `ruok` answers before the server serves; `srvr` names its mode once it does.
        if "Mode: " in four_letter_word(address, "srvr"):
            return proc, address
        if proc.poll() is not None:
            raise ZooKeeperError(f"ZooKeeper exited with code {proc.returncode} before answering on {address}; "
                                 f"{log_path} ends with:\n{tail(log_path, 15)}")
        time.sleep(0.05)
    stop_zookeeper(proc)
    raise ZooKeeperError(f"ZooKeeper did not answer on {address} within {timeout:.0f}s; see {log_path}:\n"
                         f"{tail(log_path, 15)}")


def stop_zookeeper(proc: subprocess.Popen, timeout: float = 10.0) -> None:
    """Stop a ZooKeeper from start_zookeeper (SIGTERM to its process group, SIGKILL after
    `timeout`). Stopping one that already exited does nothing."""
    if proc.poll() is not None:
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout)
            break
        except subprocess.TimeoutExpired:
            continue
    proc.wait(timeout)
