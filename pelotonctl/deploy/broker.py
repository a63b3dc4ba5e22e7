"""One Kafka node of a cluster whose nodes each have a machine (or a container, or a network
namespace) of their own: KRaft, combined broker and controller, SASL for clients over TLS and
ACLs on every request, as the dev stack's secure cluster (pelotonctl/dev/kafka.py, whose
server.properties it writes). Its log is formatted on the first start, with the cluster's id and
the admin user's SCRAM credential; then Kafka takes this process's place.

Every node listens on fixed ports of its own address: clients on 9092, the other brokers on 9093,
the controllers on 9094. The nodes are named in order (`--voters kafka-1,kafka-2,kafka-3`: node 1
is kafka-1), and each is reached by its name."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from peloton.private import private_dir, write_private
from pelotonctl.dev.kafka import (
    ADMIN,
    COLLECTOR,
    JVM_OPTIONS,
    LOG4J,
    Access,
    KafkaError,
    Node,
    java_command,
    node_properties,
)

CLIENT_PORT, INTERNAL_PORT, CONTROLLER_PORT = 9092, 9093, 9094
# What a node reads of its environment: its cluster's secrets (docker/peloton.env names them).
VARIABLES = ("PELOTON_KAFKA_CLUSTER_ID", "PELOTON_KAFKA_ADMIN_PASSWORD", "PELOTON_KAFKA_BROKER_PASSWORD",
             "PELOTON_KAFKA_KEYSTORE")


def from_env(node_id: int, voters: tuple[str, ...], data: Path) -> BrokerNode:
    env = os.environ.get
    return BrokerNode(node_id, voters, data, env("PELOTON_KAFKA_CLUSTER_ID", ""),
                      env("PELOTON_KAFKA_ADMIN_PASSWORD", ""), env("PELOTON_KAFKA_BROKER_PASSWORD", ""),
                      Path(env("PELOTON_KAFKA_KEYSTORE", "/secrets/broker.pem")))


@dataclass(frozen=True)
class BrokerNode:
    node_id: int
    voters: tuple[str, ...]  # every node's host name, node 1 first
    data: Path  # its log and its server.properties
    cluster_id: str
    admin_password: str
    broker_password: str
    keystore: Path  # PEM: its key and certificate (for every name in voters), then the CA's

    @property
    def host(self) -> str:
        return self.voters[self.node_id - 1]

    def problems(self) -> list[str]:
        """What keeps this node from starting, each said with the variable or option to set."""
        out = []
        if not 1 <= self.node_id <= len(self.voters):
            out.append(f"--node-id {self.node_id}: the voters name nodes 1 to {len(self.voters)}")
        for value, name in ((self.cluster_id, "PELOTON_KAFKA_CLUSTER_ID"),
                            (self.admin_password, "PELOTON_KAFKA_ADMIN_PASSWORD"),
                            (self.broker_password, "PELOTON_KAFKA_BROKER_PASSWORD")):
            if not value:
                out.append(f"{name} is not set")
        if not self.keystore.is_file():
            out.append(f"PELOTON_KAFKA_KEYSTORE: no file {self.keystore} (`pelotonctl deploy certificates` makes one)")
        return out

    def properties(self) -> str:
        node = Node(self.node_id, CLIENT_PORT, CONTROLLER_PORT, self.data, internal_port=INTERNAL_PORT,
                    host=self.host, bind="0.0.0.0")
        access = Access(self.admin_password, self.broker_password, ca=Path(), keystore=self.keystore)
        voters = ",".join(f"{i}@{host}:{CONTROLLER_PORT}" for i, host in enumerate(self.voters, start=1))
        return node_properties(node, voters, len(self.voters), access)


def prepare(node: BrokerNode, heap_mb: int = 512) -> list[str]:
    """Write the node's server.properties and format its log if it has none yet (a node started
    again keeps its log). The java command that runs the node."""
    problems = node.problems()
    if problems:
        raise KafkaError("; ".join(problems))
    private_dir(node.data)
    config = node.data / "server.properties"
    write_private(config, node.properties())
    (node.data / "log4j2.properties").write_text(LOG4J)
    if not (node.data / "data" / "meta.properties").exists():
        done = subprocess.run(java_command(
            "kafka.tools.StorageTool", "format", "-t", node.cluster_id, "-c", str(config),
            "--add-scram", f"SCRAM-SHA-512=[name={ADMIN},password={node.admin_password}]", heap_mb=128),
            capture_output=True, text=True)
        if done.returncode != 0:
            raise KafkaError(f"formatting node {node.node_id}'s log failed: {(done.stdout + done.stderr)[-2000:]}")
    logging = f"-Dlog4j2.configurationFile={node.data / 'log4j2.properties'}"
    return java_command("kafka.Kafka", str(config), heap_mb=heap_mb,
                        options=[*COLLECTOR, *JVM_OPTIONS, logging, f"-Dkafka.logs.dir={node.data}"])
