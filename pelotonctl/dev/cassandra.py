"""Apache Cassandra from its published jars, for the dev stack and the tests: one node on this
machine, with its data, commit log and log under a folder of its own.

    node = CassandraNode.create(home / "cassandra")   # ports chosen once, kept in node.json
    node.start()                                      # waits until it listens for CQL clients
    node.contact                                      # "127.0.0.1:PORT", the CQL address
    node.store_url("peloton")                         # cassandra://peloton:PASSWORD@127.0.0.1:PORT/peloton
    node.kill(signal.SIGKILL); node.start()            # the node keeps its data
    node.stop()

The jars come from Maven Central through jvm/cassandra/pom.xml into .jars/cassandra (`make
jars`, or on first use). How it starts is what Cassandra's bin/cassandra and its
conf/jvm17-server.options do (docs/benchmarks/history.md, "Cassandra from its jars"): CassandraDaemon on the
jars plus a conf folder (its logback.xml), the jamm agent, and on Java 17 the module exports and
opens Cassandra needs.

Clients log in (PasswordAuthenticator, CassandraAuthorizer), as an operator runs it: tasks share
the machine. At its first start the node's default superuser `cassandra` gets a password of its
own, and the store's role `peloton` (no superuser: it may make keyspaces, and holds what it made)
another; both are kept in access.json (0600) in the node's folder.
"""

from __future__ import annotations

import json
import secrets
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from peloton.private import private_dir, write_private
from pelotonctl.dev.jars import JarsUnavailable, fetch
from pelotonctl.dev.jvm import DEFAULT, check_kind, jvm_options
from pelotonctl.dev.processes import alive, end_group, free_port, tail

READY = "Starting listening for CQL clients"
HEAP_MB = 512  # the bound is 1 GB; a test node's tables are small
# conf/jvm17-server.options of Cassandra 5.0: G1 (a full JVM's, see dev/jvm.py), and the JDK
# internals Cassandra reaches into (without them it dies at start on Java 17).
COLLECTOR = ["-XX:+UseG1GC", "-XX:+ParallelRefProcEnabled", "-XX:MaxTenuringThreshold=1", "-XX:MaxGCPauseMillis=300"]
JVM_OPTIONS = [
    "-Xss256k", "-Djdk.attach.allowAttachSelf=true", "-Djava.awt.headless=true",
    "-Dio.netty.tryReflectionSetAccessible=true", "-Dio.netty.allocator.useCacheForAllThreads=true",
    "-Dio.netty.allocator.maxOrder=11",
    *[f"--add-exports={m}=ALL-UNNAMED" for m in (
        "java.base/jdk.internal.misc", "java.management.rmi/com.sun.jmx.remote.internal.rmi",
        "java.rmi/sun.rmi.registry", "java.rmi/sun.rmi.server", "java.sql/java.sql", "java.base/java.lang.ref",
        "jdk.unsupported/sun.misc", "jdk.compiler/com.sun.tools.javac.file", "jdk.attach/sun.tools.attach")],
    *[f"--add-opens={m}=ALL-UNNAMED" for m in (
        "java.base/java.lang.module", "java.base/jdk.internal.loader", "java.base/jdk.internal.ref",
        "java.base/jdk.internal.reflect", "java.base/jdk.internal.math", "java.base/jdk.internal.module",
        "java.base/jdk.internal.util.jar", "jdk.management/com.sun.management.internal", "java.base/sun.nio.ch",
        "java.base/java.io", "java.base/java.lang.reflect", "jdk.compiler/com.sun.tools.javac",
        "java.base/java.lang", "java.base/java.util")],
]
# A single machine's node: gossip need not settle, and the ring has one member.
# The default superuser is made at once, not 10 s after the start, so the node's roles can be set.
FAST_START = ["-Dcassandra.skip_wait_for_gossip_to_settle=0", "-Dcassandra.ring_delay_ms=100",
              "-Dcassandra.superuser_setup_delay_ms=0"]
STORE_ROLE = "peloton"
DEFAULT_SUPERUSER = ("cassandra", "cassandra")  # what Cassandra makes: changed at the first start
LOGBACK = """\
<configuration scan="false">
  <appender name="OUT" class="ch.qos.logback.core.ConsoleAppender">
    <encoder><pattern>%d{HH:mm:ss.SSS} %-5level [%thread] %logger{20} - %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="OUT"/></root>
  <logger name="org.apache.cassandra.utils.SigarLibrary" level="ERROR"/>
</configuration>
"""


def _accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


class CassandraError(RuntimeError):
    """Cassandra's jars are missing and cannot be fetched, or the node did not start; says why."""


def cassandra_yaml(dir: Path, native_port: int, storage_port: int) -> str:
    """What the node needs said (partitioner, snitch, commit log, seeds, addresses, folders) and
    what a small machine shared with the stages wants small (memtables, concurrency)."""
    data = dir / "data"
    return f"""\
cluster_name: peloton
num_tokens: 16
partitioner: org.apache.cassandra.dht.Murmur3Partitioner
endpoint_snitch: SimpleSnitch
# A write is acknowledged once its commit log is on disk (within a 10 ms group), so a SIGKILLed
# single node loses nothing it acknowledged; the default, periodic, would lose up to 10 s.
commitlog_sync: group
commitlog_sync_group_window: 10ms
commitlog_disk_access_mode: legacy
seed_provider:
  - class_name: org.apache.cassandra.locator.SimpleSeedProvider
    parameters:
      - seeds: "127.0.0.1:{storage_port}"
listen_address: 127.0.0.1
rpc_address: 127.0.0.1
storage_port: {storage_port}
native_transport_port: {native_port}
start_native_transport: true
data_file_directories: [{data / "data"}]
commitlog_directory: {data / "commitlog"}
saved_caches_directory: {data / "saved_caches"}
hints_directory: {data / "hints"}
cdc_raw_directory: {data / "cdc_raw"}
memtable_heap_space: 64MiB
memtable_offheap_space: 64MiB
concurrent_reads: 8
concurrent_writes: 8
concurrent_counter_writes: 4
concurrent_materialized_view_writes: 4
concurrent_compactors: 1
auto_snapshot: false
authenticator: PasswordAuthenticator
authorizer: CassandraAuthorizer
role_manager: CassandraRoleManager
# Lightweight transactions in two round trips instead of four (Cassandra 4.1's Paxos v2): a
# launch claims each task run with one.
paxos_variant: v2
"""


@dataclass
class CassandraNode:
    dir: Path
    native_port: int
    storage_port: int
    jmx_port: int
    jvm: str = DEFAULT  # or full (dev/jvm.py)
    _proc: subprocess.Popen | None = field(default=None, init=False, repr=False, compare=False)  # our child, to reap

    @property
    def contact(self) -> str:
        return f"127.0.0.1:{self.native_port}"

    @property
    def log(self) -> Path:
        return self.dir / "cassandra.log"

    @property
    def pid_file(self) -> Path:
        return self.dir / "cassandra.pid"

    def access(self) -> dict:
        """The node's roles' passwords: {"superuser": ..., "store": ...} (after its first start)."""
        return json.loads((self.dir / "access.json").read_text())

    def store_url(self, keyspace: str) -> str:
        """A store's URL on this node, as its store role."""
        return f"cassandra://{STORE_ROLE}:{self.access()['store']}@{self.contact}/{keyspace}"

    def session(self, superuser: bool = False):
        """(cluster, session) of the driver on this node, as the store's role or the superuser."""
        from cassandra.auth import PlainTextAuthProvider
        from cassandra.cluster import Cluster

        access = self.access()
        login = ("cassandra", access["superuser"]) if superuser else (STORE_ROLE, access["store"])
        cluster = Cluster(["127.0.0.1"], port=self.native_port, protocol_version=5,
                          auth_provider=PlainTextAuthProvider(*login))
        return cluster, cluster.connect()

    @classmethod
    def create(cls, dir: Path, native_port: int | None = None, jvm: str = DEFAULT) -> CassandraNode:
        """A node in `dir` (made once: a folder that has one already opens it), its JVM light or
        full (dev/jvm.py) at every start."""
        dir = Path(dir)
        if (dir / "node.json").exists():
            return cls.open(dir)
        check_kind(jvm)  # before anything is made
        private_dir(dir)
        (dir / "conf").mkdir(parents=True, exist_ok=True)
        node = cls(dir, native_port or free_port(), free_port(), free_port(), jvm)
        (dir / "cassandra.yaml").write_text(cassandra_yaml(dir, node.native_port, node.storage_port))
        (dir / "conf" / "logback.xml").write_text(LOGBACK)
        (dir / "node.json").write_text(json.dumps({"native_port": node.native_port, "storage_port": node.storage_port,
                                                   "jmx_port": node.jmx_port, "jvm": jvm}))
        return node

    @classmethod
    def open(cls, dir: Path) -> CassandraNode:
        layout = json.loads((Path(dir) / "node.json").read_text())
        return cls(Path(dir), layout["native_port"], layout["storage_port"], layout["jmx_port"],
                   layout.get("jvm", DEFAULT))

    def command(self) -> list[str]:
        if shutil.which("java") is None:
            raise CassandraError("Cassandra needs Java 17 and `java` is not on PATH")
        try:
            jars = fetch("cassandra")
        except JarsUnavailable as exc:
            raise CassandraError(str(exc)) from None
        jamm = next(jars.glob("jamm-*.jar"), None)
        if jamm is None:
            raise CassandraError(f"no jamm agent jar in {jars}: fetch the jars again (rm -r {jars}; make jars)")
        return ["java", f"-Xms{HEAP_MB}m", f"-Xmx{HEAP_MB}m", *jvm_options(self.jvm, COLLECTOR, JVM_OPTIONS),
                *FAST_START,
                "-Dcassandra-foreground=yes", f"-Dcassandra.config=file://{self.dir / 'cassandra.yaml'}",
                f"-Dcassandra.storagedir={self.dir / 'data'}", f"-Dcassandra.logdir={self.dir}",
                f"-Dcassandra.jmx.local.port={self.jmx_port}", f"-Djna.tmpdir={self.dir}",
                f"-javaagent:{jamm}", "-cp", f"{self.dir / 'conf'}:{jars}/*",
                "org.apache.cassandra.service.CassandraDaemon"]

    def pid(self) -> int | None:
        try:
            pid = int(self.pid_file.read_text())
        except (OSError, ValueError):
            return None
        return pid if alive(pid) else None

    def start(self, timeout: float = 180.0) -> None:
        """Start the node unless it runs, and wait until it listens for CQL clients (its log
        says so: polled, not slept)."""
        if self.pid() is not None:
            return
        before = self._starts()
        with open(self.log, "ab") as log:
            proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True, cwd=self.dir)
        self.pid_file.write_text(str(proc.pid))
        self._proc = proc
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            # The log says it before the port is bound: a client let in at once was refused (the
            # full suite, once). Both, then.
            if self._starts() > before and _accepts(self.native_port):
                if not (self.dir / "access.json").exists():
                    self._set_roles(deadline)
                return
            if proc.poll() is not None:
                raise CassandraError(f"Cassandra exited with code {proc.returncode}:\n{tail(self.log)}")
            time.sleep(0.2)
        raise CassandraError(f"Cassandra did not start within {timeout:.0f}s:\n{tail(self.log)}")

    def _set_roles(self, deadline: float) -> None:
        """At the first start: the store's role made, and the default superuser's well-known
        password changed (both kept in access.json)."""
        from cassandra import AuthenticationFailed
        from cassandra.auth import PlainTextAuthProvider
        from cassandra.cluster import Cluster, NoHostAvailable

        access = {"superuser": secrets.token_hex(16), "store": secrets.token_hex(16)}
        while True:  # the default superuser exists a moment after the port answers
            cluster = Cluster(["127.0.0.1"], port=self.native_port, protocol_version=5,
                              auth_provider=PlainTextAuthProvider(*DEFAULT_SUPERUSER))
            try:
                session = cluster.connect()
                break
            except (NoHostAvailable, AuthenticationFailed) as exc:
                cluster.shutdown()
                if time.monotonic() > deadline:
                    raise CassandraError(f"Cassandra's default superuser never logged in: {exc}") from None
                time.sleep(0.5)
        try:
            session.execute(f"CREATE ROLE IF NOT EXISTS {STORE_ROLE} WITH LOGIN = true AND PASSWORD = %s",
                            (access["store"],))
            session.execute(f"GRANT CREATE ON ALL KEYSPACES TO {STORE_ROLE}")
            session.execute("ALTER ROLE cassandra WITH PASSWORD = %s", (access["superuser"],))
        finally:
            cluster.shutdown()
        write_private(self.dir / "access.json", json.dumps(access))

    def _starts(self) -> int:
        try:
            return self.log.read_text(errors="replace").count(READY)
        except OSError:
            return 0

    def kill(self, sig: int = signal.SIGKILL, timeout: float = 60.0) -> None:
        """Send `sig` (SIGTERM: a clean shutdown) and wait until the node is gone."""
        pid = self.pid()
        if pid is not None:
            end_group(pid, sig, self._proc, timeout)

    def stop(self) -> None:
        self.kill(signal.SIGTERM)


def release() -> str:
    """The Cassandra release of the jars (5.0.8), from cassandra-all's file name: what a node runs."""
    try:
        jar = next(fetch("cassandra").glob("cassandra-all-*.jar"), None)
    except JarsUnavailable:
        jar = None
    return jar.stem.removeprefix("cassandra-all-") if jar else "(release unknown)"
