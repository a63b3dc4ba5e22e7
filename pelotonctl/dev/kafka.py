"""Apache Kafka from its published jars, for the dev stack and the tests: one KRaft node
(combined broker and controller) or a cluster of several on this machine.

    cluster = KafkaCluster.create(home / "kafka", nodes=3)   # formats each node's log once
    cluster.start()                                           # every node, waits until all serve
    cluster.bootstrap                                         # "127.0.0.1:P1,127.0.0.1:P2,..."
    cluster.kill(2); cluster.start_node(2)                    # the node keeps its log
    cluster.stop()

With secure=True the clients' listener is SASL_SSL (SCRAM-SHA-512 over TLS) and the broker
authorizes every request (StandardAuthorizer, nothing allowed without an ACL): only the `admin`
user (and the brokers themselves) may do anything until pelotonctl.kafka_access gives each
component its user and ACLs. Its secrets and CA stay in the cluster's folder (access.json).

The jars come from Maven Central through jvm/kafka/pom.xml into .jars/kafka (`make jars`, or
`ensure_jars()` on first use). A cluster's layout (ports, cluster id) is kept in its folder, so
a cluster started again from the same folder finds its own log.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import json
import os
import secrets
import shutil
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from peloton.private import private_dir, write_private
from pelotonctl.dev.jars import JarsUnavailable, fetch
from pelotonctl.dev.jvm import DEFAULT, LIGHT, check_kind, jvm_options
from pelotonctl.dev.processes import alive, end_group, first_errors, free_port, tail
from pelotonctl.dev.tls import make_certificates

READY = "Kafka Server started"
# What Kafka's scripts pass (kafka-run-class.sh), with a heap sized for a 2-core machine shared
# with the stages: the broker's page cache, not its heap, holds the log. The collector's options
# are a full JVM's (see dev/jvm.py).
COLLECTOR = ["-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35",
             "-XX:+ExplicitGCInvokesConcurrent"]
JVM_OPTIONS = ["-XX:MaxDirectMemorySize=256m", "-Djava.awt.headless=true"]
HEAP_MB = {1: 768, 3: 512}  # per node, by cluster size
LOG4J = """\
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.cleaner.name = kafka.log.LogCleaner
logger.cleaner.level = INFO
logger.noisy.name = org.apache.kafka.clients
logger.noisy.level = WARN
"""


class KafkaError(RuntimeError):
    """Kafka's jars are missing and cannot be fetched, or a node did not start; the message says why."""


def ensure_jars() -> Path:
    """The folder of Kafka's jars, fetched from Maven Central once (later calls find them)."""
    try:
        return fetch("kafka")
    except JarsUnavailable as exc:
        raise KafkaError(str(exc)) from None


def java_command(main: str, *args: str, heap_mb: int = 256, options: list[str] | None = None) -> list[str]:
    """A command line that runs `main` from Kafka's jars (a broker, the storage tool, a tool);
    a light JVM unless `options` say otherwise."""
    if shutil.which("java") is None:
        raise KafkaError("Kafka needs Java 17 and `java` is not on PATH")
    return ["java", f"-Xms{heap_mb}m", f"-Xmx{heap_mb}m", *(LIGHT if options is None else options),
            "-cp", f"{ensure_jars()}/*", main, *args]


def new_cluster_id() -> str:
    """What `kafka-storage random-uuid` prints, without starting a JVM for it: a random UUID in
    URL-safe base64, unpadded, never starting with "-" (Kafka's Uuid.randomUuid)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


@dataclass
class Node:
    node_id: int
    port: int  # the broker's listener (clients)
    controller_port: int
    dir: Path
    # A second client listener, advertised at proxy_port: clients that bootstrap there reach the
    # node only through whatever listens on proxy_port (a test's TCP proxy, which can cut them off).
    proxied_port: int = 0
    proxy_port: int = 0
    # A secure cluster's brokers talk to each other here (SASL PLAIN, as the `broker` user).
    internal_port: int = 0
    # The name clients and the other nodes reach it by, and the address it listens on: on one
    # machine both are loopback; a node on a machine (or container) of its own is reached by its
    # host name and listens on every address (pelotonctl/deploy/broker.py).
    host: str = "127.0.0.1"
    bind: str = "127.0.0.1"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def log(self) -> Path:
        return self.dir / "server.log"

    @property
    def pid_file(self) -> Path:
        return self.dir / "pid"


@dataclass
class Access:
    """A secure cluster's secrets: the SCRAM password of its `admin` user, the brokers' own
    (PLAIN, between brokers and to the controllers), the CA clients trust and the broker's PEM."""
    admin_password: str
    broker_password: str
    ca: Path
    keystore: Path

    @classmethod
    def make(cls, dir: Path) -> Access:
        ca, keystore = make_certificates(dir / "tls")
        return cls(secrets.token_hex(16), secrets.token_hex(16), ca, keystore)


ADMIN = "admin"  # the secure cluster's super user, made when its log is formatted
BROKER = "broker"


def node_properties(node: Node, voters: str, size: int, access: Access | None = None) -> str:
    """server.properties of one node: KRaft, combined roles, listening on its bind address and
    reached at its host name (both 127.0.0.1 on one machine)."""
    replicas = min(3, size)
    isr = 2 if replicas >= 3 else 1
    proxied = advertised = mapped = ""
    if node.proxied_port:
        proxied = f",PROXIED://127.0.0.1:{node.proxied_port}"
        advertised = f",PROXIED://127.0.0.1:{node.proxy_port}"
        mapped = ",PROXIED:PLAINTEXT"
    if access is None:
        listeners = [
            f"listeners=PLAINTEXT://{node.bind}:{node.port},CONTROLLER://{node.bind}:{node.controller_port}{proxied}",
            f"advertised.listeners=PLAINTEXT://{node.host}:{node.port}{advertised}",
            "controller.listener.names=CONTROLLER",
            "inter.broker.listener.name=PLAINTEXT",
            f"listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT{mapped}",
        ]
    else:
        listeners = secure_listeners(node, access)
    return "\n".join([
        "process.roles=broker,controller",
        f"node.id={node.node_id}",
        f"controller.quorum.voters={voters}",
        *listeners,
        f"log.dirs={node.dir / 'data'}",
        # Replication: what the topics and Kafka's internal topics get.
        f"default.replication.factor={replicas}",
        f"min.insync.replicas={isr}",
        f"offsets.topic.replication.factor={replicas}",
        f"transaction.state.log.replication.factor={replicas}",
        f"transaction.state.log.min.isr={isr}",
        # Fewer internal partitions than production's 50: groups and transactional producers
        # come and go in the hundreds in a test session, each first use of a partition costs a load.
        "offsets.topic.num.partitions=10",
        "transaction.state.log.num.partitions=10",
        # Groups form at once (tests start and stop stages all the time); tests shorten session
        # timeouts below production's 6 s floor.
        "group.initial.rebalance.delay.ms=0",
        "group.min.session.timeout.ms=1000",
        # A dead node is fenced and its partitions get new leaders after 4 s of missed heartbeats
        # (Kafka's default is 9 s): well below the host agents' lease (18 s), so an agent whose
        # report partition lost its leader does not fence itself meanwhile.
        "broker.session.timeout.ms=4000",
        "broker.heartbeat.interval.ms=1000",
        # A 2-core machine: fewer threads than a server's defaults.
        "num.network.threads=2",
        "num.io.threads=4",
        "background.threads=4",
        "num.recovery.threads.per.data.dir=1",
        "log.cleaner.threads=1",
        "log.cleaner.dedupe.buffer.size=33554432",
        # The cleaner looks for dirty compacted logs this often (15 s by default).
        "log.cleaner.backoff.ms=5000",
        # Topics come from topics.yaml only (see topics.apply_topics).
        "auto.create.topics.enable=false",
        # A broker that is not shut down cleanly recovers its log at the next start; the page
        # cache survives a SIGKILL of the process, so nothing acknowledged is lost by one.
        "",
    ])


def secure_listeners(node: Node, access: Access) -> list[str]:
    """Clients on SASL_SSL with SCRAM (users live in the cluster's metadata, added through the
    Admin API); brokers and controllers among themselves on SASL PLAIN, because a controller
    must authenticate brokers before it has any metadata (KRaft's controller listener takes no
    SCRAM). Every request is authorized: no ACL, no access."""
    plain = (f'org.apache.kafka.common.security.plain.PlainLoginModule required username="{BROKER}" '
             f'password="{access.broker_password}" user_{BROKER}="{access.broker_password}";')
    return [
        f"listeners=CLIENT://{node.bind}:{node.port},INTERNAL://{node.bind}:{node.internal_port},"
        f"CONTROLLER://{node.bind}:{node.controller_port}",
        f"advertised.listeners=CLIENT://{node.host}:{node.port},INTERNAL://{node.host}:{node.internal_port}",
        "controller.listener.names=CONTROLLER",
        "inter.broker.listener.name=INTERNAL",
        "listener.security.protocol.map=CLIENT:SASL_SSL,INTERNAL:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
        "sasl.mechanism.inter.broker.protocol=PLAIN",
        "sasl.mechanism.controller.protocol=PLAIN",
        "listener.name.internal.sasl.enabled.mechanisms=PLAIN",
        f"listener.name.internal.plain.sasl.jaas.config={plain}",
        "listener.name.controller.sasl.enabled.mechanisms=PLAIN",
        f"listener.name.controller.plain.sasl.jaas.config={plain}",
        "listener.name.client.sasl.enabled.mechanisms=SCRAM-SHA-512",
        "listener.name.client.scram-sha-512.sasl.jaas.config="
        "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        "listener.name.client.ssl.keystore.type=PEM",
        f"listener.name.client.ssl.keystore.location={access.keystore}",
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        f"super.users=User:{BROKER};User:{ADMIN}",
        "allow.everyone.if.no.acl.found=false",
    ]


class KafkaCluster:
    """Kafka nodes on this machine, each with its log in `dir`/node-N."""

    def __init__(self, dir: Path, nodes: list[Node], cluster_id: str, access: Access | None = None,
                 jvm: str = DEFAULT):
        self.dir = dir
        self.nodes = nodes
        self.cluster_id = cluster_id
        self.access = access
        self.jvm = jvm
        self._procs: dict[int, subprocess.Popen] = {}
        self._log_from: dict[int, int] = {}  # where each node's latest start begins in its log

    def client_settings(self) -> dict:
        """Settings (peloton.config) that reach this cluster as its super user."""
        if self.access is None:
            return {"bootstrap": self.bootstrap}
        return {"bootstrap": self.bootstrap, "kafka_user": ADMIN, "kafka_password": self.access.admin_password,
                "kafka_ca": str(self.access.ca)}

    @property
    def bootstrap(self) -> str:
        return ",".join(n.address for n in self.nodes)

    @property
    def heap_mb(self) -> int:
        return HEAP_MB.get(len(self.nodes), 512)

    @classmethod
    def create(cls, dir: Path, nodes: int = 1, first_port: int | None = None, proxied: bool = False,
               secure: bool = False, jvm: str = DEFAULT) -> KafkaCluster:
        """A new cluster in `dir` (emptied first): ports chosen, every node's log formatted with
        one cluster id. `first_port`, when given and free, is the first node's client port;
        `proxied`: each node also has a listener reached through a proxy port (see Node);
        `secure`: SASL_SSL for clients and ACLs (see the module's docstring); `jvm`: light or
        full (dev/jvm.py), kept for every later start."""
        check_kind(jvm)  # before anything is made
        dir = Path(dir).resolve()
        shutil.rmtree(dir, ignore_errors=True)
        private_dir(dir)  # the nodes' passwords, key and log: the cluster's alone (tasks share the machine)
        members = []
        for i in range(1, nodes + 1):
            port = first_port if (i == 1 and first_port) else free_port()
            members.append(Node(i, port, free_port(), dir / f"node-{i}",
                                *((free_port(), free_port()) if proxied else (0, 0)),
                                internal_port=free_port() if secure else 0))
        cluster_id = new_cluster_id()
        access = Access.make(dir) if secure else None
        cluster = cls(dir, members, cluster_id, access, jvm)
        # The admin user's SCRAM credential goes into the metadata log when it is formatted.
        scram = ["--add-scram", f"SCRAM-SHA-512=[name={ADMIN},password={access.admin_password}]"] if access else []
        voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in members)
        (dir / "log4j2.properties").write_text(LOG4J)
        for n in members:
            private_dir(n.dir)
            write_private(n.dir / "server.properties", node_properties(n, voters, nodes, access))
            done = subprocess.run(java_command("kafka.tools.StorageTool", "format", "-t", cluster_id, "-c",
                                               str(n.dir / "server.properties"), *scram, heap_mb=128),
                                  capture_output=True, text=True)
            if done.returncode != 0:
                raise KafkaError(f"formatting node {n.node_id} failed: {(done.stdout + done.stderr)[-2000:]}")
        (dir / "cluster.json").write_text(json.dumps({
            "cluster_id": cluster_id,
            "jvm": jvm,
            "nodes": [{"node_id": n.node_id, "port": n.port, "controller_port": n.controller_port,
                       "proxied_port": n.proxied_port, "proxy_port": n.proxy_port,
                       "internal_port": n.internal_port} for n in members]},
            indent=2))
        if access is not None:
            write_private(dir / "access.json", json.dumps({"admin_password": access.admin_password,
                                                            "broker_password": access.broker_password,
                                                            "ca": str(access.ca), "keystore": str(access.keystore)},
                                                           indent=2))
        return cluster

    @classmethod
    def open(cls, dir: Path) -> KafkaCluster:
        """The cluster formatted in `dir` earlier (to start again on its own log)."""
        dir = Path(dir).resolve()
        doc = json.loads((dir / "cluster.json").read_text())
        nodes = [Node(n["node_id"], n["port"], n["controller_port"], dir / f"node-{n['node_id']}",
                      n.get("proxied_port", 0), n.get("proxy_port", 0), n.get("internal_port", 0))
                 for n in doc["nodes"]]
        access = None
        if (dir / "access.json").exists():
            a = json.loads((dir / "access.json").read_text())
            access = Access(a["admin_password"], a["broker_password"], Path(a["ca"]), Path(a["keystore"]))
        return cls(dir, nodes, doc["cluster_id"], access, doc.get("jvm", DEFAULT))

    def node(self, node_id: int) -> Node:
        return next(n for n in self.nodes if n.node_id == node_id)

    def launch(self, node_id: int) -> subprocess.Popen:
        """Start one node in the background (in a session of its own) without waiting."""
        n = self.node(node_id)
        cmd = java_command("kafka.Kafka", str(n.dir / "server.properties"), heap_mb=self.heap_mb,
                           options=[*jvm_options(self.jvm, COLLECTOR, JVM_OPTIONS),
                                    f"-Dlog4j2.configurationFile={self.dir / 'log4j2.properties'}",
                                    f"-Dkafka.logs.dir={n.dir}"])
        with open(n.log, "ab") as log:  # the node keeps its own copy of the descriptor
            self._log_from[node_id] = log.tell()
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        n.pid_file.write_text(str(proc.pid))
        self._procs[node_id] = proc
        return proc

    def start(self, timeout: float = 90.0) -> None:
        """Start every node not running and wait until each serves. The nodes start together:
        with several voters none is ready before a quorum is up."""
        waiting = {}
        for n in self.nodes:
            if self.pid(n.node_id) is None:
                waiting[n.node_id] = (self._starts(n), self.launch(n.node_id))
        for node_id, (before, proc) in waiting.items():
            self._wait_ready(self.node(node_id), before, proc, timeout)

    def start_node(self, node_id: int, timeout: float = 90.0) -> subprocess.Popen:
        n = self.node(node_id)
        before = self._starts(n)
        proc = self.launch(node_id)
        self._wait_ready(n, before, proc, timeout)
        return proc

    def _starts(self, n: Node) -> int:
        try:
            return n.log.read_text(errors="replace").count(READY)
        except OSError:
            return 0

    def _wait_ready(self, n: Node, before: int, proc: subprocess.Popen, timeout: float) -> None:
        """Poll the node's log until this start says it serves (not a sleep)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._starts(n) > before:
                return
            if proc.poll() is not None:
                raise KafkaError(f"Kafka node {n.node_id} exited with code {proc.returncode}:\n{self._start_log(n)}")
            time.sleep(0.1)
        raise KafkaError(f"Kafka node {n.node_id} did not start within {timeout:.0f}s:\n{self._start_log(n)}")

    def _start_log(self, n: Node) -> str:
        """What a failed start says: the first errors since its launch, then the log's tail."""
        return f"{first_errors(n.log, self._log_from.get(n.node_id, 0))}\n...\n{tail(n.log)}"

    def port_was_taken(self, node_id: int) -> bool:
        """Whether the node stopped because its client port was someone else's by then."""
        n = self.node(node_id)
        try:
            return f"failed to bind to 127.0.0.1:{n.port}: Address already in use" in n.log.read_text(errors="replace")
        except OSError:
            return False

    def pid(self, node_id: int) -> int | None:
        """The node's process id while it runs."""
        try:
            pid = int(self.node(node_id).pid_file.read_text())
        except (OSError, ValueError):
            return None
        return pid if alive(pid) else None

    def fenced_at(self, node_id: int, since: float) -> float | None:
        """When (wall clock) a controller fenced node `node_id`, the first time at or after `since`
        (less a second: the log's clock is read to the millisecond, ours finer), as the live
        nodes' logs say ("Fencing broker N at epoch"); None while none has."""
        for n in self.nodes:
            if n.node_id == node_id:
                continue
            for line in _log_lines(n):
                if f"Fencing broker {node_id} at epoch" in line:
                    stamp = _log_time(line)
                    if stamp >= since - 1:
                        return stamp
        return None

    def wait_fenced(self, node_id: int, since: float, timeout: float = 10.0) -> float | None:
        """fenced_at, waited for up to `timeout` seconds (a controller fences a dead node after its
        session, and the line reaches the log a moment later)."""
        deadline = time.monotonic() + timeout
        while True:
            fenced = self.fenced_at(node_id, since)
            if fenced is not None or time.monotonic() >= deadline:
                return fenced
            time.sleep(0.2)

    def active_controller(self, at: float) -> int | None:
        """The node that had last become the active controller at `at` (wall clock), as the nodes'
        logs say ("Becoming the active controller"); None when no log says. Losing that node
        lengthens the election: the quorum elects another first."""
        latest: tuple[float, int] | None = None
        for n in self.nodes:
            for line in _log_lines(n):
                if "Becoming the active controller at epoch" in line:
                    stamp = _log_time(line)
                    if stamp <= at and (latest is None or stamp > latest[0]):
                        latest = (stamp, n.node_id)
        return latest[1] if latest else None

    def refused_markers(self, since: float) -> tuple[int, float]:
        """How many times, from `since` (wall clock) on, a transaction coordinator had a
        partition's commit or abort marker refused and sent it again, and over how many seconds
        from the first refusal to the last, as the nodes' logs say. While a coordinator's markers
        are refused, the producer's next transaction waits (CONCURRENT_TRANSACTIONS), and so do
        the partitions' read_committed readers: after a node's loss one coordinator was refused
        NOT_LEADER_OR_FOLLOWER for 3.1 s by the partitions' new leader
        (docs/decisions/0010-client-settings-for-broker-failover.md)."""
        stamps = sorted(stamp for n in self.nodes for line in _log_lines(n)
                        if "transaction marker for partition" in line and " has failed with error " in line
                        and (stamp := _log_time(line)) >= since)
        return len(stamps), (stamps[-1] - stamps[0]) if stamps else 0.0

    def kill(self, node_id: int, sig: int = signal.SIGKILL, timeout: float = 30.0) -> None:
        """Send `sig` to a node (SIGTERM: a clean shutdown) and wait until it is gone."""
        pid = self.pid(node_id)
        if pid is not None:
            end_group(pid, sig, self._procs.pop(node_id, None), timeout)

    def stop(self, timeout: float = 30.0) -> None:
        """A clean shutdown of every node (the brokers first would leave the controllers without
        a quorum to hand leadership over: stop them all at once)."""
        for n in self.nodes:
            pid = self.pid(n.node_id)
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGTERM)
        for n in self.nodes:
            self.kill(n.node_id, signal.SIGTERM, timeout)


def _log_lines(node: Node) -> list[str]:
    try:
        return node.log.read_text(errors="replace").splitlines()
    except OSError:
        return []


def _log_time(line: str) -> float:
    """A broker log line's time ("[2026-11-29 01:15:58,595] ..."), wall clock."""
    return datetime.datetime.strptime(line[1:24], "%Y-%m-%d %H:%M:%S,%f").timestamp()


def client_properties(settings) -> str:
    """A client.properties for Kafka's own tools (kafka-consumer-groups and the like:
    --command-config), as the user `settings` name (peloton.config.Settings)."""
    if not settings.kafka_user:
        return ""
    lines = ["security.protocol=SASL_SSL", "sasl.mechanism=SCRAM-SHA-512",
             "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
             f'username="{settings.kafka_user}" password="{settings.kafka_password}";']
    if settings.kafka_ca:
        lines += ["ssl.truststore.type=PEM", f"ssl.truststore.location={settings.kafka_ca}"]
    return "\n".join(lines) + "\n"
