"""A whole pipeline on network hosts of its own (pelotonctl/dev/netns.py): three Kafka nodes,
PostgreSQL, one instance of each stage and two agents, each in a network namespace with its own
address on one bridge, started with the commands docker/compose.yaml runs (`deploy broker`,
`deploy setup`, `stage run`, `agent run`) and the secrets `deploy env` makes. The operator's
commands run from the machine itself, which reaches every host through the bridge."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

from pelotonctl.deploy.env_file import cluster_env, host_key_variable, kafka_password_variable
from pelotonctl.dev.netns import NetworkHosts
from pelotonctl.dev.postgres import PostgresServer, start_postgres
from pelotonctl.dev.processes import end_group
from pelotonctl.dev.tls import make_certificates
from tests.integration.helpers import wait_until

BROKERS = ("kafka-1", "kafka-2", "kafka-3")
STAGES = ("admit", "entitle", "place", "launch")
AGENTS = ("agent-0", "agent-1")
PELOTONCTL = [sys.executable, "-m", "pelotonctl"]


class NetworkCluster:
    def __init__(self, home: Path, subnet: int, agent_resources: str = "cpu=2,mem_mb=1024,disk_mb=2000") -> None:
        self.home = home
        self.net = NetworkHosts(f"n{uuid.uuid4().hex[:4]}", subnet)
        self.procs: dict[str, subprocess.Popen] = {}
        self.commands: dict[str, tuple[list[str], dict[str, str]]] = {}
        self.store: PostgresServer | None = None
        self.secrets = cluster_env(AGENTS)
        self.agent_resources = agent_resources
        try:
            for name in (*BROKERS, "store", *STAGES, *AGENTS):
                self.net.add(name)
            self.tls = home / "secrets"
            self.ca, self.keystore = make_certificates(self.tls, [self.net.address(b) for b in BROKERS])
            os.chmod(self.ca, 0o644)
        except BaseException:
            self.net.close()
            raise

    # -- what each process is given ---------------------------------------------------------------
    @property
    def bootstrap(self) -> str:
        return ",".join(f"{self.net.address(b)}:9092" for b in BROKERS)

    def base_env(self, name: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PELOTON_")}
        home = self.home / name
        home.mkdir(exist_ok=True)
        return {**env, "PELOTON_HOME": str(home), "PELOTON_KAFKA_BOOTSTRAP": self.bootstrap,
                "PELOTON_KAFKA_CA": str(self.ca), "PELOTON_SIGNED_COMMANDS": "true",
                "PELOTON_HOSTS": f"agent:{len(AGENTS)}:{self.agent_resources}", "PELOTON_METRICS_PORT": "-1"}

    def as_user(self, name: str, user: str) -> dict[str, str]:
        password = self.secrets["KAFKA_ADMIN_PASSWORD"] if user == "admin" else \
            self.secrets[kafka_password_variable(user)]
        return {**self.base_env(name), "PELOTON_KAFKA_USER": user, "PELOTON_KAFKA_PASSWORD": password}

    def log(self, name: str) -> Path:
        return self.home / f"{name}.log"

    # -- starting ---------------------------------------------------------------------------------
    def start(self) -> None:
        voters = ",".join(self.net.address(b) for b in BROKERS)
        for i, broker in enumerate(BROKERS, start=1):
            env = {**self.base_env(broker), "PELOTON_KAFKA_CLUSTER_ID": self.secrets["KAFKA_CLUSTER_ID"],
                   "PELOTON_KAFKA_ADMIN_PASSWORD": self.secrets["KAFKA_ADMIN_PASSWORD"],
                   "PELOTON_KAFKA_BROKER_PASSWORD": self.secrets["KAFKA_BROKER_PASSWORD"],
                   "PELOTON_KAFKA_KEYSTORE": str(self.keystore)}
            self.start_process(broker, [*PELOTONCTL, "deploy", "broker", "--node-id", str(i), "--voters", voters,
                                        "--data", str(self.home / broker / "kafka"), "--heap-mb", "256"], env)
        self.store = start_postgres(5432, host=self.net.address("store"),  # in /tmp: its user reaches it
                                    wrap=tuple(self.net.command("store", [])))
        self.store_url = self.store.create_database()
        setup_env = {**self.as_user("setup", "admin"), "PELOTON_STORE": self.store_url,
                     **{kafka_password_variable(u): p for u, p in self._passwords().items()}}
        done = subprocess.run([*PELOTONCTL, "deploy", "setup", "--tokens", str(self.home / "tokens"), "--wait", "120"],
                              env=setup_env, capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, done.stdout + done.stderr
        self.admin_token = (self.home / "tokens" / "admin-token").read_text().strip()
        for stage in STAGES:
            env = {**self.as_user(stage, stage), "PELOTON_STORE": self.store_url}
            if stage == "place":
                del env["PELOTON_STORE"]
            if stage == "launch":
                env["PELOTON_AGENT_REPORT_KEY"] = self.secrets["AGENT_REPORT_KEY"]
            self.start_process(stage, [*PELOTONCTL, "stage", "run", stage, "--instance-id", f"{stage}-0"], env)
        for agent in AGENTS:
            env = {**self.as_user(agent, "agent"), "PELOTON_HOST_KEY": self.secrets[host_key_variable(agent)]}
            self.start_process(agent, [*PELOTONCTL, "agent", "run", "--name", agent, "--resources",
                                       self.agent_resources], env)

    def _passwords(self) -> dict[str, str]:
        prefix = "KAFKA_PASSWORD_"
        return {k[len(prefix):].lower(): v for k, v in self.secrets.items() if k.startswith(prefix)}

    def start_process(self, name: str, cmd: list[str], env: dict[str, str]) -> None:
        self.commands[name] = (cmd, env)
        self.procs[name] = self.net.spawn(name, cmd, env, self.log(name))

    def restart(self, name: str) -> None:
        """The process started again with its own command, after it was killed or stopped."""
        cmd, env = self.commands[name]
        self.procs[name] = self.net.spawn(name, cmd, env, self.log(name))

    # -- the operator -----------------------------------------------------------------------------
    def ctl(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        """pelotonctl from the machine itself, as an operator: Kafka's admin, with the admin token."""
        env = {**self.as_user("operator", "admin"), "PELOTON_STORE": self.store_url,
               "PELOTON_TOKEN": self.admin_token, "PELOTON_COMMAND_TOKEN": self.admin_token}
        return subprocess.run([*PELOTONCTL, *args], env=env, capture_output=True, text=True, timeout=timeout)

    def up_hosts(self) -> set[str]:
        done = self.ctl("host", "list", "--json")
        if done.returncode:
            return set()
        return {h["host_id"] for h in json.loads(done.stdout)["hosts"] if h["state"] == "UP"}

    def wait_for(self, what: str, check, timeout: float):
        def ended() -> str:
            dead = {n: p.returncode for n, p in self.procs.items() if p.poll() is not None}
            return f"; processes ended: {dead}; logs in {self.home}"
        return wait_until(what, check, timeout, 1.0, ended)

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                end_group(proc.pid, 15, proc, timeout=20)
        if self.store is not None:
            self.store.stop()
        self.net.close()


def runs_recorded(cluster: NetworkCluster, job: str) -> dict[int, list[tuple[str, float, float, bool]]]:
    """Instance -> its runs as their hosts recorded them: (host, first tick, last line, ended)."""
    found: dict[int, list[tuple[str, float, float, bool]]] = {}
    for agent in AGENTS:
        for stdout in (cluster.home / agent).glob(f"**/{job}-*/stdout"):
            stamps = [float(m) for m in re.findall(r"^(?:tick|end) ([0-9.]+)$", stdout.read_text(), re.M)]
            if not stamps:
                continue
            instance = int(stdout.parent.name[len(job) + 1:].split("-")[0])
            found.setdefault(instance, []).append((agent, stamps[0], stamps[-1], "end " in stdout.read_text()))
    return found
