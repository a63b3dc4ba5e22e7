"""pelotonctl deploy's pure parts: a new cluster's secrets, and one Kafka node's properties."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from peloton.auth.host_keys import host_key
from pelotonctl.deploy.broker import BrokerNode
from pelotonctl.deploy.env_file import cluster_env, host_key_variable


def test_each_agent_gets_the_key_launch_derives_for_it_and_secrets_are_fresh() -> None:
    one, two = cluster_env(["agent-0", "agent-1"]), cluster_env(["agent-0"])
    assert one["HOST_KEY_AGENT_0"] == host_key(one["AGENT_REPORT_KEY"], "agent-0")
    assert host_key_variable("rack-7.host") == "HOST_KEY_RACK_7_HOST"
    assert one["KAFKA_ADMIN_PASSWORD"] != two["KAFKA_ADMIN_PASSWORD"] and "HOST_KEY_AGENT_1" not in two
    assert len({v for k, v in one.items() if k.startswith("KAFKA_PASSWORD_")}) == 8  # one per component


def test_deploy_env_writes_a_private_file_once(tmp_path: Path) -> None:
    target = tmp_path / "peloton.env"
    ctl = [sys.executable, "-m", "pelotonctl", "deploy", "env", "--agents", "h1", "--output", str(target)]
    assert subprocess.run(ctl, capture_output=True).returncode == 0
    assert target.stat().st_mode & 0o777 == 0o600 and "HOST_KEY_H1=" in target.read_text()
    again = subprocess.run(ctl, capture_output=True, text=True)
    assert again.returncode == 2 and "a cluster's secrets are made once" in again.stderr


def test_a_node_is_reached_by_its_name_and_listens_on_every_address(tmp_path: Path) -> None:
    keystore = tmp_path / "broker.pem"
    keystore.write_text("PEM")
    node = BrokerNode(2, ("kafka-1", "kafka-2", "kafka-3"), tmp_path, "cid", "adminpw", "brokerpw", keystore)
    assert node.problems() == []
    props = dict(line.split("=", 1) for line in node.properties().splitlines() if "=" in line)
    assert props["node.id"] == "2"
    assert props["controller.quorum.voters"] == "1@kafka-1:9094,2@kafka-2:9094,3@kafka-3:9094"
    assert props["listeners"] == "CLIENT://0.0.0.0:9092,INTERNAL://0.0.0.0:9093,CONTROLLER://0.0.0.0:9094"
    assert props["advertised.listeners"] == "CLIENT://kafka-2:9092,INTERNAL://kafka-2:9093"
    assert props["default.replication.factor"] == "3" and props["allow.everyone.if.no.acl.found"] == "false"
    missing = BrokerNode(4, ("kafka-1",), tmp_path, "", "", "pw", tmp_path / "none.pem").problems()
    assert missing == ["--node-id 4: the voters name nodes 1 to 1", "PELOTON_KAFKA_CLUSTER_ID is not set",
                       "PELOTON_KAFKA_ADMIN_PASSWORD is not set",
                       f"PELOTON_KAFKA_KEYSTORE: no file {tmp_path / 'none.pem'} (`pelotonctl deploy certificates` "
                       "makes one)"]
