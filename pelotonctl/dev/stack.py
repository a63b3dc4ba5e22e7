"""The embedded dev stack: Apache Kafka in KRaft mode, one node or three (unless
PELOTON_KAFKA_BOOTSTRAP names a Kafka), the topics, a default pool, and one process per stage.
State lives in $PELOTON_HOME/dev/: the brokers' logs in dev/kafka, a Cassandra node's data in
dev/cassandra (--store cassandra), what runs in dev/stack.json."""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from peloton.auth.grants import new_key_pair
from peloton.auth.host_keys import host_key
from peloton.config import REPO_ROOT, Settings, dev_pace
from peloton.private import open_home, private_dir, write_private
from peloton.store import masked_url, sqlite_path
from pelotonctl.dev.jvm import DEFAULT as JVM_DEFAULT
from pelotonctl.dev.processes import alive, free_port, port_is_free
from pelotonctl.dev.servers import StackError, processes_using, restart_server, restartable, stop_together
from stages.launch.inventory import AGENT, SIM_AGENT, HostSpec, parse_inventory

STAGE_ORDER = ("admit", "entitle", "place", "launch")
SERVERS = ("broker", "postgres", "cassandra", "zookeeper")  # stopped after the stages
STORE_KINDS = ("sqlite", "postgres", "cassandra")  # what a dev stack's store can be
CASSANDRA_KEYSPACE = "peloton"  # the store's backend makes it on first use
DEFAULT_POOL = "/DefaultResPool"
DEFAULT_POOL_FILE = REPO_ROOT / "examples" / "pools" / "default.yaml"


KAFKA_PORT = 9092


def start_kafka_cluster(dir: Path, brokers: int, jvm: str = JVM_DEFAULT):
    """A new cluster of `brokers` nodes in `dir` (clients on SASL_SSL, every request authorized),
    started: its first node on Kafka's own port when that is free, so clients' defaults reach it.
    Free when asked may be taken by the time the broker binds it (two stacks started at once on
    one machine): the cluster is then made again on ports nobody holds. Raises KafkaError."""
    from pelotonctl.dev.kafka import KafkaCluster

    wanted = KAFKA_PORT if port_is_free(KAFKA_PORT) else None
    cluster = KafkaCluster.create(dir, brokers, wanted, secure=True, jvm=jvm)
    try:
        cluster.start()
    except Exception:
        cluster.stop()  # the nodes that did start
        if wanted is None or not cluster.port_was_taken(1):
            raise
        cluster = KafkaCluster.create(dir, brokers, None, secure=True, jvm=jvm)
        cluster.start()
    return cluster


def settings_store(settings: Settings) -> str:
    try:
        return str(Path(settings.store).relative_to(Path.cwd()))
    except ValueError:
        return masked_url(settings.store)


def wait_for_port(host: str, port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise StackError(f"nothing listens on {host}:{port} after {timeout:.0f}s")


# Settings no component gets unless it is given them by name (extra_env): the operator's tokens and
# the log-grant keys. An agent gets no store either: it speaks only to Kafka.
NOT_INHERITED = ("PELOTON_TOKEN", "PELOTON_COMMAND_TOKEN", "PELOTON_AGENT_LOGS_KEY", "PELOTON_AGENT_LOGS_PUBLIC_KEY",
                 "PELOTON_AGENT_REPORT_KEY", "PELOTON_HOST_KEY")


def component_env(settings: Settings, extra_env: dict[str, str] | None, agent: bool = False) -> dict[str, str]:
    """A component's environment: this process's and the settings, less what is not its own."""
    env = {**os.environ, **settings.env()}
    for name in (*NOT_INHERITED, *(("PELOTON_STORE",) if agent else ())):
        env.pop(name, None)
    return {**env, **(extra_env or {}), "PYTHONUNBUFFERED": "1"}


def start_stage(name: str, settings: Settings, log_path: Path, instance_id: str | None = None,
                extra_env: dict[str, str] | None = None) -> subprocess.Popen:
    env = component_env(settings, extra_env)
    cmd = [sys.executable, "-m", "pelotonctl", "stage", "run", name]
    if instance_id:
        cmd += ["--instance-id", instance_id]
    with open(log_path, "ab") as log:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                cwd=str(REPO_ROOT))


def start_agent(host: HostSpec, settings: Settings, log_path: Path, *options: str,
                extra_env: dict[str, str] | None = None) -> subprocess.Popen:
    """A host agent process for one host of an `agent:` group of the inventory."""
    env = component_env(settings, extra_env, agent=True)
    r = host.capacity
    cmd = [sys.executable, "-m", "pelotonctl", "agent", "run", "--name", host.host_id,
           "--resources", f"cpu={r.cpu:g},mem_mb={r.mem_mb:g},disk_mb={r.disk_mb:g},gpu={r.gpu:g}", *options]
    with open(log_path, "ab") as log:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                cwd=str(REPO_ROOT))


def start_api(settings: Settings, log_path: Path, port: int, grpc_port: int = -1,
              extra_env: dict[str, str] | None = None) -> subprocess.Popen:
    """One API instance (`pelotonctl api`) on this port, its gRPC services on grpc_port (-1: none)."""
    env = component_env(settings, extra_env)
    cmd = [sys.executable, "-m", "pelotonctl", "api", "--port", str(port), "--grpc-port", str(grpc_port)]
    with open(log_path, "ab") as log:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                cwd=str(REPO_ROOT))


def agent_hosts(settings: Settings) -> list[HostSpec]:
    """The hosts of the inventory's `agent:` groups: each one a process of its own."""
    return [h for h in _inventory(settings) if h.driver == AGENT]


def sim_agent_hosts(settings: Settings) -> list[HostSpec]:
    """The hosts of the inventory's `simagent:` groups: one process serves them all."""
    return [h for h in _inventory(settings) if h.driver == SIM_AGENT]


def start_sim_agent(hosts: list[HostSpec], settings: Settings, log_path: Path,
                    extra_env: dict[str, str] | None = None) -> subprocess.Popen:
    """One agent process for every simulated agent host (named simagent-0, simagent-1, ...)."""
    return start_agent(HostSpec(SIM_AGENT, SIM_AGENT, hosts[0].capacity, 0), settings, log_path,
                       "--simulate", str(len(hosts)), extra_env=extra_env)


def metrics_port(settings: Settings) -> tuple[dict[str, str], str | None]:
    """A port of its own for one process's metrics, as its environment and the address to list
    (none when metrics are off)."""
    if settings.metrics_port < 0:
        return {}, None
    port = free_port()
    host = "127.0.0.1" if settings.metrics_host in ("0.0.0.0", "::", "") else settings.metrics_host
    return {"PELOTON_METRICS_PORT": str(port)}, f"http://{host}:{port}/metrics"


def _inventory(settings: Settings) -> list[HostSpec]:
    from peloton.topics import Catalogue

    return parse_inventory(settings.hosts, Catalogue(settings.topic_prefix)["placements"].partitions)


def ready_line(instance: str) -> str:
    """What a process's log says once it is ready: an agent that it is up, a stage that it has
    its partitions."""
    return " up: " if instance.startswith("agent-") else "assigned"


def wait_for_log(path: Path, text: str, timeout: float, proc: subprocess.Popen | None = None) -> None:
    wait_for_log_count(path, text, 1, timeout, proc)


def wait_for_log_count(path: Path, text: str, count: int, timeout: float, proc: subprocess.Popen | None = None) -> None:
    """Wait until the log says `text` `count` times (a restarted process appends to its log)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text(errors="replace").count(text) >= count:
            return
        if proc is not None and proc.poll() is not None:
            raise StackError(f"{path.stem} exited with code {proc.returncode}; see {path}")
        time.sleep(0.1)
    raise StackError(f"{path.stem} did not report {text!r} within {timeout:.0f}s; see {path}")


def _ready_name(component: dict) -> str:
    return "agent-" if component["component"] == "agent" else component["instance"]


class DevStack:
    def __init__(self, settings: Settings):
        self.settings = dev_pace(settings)  # a demo shows pools lend and take back within seconds
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
        # What a server needs to start again (its superuser's password) stays in stack.json.
        return [{**{k: v for k, v in c.items() if k != "superuser"}, "address": masked_url(c["address"]),
                 "running": alive(c["pid"])} for c in state["components"]]

    def up(self, progress=print, store: str = "sqlite", instances: int = 1, brokers: int = 1,
           jvm: str = JVM_DEFAULT) -> dict:
        """Start a stack in this home; refuses while another runs or is being started here.

        store="postgres" runs it on a local PostgreSQL and ZooKeeper of its own, as the stages
        would run on several machines, store="cassandra" on a Cassandra node (in dev/cassandra)
        and a ZooKeeper; instances starts that many of every stage; brokers=3 a three-node Kafka
        cluster (replication factor 3, min.insync.replicas 2); jvm: light or full, how much the
        broker's and the Cassandra node's JVMs compile (dev/jvm.py)."""
        open_home(self.settings.home)
        private_dir(self.dir)  # the stack's tokens, servers' passwords and logs
        with open(self.dir / "up.lock", "w") as lock:
            try:  # two `dev up` at once: the second must not start a second broker and stages
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise StackError(f"another `pelotonctl dev up` is starting a dev stack in {self.settings.home} "
                                 f"(PELOTON_HOME) right now") from None
            running = [c for c in self.status() if c["running"]]
            if running:
                state = self.read() or {}
                names = ", ".join(f"{c.get('instance') or c['component']} (pid {c['pid']})" for c in running)
                raise StackError(f"a dev stack is already running in {self.settings.home} (PELOTON_HOME): broker at "
                                 f"{state.get('bootstrap', '?')}, {names}; `pelotonctl dev down` stops it")
            return self._up(progress, store, instances, brokers, jvm)

    def _up(self, progress, store_kind: str, instances: int, brokers: int, jvm: str) -> dict:
        logs = private_dir(self.dir / "logs")
        components = []
        external = os.environ.get("PELOTON_KAFKA_BOOTSTRAP")
        passwords: dict[str, str] = {}  # each component's Kafka user (none on an external broker)
        if external:
            kafka = {"bootstrap": external}
            components.append({"component": "broker", "pid": 0, "address": external, "log": "", "external": True})
        else:
            # A new stack is a new Kafka cluster, so the store and the agents start empty too:
            # allocations and launches that no event of the new log will ever release would stay.
            path = sqlite_path(self.settings.store)
            if path is not None and store_kind == "sqlite":
                from peloton.store.sqlite import store_files

                for file in store_files(path):
                    file.unlink(missing_ok=True)
            shutil.rmtree(Path(self.settings.home) / "agents", ignore_errors=True)
            kafka = self._start_kafka(components, brokers, jvm, progress)
        if store_kind != "sqlite":
            try:
                self.settings = replace(self.settings, **self._start_servers(store_kind, jvm, components, progress))
            except Exception as exc:  # leave nothing running behind a failed start
                self._stop(components, lambda m: None)
                raise StackError(str(exc)) from None
        # Named once the store is known: SQLite's file, PostgreSQL's new database, or the Cassandra node's keyspace.
        if not external:
            progress(f"          a new cluster: its log ({self.dir / 'kafka'}) and the store "
                     f"({settings_store(self.settings)}) start empty, and keep what they get across "
                     "`dev restart`")
        # Everything started from here on talks to this broker (as the cluster's admin user, unless
        # started as a component's) and store. Job commands must be signed: the API with its
        # service token, a team's producer with the team's, the demo with the stack's admin token.
        self.settings = settings = replace(self.settings, **kafka, signed_commands=True)
        state = {**kafka, "signed_commands": True, "store": settings.store, "zookeeper": settings.zookeeper,
                 "zookeeper_auth": settings.zookeeper_auth, "hosts": settings.hosts, "task_users": settings.task_users,
                 "started": time.time(), "components": components,
                 # Each agent signs its reports with its host's key, made from this; launch checks them.
                 "agent_report_key": secrets.token_hex(32)}
        self._write(state)
        from peloton.store import open_store
        from pelotonctl import principals
        from pelotonctl.admin import create_pool, ensure_topics

        report = ensure_topics(settings)
        progress(f"topics    {len(report)} ready")
        if settings.kafka_user:
            passwords = state["kafka_users"] = principals.new_passwords()
            self._write(state)
            acls = principals.apply(settings, passwords)
            progress(f"kafka     users {', '.join(passwords)} made, {acls} ACLs: each component may do only "
                     "its part (`pelotonctl topics acls`)")
        store = open_store(settings.store)
        if store.get_pool(DEFAULT_POOL) is None:
            create_pool(settings, store, DEFAULT_POOL, DEFAULT_POOL_FILE.read_text())
            progress(f"pool      {DEFAULT_POOL} created from {DEFAULT_POOL_FILE.relative_to(REPO_ROOT)}")
        store.close()
        procs = {}
        for name in STAGE_ORDER:
            for i in range(instances):
                instance = f"{name}-{i}"
                log = logs / f"{instance if instances > 1 else name}.log"
                env, address = metrics_port(settings)
                proc = start_stage(name, settings, log, instance_id=instance,
                                   extra_env={**env, **principals.as_user(name, passwords),
                                              **component_keys(name, state)})
                procs[instance] = (proc, log)
                components.append({"component": name, "instance": instance, "pid": proc.pid,
                                   "address": f"group {settings.topic_prefix}peloton.{name}", "log": str(log),
                                   "metrics": address})
                self._write(state)
        state["token"] = state["command_token"] = self._issue(settings, os.environ.get("USER") or "dev", ["dev"], True)
        state["command_tokens"] = {"api": self._issue(settings, "api", [], True),
                                   "producer": self._issue(settings, "producer", ["dev"], False)}
        # Agents serve a run's output against the API's grant for it: the API signs, agents check.
        state["agent_logs_key"], state["agent_logs_public_key"] = new_key_pair()
        self._write(state)
        api_port, grpc_port = free_port(), free_port()
        log = logs / "api.log"
        proc = start_api(settings, log, api_port, grpc_port, extra_env={**principals.as_user("api", passwords),
                                                              **component_keys("api", state),
                                                              "PELOTON_COMMAND_TOKEN": state["command_tokens"]["api"]})
        state["api_url"] = f"http://127.0.0.1:{api_port}"
        state["grpc"] = f"127.0.0.1:{grpc_port}"
        components.append({"component": "api", "instance": "api-0", "pid": proc.pid, "address": state["api_url"],
                           "log": str(log), "port": api_port, "grpc": state["grpc"], "grpc_port": grpc_port,
                           "metrics": f"{state['api_url']}/metrics"})
        self._write(state)
        for host in agent_hosts(settings):
            log = logs / f"{host.host_id}.log"
            env, address = metrics_port(settings)
            proc = start_agent(host, settings, log, extra_env={**env, **principals.as_user("agent", passwords),
                                                                **component_keys("agent", state, host.host_id)})
            procs[host.host_id] = (proc, log)
            components.append({"component": "agent", "instance": host.host_id, "pid": proc.pid,
                               "address": f"host {host.host_id}", "log": str(log), "metrics": address})
            self._write(state)
        simulated = sim_agent_hosts(settings)
        if simulated:
            log = logs / f"{SIM_AGENT}.log"
            env, address = metrics_port(settings)
            proc = start_sim_agent(simulated, settings, log, extra_env={**env, **principals.as_user("agent", passwords),
                                                                         **component_keys("agent", state, SIM_AGENT)})
            procs[f"agent-{SIM_AGENT}"] = (proc, log)
            components.append({"component": "agent", "instance": SIM_AGENT, "pid": proc.pid,
                               "address": f"{len(simulated)} simulated hosts", "log": str(log), "metrics": address})
            self._write(state)
        for instance, (proc, log) in procs.items():
            wait_for_log(log, ready_line(instance), 60, proc)
            progress(f"{instance if instances > 1 or instance.startswith('agent-') else instance.rsplit('-', 1)[0]:<9} "
                     f"running (pid {proc.pid})")
        wait_for_port("127.0.0.1", api_port, 60)
        wait_for_port("127.0.0.1", grpc_port, 60)
        progress(f"api       {state['api_url']} (OpenAPI at /openapi.json; an admin token is in {self.state_file})")
        progress(f"grpc      {state['grpc']} (Peloton's v0 and v1alpha services; reflection and health)")
        progress(f"hosts     {settings.hosts}")
        return state

    def _issue(self, settings: Settings, user: str, groups: list[str], admin: bool) -> str:
        """A token of the stack's: the owner's admin token (so the README's commands work at once),
        the API's for signing the commands it sends, the dev team's producer's."""
        from peloton.auth.tokens import issue
        from peloton.runtime import now_ms
        from peloton.store import open_store

        token, row = issue(user, groups, admin, now_ms())
        store = open_store(settings.store)
        try:
            store.add_token(row)
        finally:
            store.close()
        return token

    def down(self, progress=print, timeout: float = 15.0) -> None:
        state = self.read()
        if not state:
            progress("no dev stack is recorded; nothing to stop")
            return
        self._stop(state["components"], progress, timeout)
        self.state_file.unlink(missing_ok=True)

    def _stop(self, components: list[dict], progress, timeout: float = 15.0, restarting: bool = False) -> None:
        # The stages, the API and the agents first and together (each finishes its batch and
        # leaves its group), then the servers one by one: the brokers of a cluster stopped at once
        # would wait on each other's controlled shutdown.
        stop_together([c for c in components if c["component"] not in SERVERS], progress, timeout, restarting)
        for c in components:
            if c["component"] in SERVERS:
                stop_together([c], progress, timeout)
        if restarting:
            return
        for c in components:
            if c.get("dir"):  # a server's data of the stack's own, unless something still uses it
                users = processes_using(Path(c["dir"]))
                if users:
                    progress(f"{c.get('instance') or c['component']:<9} data left in {c['dir']}: process "
                             f"{', '.join(map(str, users))} still uses it (not one this stack stopped)")
                    continue
                shutil.rmtree(c["dir"], ignore_errors=True)

    def _start_kafka(self, components: list[dict], brokers: int, jvm: str, progress) -> dict:
        """A new Kafka cluster of `brokers` nodes in dev/kafka, clients on SASL_SSL and every
        request authorized; the settings that reach it as its admin user."""
        from pelotonctl.dev.kafka import KafkaError

        try:
            cluster = start_kafka_cluster(self.dir / "kafka", brokers, jvm)
        except KafkaError as exc:
            raise StackError(str(exc)) from None
        for n in cluster.nodes:
            components.append({"component": "broker", "instance": f"broker-{n.node_id}", "node_id": n.node_id,
                               "pid": cluster.pid(n.node_id), "address": n.address, "log": str(n.log)})
            progress(f"broker-{n.node_id:<2} Apache Kafka (KRaft) on {n.address}, SASL_SSL "
                     f"(pid {cluster.pid(n.node_id)})")
        if cluster.nodes[0].port != KAFKA_PORT:
            progress(f"          {KAFKA_PORT} is taken: producers outside pelotonctl need "
                     f"PELOTON_KAFKA_BOOTSTRAP={cluster.bootstrap}")
        return cluster.client_settings()

    def restart(self, name: str, progress=print, timeout: float = 15.0) -> list[dict]:
        """Stop (if running) and start again the components `dev status` lists by `name`: an
        instance (broker-1, admit-0, agent-0) or a component (broker: every broker, admit: every
        admit instance). Each starts on its existing data: a broker on its log, the Cassandra node
        on its data folder, a stage on its group's committed offsets and the store, an agent on
        its state directory (its runs go on meanwhile: handed over with SIGHUP, and adopted)."""
        state = self.read()
        if not state:
            raise StackError("no dev stack is recorded here; `pelotonctl dev up` starts one")
        chosen = [c for c in state["components"] if name in (c["component"], c.get("instance"))]
        if not chosen:
            names = sorted({c["component"] for c in state["components"]} |
                           {c["instance"] for c in state["components"] if c.get("instance")})
            raise StackError(f"no component {name!r} in the dev stack; it has: {', '.join(names)}")
        if any(c.get("external") or (c.get("dir") and not restartable(c)) for c in chosen):
            raise StackError(f"{name}: the stack did not start it on data of its own (an external broker, or a "
                             "server of an older stack's record), so it cannot be restarted here")
        settings = replace(self.settings, bootstrap=state["bootstrap"], store=state["store"],
                           zookeeper=state.get("zookeeper") or "", zookeeper_auth=state.get("zookeeper_auth") or "",
                           hosts=state["hosts"],
                           signed_commands=bool(state.get("signed_commands")),
                           **{k: state[k] for k in ("kafka_user", "kafka_password", "kafka_ca") if state.get(k)})
        from pelotonctl.principals import as_user

        passwords = state.get("kafka_users")
        brokers = [c for c in chosen if c["component"] == "broker"]
        self._stop(chosen, progress, timeout, restarting=True)
        if brokers:
            from pelotonctl.dev.kafka import KafkaCluster, KafkaError

            cluster = KafkaCluster.open(self.dir / "kafka")
            for c in brokers:
                cluster.launch(c["node_id"])  # together: several voters need each other to start
            try:
                cluster.start()
            except KafkaError as exc:
                raise StackError(str(exc)) from None
            for c in brokers:
                c["pid"] = cluster.pid(c["node_id"])
                progress(f"{c['instance']:<9} running again on its log (pid {c['pid']})")
        for c in chosen:
            if c["component"] == "broker":
                continue
            if c["component"] == "cassandra":
                self._restart_cassandra(c, progress)
                continue
            if c["component"] in ("postgres", "zookeeper"):
                restart_server(c, progress)
                continue
            log = Path(c["log"])
            env = {"PELOTON_METRICS_PORT": c["metrics"].rsplit(":", 1)[1].split("/")[0]} if c.get("metrics") else {}
            env.update(as_user(c["component"], passwords))
            env.update(component_keys(c["component"], state, c.get("instance") or ""))
            if c["component"] == "api":
                env["PELOTON_COMMAND_TOKEN"] = (state.get("command_tokens") or {}).get("api", "")
                c["pid"] = start_api(settings, log, c["port"], c.get("grpc_port", -1), extra_env=env).pid
                wait_for_port("127.0.0.1", c["port"], 60)
                progress(f"{c['instance']:<9} running again (pid {c['pid']})")
                continue
            if c["component"] in STAGE_ORDER:
                proc = start_stage(c["component"], settings, log, instance_id=c["instance"], extra_env=env)
            elif c["instance"] == SIM_AGENT:
                proc = start_sim_agent(sim_agent_hosts(settings), settings, log, extra_env=env)
            else:
                [host] = [h for h in agent_hosts(settings) if h.host_id == c["instance"]]
                proc = start_agent(host, settings, log, extra_env=env)
            starts = log.read_text(errors="replace").count(ready_line(_ready_name(c))) if log.exists() else 0
            c["pid"] = proc.pid
            wait_for_log_count(log, ready_line(_ready_name(c)), starts + 1, 60, proc)
            progress(f"{c['instance']:<9} running again (pid {proc.pid})")
        self._write(state)
        return chosen

    def _start_servers(self, store_kind: str, jvm: str, components: list[dict], progress) -> dict:
        """The store's server (a PostgreSQL, or a Cassandra node) and a ZooKeeper of the stack's
        own; the settings that point at them."""
        if store_kind == "postgres":
            store = self._start_postgres(components, progress)
        else:
            store = self._start_cassandra(components, jvm, progress)
        # The stack's nodes in ZooKeeper are its user's alone (digest ACLs): not open to its tasks.
        return {"store": store, "zookeeper": self._start_zookeeper(components, progress),
                "zookeeper_auth": f"peloton:{secrets.token_hex(16)}"}

    def _start_postgres(self, components: list[dict], progress) -> str:
        """A PostgreSQL of the stack's own ("dir": its data, kept across `dev restart postgres`,
        gone with `dev down`); its new database's URL."""
        from pelotonctl.dev.postgres import start_postgres

        pg = start_postgres(free_port())
        url = pg.create_database("peloton")
        components.append({"component": "postgres", "pid": pg.pid, "address": url,
                           "log": str(pg.dir / "server.log"), "dir": str(pg.dir), "port": pg.port,
                           "options": pg.options, "superuser": pg.password})
        progress(f"postgres  {masked_url(url)} (pid {pg.pid}): password (SCRAM) authentication, a role of the "
                 "stack's own")
        return url

    def _start_cassandra(self, components: list[dict], jvm: str, progress) -> str:
        """A Cassandra node in dev/cassandra, started empty like the broker; the store's URL. No
        "dir" in its component: like a broker it keeps its data across `dev restart cassandra`."""
        from pelotonctl.dev.cassandra import CassandraError, CassandraNode, release

        node_dir = self.dir / "cassandra"
        shutil.rmtree(node_dir, ignore_errors=True)  # create() would open the last stack's node
        node = CassandraNode.create(node_dir, jvm=jvm)
        try:
            node.start()
        except CassandraError:
            node.stop()  # one that did not answer in time must not outlive the failed `dev up`
            raise
        url = node.store_url(CASSANDRA_KEYSPACE)
        components.append({"component": "cassandra", "pid": node.pid(), "address": url, "log": str(node.log)})
        progress(f"cassandra Apache Cassandra {release()} on {node.contact} (pid {node.pid()}): clients log in "
                 "(PasswordAuthenticator), the store as a role of its own")
        return url

    def _restart_cassandra(self, component: dict, progress) -> None:
        """The stack's Cassandra node again on its data folder, at the same ports (its node.json)."""
        from pelotonctl.dev.cassandra import CassandraError, CassandraNode

        node = CassandraNode.open(self.dir / "cassandra")
        try:
            node.start()
        except CassandraError as exc:
            raise StackError(str(exc)) from None
        component["pid"] = node.pid()
        progress(f"cassandra running again on its data (pid {component['pid']})")

    def _start_zookeeper(self, components: list[dict], progress) -> str:
        """A ZooKeeper for the stages to register in: they share a store from several instances."""
        from pelotonctl.dev.zookeeper import start_zookeeper

        zk_dir = self.dir / "zookeeper"
        shutil.rmtree(zk_dir, ignore_errors=True)  # a new stack starts empty, like the broker
        zk, address = start_zookeeper(zk_dir)
        components.append({"component": "zookeeper", "pid": zk.pid, "address": address,
                           "log": str(zk_dir / "zookeeper.log"), "dir": str(zk_dir)})
        progress(f"zookeeper {address} (pid {zk.pid})")
        return address

    def _write(self, state: dict) -> None:
        write_private(self.state_file, json.dumps(state, indent=2))  # the stack's admin token is in it


def component_keys(component: str, state: dict, host: str = "") -> dict[str, str]:
    """What of the stack's keys a component gets, and no other: the API the private key that signs
    log grants; launch the agents key it checks every host's reports with; an agent the grants'
    public key and its own host's key (a process of simulated hosts: the agents key itself)."""
    if component == "api":
        return {"PELOTON_AGENT_LOGS_KEY": state.get("agent_logs_key", "")}
    if component == "launch":
        return {"PELOTON_AGENT_REPORT_KEY": state.get("agent_report_key", "")}
    if component == "agent" and host == SIM_AGENT:
        return {"PELOTON_AGENT_REPORT_KEY": state.get("agent_report_key", "")}
    if component == "agent":
        return {"PELOTON_AGENT_LOGS_PUBLIC_KEY": state.get("agent_logs_public_key", ""),
                "PELOTON_HOST_KEY": host_key(state["agent_report_key"], host) if state.get("agent_report_key") else ""}
    return {}
