"""docker/compose.yaml against the code it runs: every PELOTON_* variable it sets is one a process
reads, every secret it takes from the env file is one `pelotonctl deploy env` makes, every
command is one pelotonctl has, and each process is given what it cannot run without, and no
secret it has no use for."""

from __future__ import annotations

import dataclasses
import re

import pytest
import yaml
from typer.main import get_command

from peloton.config import REPO_ROOT, Settings, _env_name
from pelotonctl.cli.main import app
from pelotonctl.deploy.broker import VARIABLES as BROKER_VARIABLES
from pelotonctl.deploy.env_file import cluster_env, host_key_variable, kafka_password_variable
from pelotonctl.principals import USERS

COMPOSE = REPO_ROOT / "docker" / "compose.yaml"
SETTINGS = {_env_name(f.name) for f in dataclasses.fields(Settings)}
# Read by the image's entry point into the variable without the suffix (docker/bin/peloton-entrypoint).
FILE_VARIABLES = {"PELOTON_COMMAND_TOKEN_FILE", "PELOTON_TOKEN_FILE"}
SERVERS = {"postgres", "zookeeper", "prometheus"}  # docker/bin's, not pelotonctl's


@pytest.fixture(scope="module")
def services() -> dict[str, dict]:
    return yaml.safe_load(COMPOSE.read_text())["services"]


def test_every_peloton_variable_it_sets_is_one_a_process_reads(services) -> None:
    known = SETTINGS | set(BROKER_VARIABLES) | FILE_VARIABLES
    for name, service in services.items():
        unknown = sorted(v for v in (service.get("environment") or {}) if v.startswith("PELOTON_") and v not in known)
        assert unknown == [], f"{name} sets variables nothing reads: {unknown}"


def test_every_secret_it_takes_is_one_deploy_env_makes() -> None:
    made = set(cluster_env(["agent-0", "agent-1"]))
    text = COMPOSE.read_text()
    taken = set(re.findall(r"\$\{([A-Z0-9_]+)\}", text))  # no default: the env file must have it
    with_default = set(re.findall(r"\$\{([A-Z0-9_]+):-", text))
    assert taken <= made, f"taken but never made: {sorted(taken - made)}"
    assert with_default.isdisjoint(made)
    assert made - taken == set(), f"made but given to no service: {sorted(made - taken)}"


def test_every_command_is_one_pelotonctl_has(services) -> None:
    root = get_command(app)
    for name, service in services.items():
        command = service.get("command")
        if command is None or "image" in service and "grafana" in service["image"]:
            continue
        if command[0] in SERVERS:
            assert (REPO_ROOT / "docker" / "bin" / command[0]).exists()
            continue
        group = root
        for word in command:
            if word.startswith("-") or not hasattr(group, "commands"):
                break
            assert word in group.commands, f"{name}: `pelotonctl {' '.join(command)}`: no command {word!r}"
            group = group.commands[word]


def test_each_process_has_what_it_needs_and_no_secret_it_has_no_use_for(services) -> None:
    def env(name: str) -> dict:
        return services[name].get("environment") or {}

    kafka = {"PELOTON_KAFKA_BOOTSTRAP", "PELOTON_KAFKA_CA", "PELOTON_KAFKA_USER", "PELOTON_KAFKA_PASSWORD"}
    for name in ("admit-0", "entitle-0", "place-0", "launch-0", "agent-0", "api", "dashboard", "setup"):
        assert kafka <= set(env(name)), name
    for name in ("admit-0", "entitle-0", "launch-0", "api", "setup"):
        assert "PELOTON_STORE" in env(name), f"{name} needs the store"
    users = {name: env(name)["PELOTON_KAFKA_USER"] for name in services if "PELOTON_KAFKA_USER" in env(name)}
    assert users["setup"] == "admin" and users["admit-0"] == "admit" and users["agent-1"] == "agent"
    for name, user in users.items():
        expected = "KAFKA_ADMIN_PASSWORD" if user == "admin" else kafka_password_variable(user)
        assert env(name)["PELOTON_KAFKA_PASSWORD"] == "${" + expected + "}", name
    assert set(users.values()) - {"admin"} <= set(USERS)
    # The cluster's report key only where reports are checked; each agent its own key; the logs'
    # private key only in the API.
    holders = {name for name in services if "PELOTON_AGENT_REPORT_KEY" in env(name)}
    assert holders == {"launch-0", "launch-1"}
    for agent in ("agent-0", "agent-1"):
        assert env(agent)["PELOTON_HOST_KEY"] == "${" + host_key_variable(agent) + "}"
        assert "PELOTON_STORE" not in env(agent) and "PELOTON_AGENT_LOGS_KEY" not in env(agent)
    assert {name for name in services if "PELOTON_AGENT_LOGS_KEY" in env(name)} == {"api"}
    assert {name for name in services if "PELOTON_KAFKA_ADMIN_PASSWORD" in env(name) or
            env(name).get("PELOTON_KAFKA_USER") == "admin"} == {"kafka-1", "kafka-2", "kafka-3", "setup"}


def test_two_instances_of_each_stage_three_brokers_two_agents(services) -> None:
    commands = [" ".join(s.get("command") or []) for s in services.values()]
    for stage in ("admit", "entitle", "place", "launch"):
        assert sum(c.startswith(f"stage run {stage} ") for c in commands) == 2, stage
    assert sum(c.startswith("deploy broker ") for c in commands) == 3
    assert sum(c.startswith("agent run ") for c in commands) == 2
    assert {"api", "dashboard", "prometheus", "grafana", "postgres", "zookeeper"} <= set(services)
