"""The secrets of one cluster, made fresh, as the env file docker/compose.yaml reads (`--env-file`):
each component's Kafka password, the brokers' own and the admin's, the Kafka cluster's id, the
store's and ZooKeeper's credentials, the key launch checks agents' reports with and each agent's
own key derived from it, and the key pair of log grants. Every service of the compose file is
given only the ones it needs (docs/operations/deploying.md, "A cluster in containers")."""

from __future__ import annotations

import secrets
from collections.abc import Sequence

from peloton.auth.grants import new_key_pair
from peloton.auth.host_keys import host_key
from pelotonctl.dev.kafka import new_cluster_id
from pelotonctl.principals import USERS


def host_key_variable(host: str) -> str:
    """HOST_KEY_AGENT_0 for agent-0: the variable that carries one agent's key."""
    return "HOST_KEY_" + "".join(c if c.isalnum() else "_" for c in host.upper())


def kafka_password_variable(user: str) -> str:
    return f"KAFKA_PASSWORD_{user.upper()}"


def cluster_env(agents: Sequence[str]) -> dict[str, str]:
    """Every secret of a new cluster whose agents are `agents` (host ids), by variable."""
    report_key = secrets.token_hex(32)
    logs_private, logs_public = new_key_pair()
    env = {
        "KAFKA_CLUSTER_ID": new_cluster_id(),
        "KAFKA_ADMIN_PASSWORD": secrets.token_hex(16),
        "KAFKA_BROKER_PASSWORD": secrets.token_hex(16),
        **{kafka_password_variable(user): secrets.token_hex(16) for user in USERS},
        "POSTGRES_PASSWORD": secrets.token_hex(16),
        "ZOOKEEPER_AUTH": f"peloton:{secrets.token_hex(16)}",
        "AGENT_REPORT_KEY": report_key,
        **{host_key_variable(host): host_key(report_key, host) for host in agents},
        "AGENT_LOGS_KEY": logs_private,
        "AGENT_LOGS_PUBLIC_KEY": logs_public,
    }
    return env


def env_text(env: dict[str, str]) -> str:
    lines = ["# The secrets of one Peloton cluster, made by `pelotonctl cluster env`: keep this file private",
             "# (mode 0600, never in version control). docker/compose.yaml reads it: podman-compose",
             "# --env-file FILE up. Each service gets only the ones it needs.", ""]
    lines += [f"{name}={value}" for name, value in env.items()]
    return "\n".join(lines) + "\n"
