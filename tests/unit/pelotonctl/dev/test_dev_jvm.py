"""The dev stack's JVMs: light or full, and the cluster id made without a JVM."""

from __future__ import annotations

import base64
import json

import pytest

from pelotonctl.dev import cassandra, kafka
from pelotonctl.dev.jvm import LIGHT, jvm_options


def test_a_light_jvm_swaps_the_collector_for_c1_and_the_serial_one_and_keeps_the_rest() -> None:
    assert jvm_options("light", ["-XX:+UseG1GC"], ["-Xss256k"]) == [*LIGHT, "-Xss256k"]
    assert jvm_options("full", ["-XX:+UseG1GC"], ["-Xss256k"]) == ["-XX:+UseG1GC", "-Xss256k"]
    with pytest.raises(ValueError, match="light or full"):
        jvm_options("fast", [], [])


def test_a_cluster_id_is_what_kafkas_random_uuid_prints() -> None:
    ids = {kafka.new_cluster_id() for _ in range(2000)}
    assert len(ids) == 2000
    for text in ids:
        assert len(text) == 22 and not text.startswith("-")
        assert len(base64.urlsafe_b64decode(text + "==")) == 16


def test_a_nodes_jvm_is_kept_with_its_layout_for_every_later_start(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(cassandra, "fetch", lambda name: tmp_path)
    (tmp_path / "jamm-0.4.0.jar").touch()
    monkeypatch.setattr(cassandra.shutil, "which", lambda name: "/usr/bin/java")
    cassandra.CassandraNode.create(tmp_path / "full", jvm="full")
    assert json.loads((tmp_path / "full" / "node.json").read_text())["jvm"] == "full"
    again = cassandra.CassandraNode.open(tmp_path / "full").command()
    assert "-XX:+UseG1GC" in again and "-XX:TieredStopAtLevel=1" not in again
    light = cassandra.CassandraNode.create(tmp_path / "light").command()
    assert "-XX:+UseG1GC" not in light and all(o in light for o in LIGHT)
    with pytest.raises(ValueError):
        cassandra.CassandraNode.create(tmp_path / "bad", jvm="heavy")


def test_a_kafka_cluster_starts_its_nodes_with_the_jvm_it_was_made_with(tmp_path, monkeypatch) -> None:
    started = []

    class Popen:
        pid = 4242

        def __init__(self, cmd, **kwargs):
            started.append(cmd)

    monkeypatch.setattr(kafka.subprocess, "Popen", Popen)
    monkeypatch.setattr(kafka, "ensure_jars", lambda: tmp_path)
    monkeypatch.setattr(kafka.shutil, "which", lambda name: "/usr/bin/java")
    for jvm in ("full", None):
        folder = tmp_path / f"kafka-{jvm}"
        (folder / "node-1").mkdir(parents=True)
        layout = {"cluster_id": kafka.new_cluster_id(), "nodes": [{"node_id": 1, "port": 1, "controller_port": 2}]}
        (folder / "cluster.json").write_text(json.dumps({**layout, **({"jvm": jvm} if jvm else {})}))
        kafka.KafkaCluster.open(folder).launch(1)
    full, light = started
    assert "-XX:+UseG1GC" in full and "-XX:TieredStopAtLevel=1" not in full
    assert "-XX:+UseG1GC" not in light and all(o in light for o in LIGHT)  # a cluster.json from before: light
