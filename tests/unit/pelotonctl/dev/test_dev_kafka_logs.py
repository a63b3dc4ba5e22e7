"""What a cluster's logs say about an election: when a node was fenced, which node was the active
controller, how long transaction markers were refused (KafkaCluster.fenced_at, active_controller,
refused_markers), read from Kafka's own log lines."""

import datetime
from pathlib import Path

from pytest import approx

from pelotonctl.dev.kafka import KafkaCluster, Node

LOGS = {
    1: ["[2026-11-29 01:14:00,100] INFO [QuorumController id=1] Becoming the active controller at epoch 1, next "
        "write offset 1. (org.apache.kafka.controller.QuorumController)"],
    2: ["[2026-11-29 01:14:08,932] INFO [QuorumController id=2] Becoming the active controller at epoch 2, next "
        "write offset 57. (org.apache.kafka.controller.QuorumController)",
        "[2026-11-29 01:14:12,940] INFO [QuorumController id=2] Fencing broker 1 at epoch 8 because its session "
        "has timed out. (org.apache.kafka.controller.ReplicationControlManager)",
        "[2026-11-29 01:15:02,603] INFO [QuorumController id=2] Fencing broker 3 at epoch 40 because its session "
        "has timed out. (org.apache.kafka.controller.ReplicationControlManager)"],
    3: ["[2026-11-29 01:14:05,000] WARN something else (kafka.server.KafkaServer)",
        "[2026-11-29 01:14:13,280] INFO [Transaction Marker Request Completion Handler 3]: Sending t0.launch-0's "
        "transaction marker for partition t0.host-state-0 has failed with error org.apache.kafka.common.errors."
        "NotLeaderOrFollowerException, retrying with current coordinator epoch 0 (kafka.coordinator.transaction."
        "TransactionMarkerRequestCompletionHandler)",
        "[2026-11-29 01:14:16,399] INFO [Transaction Marker Request Completion Handler 3]: Sending t0.launch-0's "
        "transaction marker for partition t0.host-state-0 has failed with error org.apache.kafka.common.errors."
        "NotLeaderOrFollowerException, retrying with current coordinator epoch 0 (kafka.coordinator.transaction."
        "TransactionMarkerRequestCompletionHandler)",
        # a node's own log is not asked about itself (it was the one that died)
        "[2026-11-29 01:16:00,000] INFO [QuorumController id=3] Fencing broker 3 at epoch 99 because its session "
        "has timed out. (org.apache.kafka.controller.ReplicationControlManager)"],
}


def at(text: str) -> float:
    return datetime.datetime.strptime(text, "%Y-%m-%d %H:%M:%S").timestamp()


def cluster(tmp_path: Path) -> KafkaCluster:
    nodes = []
    for node_id, lines in LOGS.items():
        node = Node(node_id, 0, 0, tmp_path / f"node-{node_id}")
        node.dir.mkdir()
        node.log.write_text("\n".join(lines) + "\n")
        nodes.append(node)
    nodes.append(Node(4, 0, 0, tmp_path / "node-4"))  # no log yet
    return KafkaCluster(tmp_path, nodes, "id")


def test_the_active_controller_is_the_node_that_last_became_it_at_that_moment(tmp_path: Path) -> None:
    c = cluster(tmp_path)
    assert c.active_controller(at("2026-11-29 01:13:59")) is None
    assert c.active_controller(at("2026-11-29 01:14:05")) == 1
    assert c.active_controller(at("2026-11-29 01:14:30")) == 2


def test_a_fencing_is_found_in_another_nodes_log_from_a_second_before_the_moment_asked_on(tmp_path: Path) -> None:
    c = cluster(tmp_path)
    assert c.fenced_at(1, at("2026-11-29 01:14:10")) == approx(at("2026-11-29 01:14:12") + 0.94)
    assert c.fenced_at(1, at("2026-11-29 01:14:13")) == approx(at("2026-11-29 01:14:12") + 0.94)  # within the second
    assert c.fenced_at(1, at("2026-11-29 01:14:20")) is None  # an earlier fencing is not this one
    assert c.fenced_at(3, at("2026-11-29 01:15:00")) == approx(at("2026-11-29 01:15:02") + 0.603)
    assert c.fenced_at(3, at("2026-11-29 01:15:30")) is None  # only node 3's own log says so


def test_waiting_for_a_fencing_returns_it_once_logged_and_none_at_the_timeout(tmp_path: Path) -> None:
    c = cluster(tmp_path)
    assert c.wait_fenced(1, at("2026-11-29 01:14:10"), timeout=5) == approx(at("2026-11-29 01:14:12") + 0.94)
    assert c.wait_fenced(1, at("2026-11-29 01:20:00"), timeout=0.3) is None


def test_refused_markers_are_counted_with_the_seconds_from_the_first_to_the_last(tmp_path: Path) -> None:
    c = cluster(tmp_path)
    assert c.refused_markers(at("2026-11-29 01:14:10")) == (2, approx(3.119))
    assert c.refused_markers(at("2026-11-29 01:14:14")) == (1, 0.0)
    assert c.refused_markers(at("2026-11-29 01:14:20")) == (0, 0.0)
