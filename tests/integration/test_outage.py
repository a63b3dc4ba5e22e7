"""The broker goes away for 90 s while the stages run, then comes back empty (Tansu keeps nothing
across a restart; Apache Kafka would keep its log): no stage exits, the stages make the topics
again from topics.yaml, send again from the store what was lost, and every job finishes."""

from __future__ import annotations

import os
import time

import pytest
from confluent_kafka.admin import AdminClient

from peloton.devstack import free_port, start_broker
from peloton.topics import Catalogue
from tests.integration.conftest import Pipeline

pytestmark = pytest.mark.integration

# The outage the issue asks for; PELOTON_TEST_OUTAGE_S shortens it for a quick local run.
OUTAGE_S = float(os.environ.get("PELOTON_TEST_OUTAGE_S", "90"))

JOB = """
name: {name}
instancecount: {count}
defaultconfig:
  resource: {{cpulimit: 1, memlimitmb: 16, disklimitmb: 1}}
  command: {{shell: true, value: 'true'}}
"""


def all_alive(p: Pipeline) -> None:
    for instance, proc in p.procs.items():
        assert proc.poll() is None, f"{instance} exited with {proc.returncode}; see {p.log(instance)}"


def test_stages_outlive_a_broker_outage_and_recover_what_a_restart_lost(tmp_path) -> None:
    port = free_port()
    broker = start_broker(port, tmp_path / "broker.log")
    p = Pipeline(f"127.0.0.1:{port}", tmp_path / "p", "sim:4:cpu=4,mem_mb=65536,disk_mb=100000",
                 sim_task_seconds=2.0, retry_max_s=2.0, topic_check_s=2.0, flush_timeout_s=5.0)
    try:
        p.start_all()
        before = p.submit(JOB.format(name="before", count=48))  # 16 at a time: three waves of 2 s
        deadline = time.monotonic() + 60
        while p.store.task_state_counts([before])[before].get("SUCCEEDED", 0) < 8:
            assert time.monotonic() < deadline, "the first job made no progress"
            time.sleep(0.1)
        broker.kill()
        broker.wait()
        down_at = time.monotonic()
        while time.monotonic() - down_at < OUTAGE_S:
            all_alive(p)  # waiting for the broker, not exiting
            time.sleep(1)
        done_in_outage = p.store.task_state_counts([before])[before].get("SUCCEEDED", 0)
        assert done_in_outage < 48, "the job finished before the outage; the test would prove little"

        broker = start_broker(port, tmp_path / "broker-again.log")  # same address, nothing in it
        names = {t.name for t in Catalogue(p.settings.topic_prefix)}
        admin = AdminClient({"bootstrap.servers": p.settings.bootstrap})
        deadline = time.monotonic() + 60
        while not names <= set(admin.list_topics(timeout=5).topics):
            assert time.monotonic() < deadline, "the stages never made the topics again"
            time.sleep(0.5)
        for name, md in admin.list_topics(timeout=5).topics.items():
            spec = Catalogue(p.settings.topic_prefix).by_name.get(name)
            if spec is not None:
                assert len(md.partitions) == spec.partitions, f"{name} was made with the wrong partition count"

        after = p.submit(JOB.format(name="after", count=8))
        assert p.wait_job(before, timeout=180) == "SUCCEEDED"
        assert p.wait_job(after, timeout=120) == "SUCCEEDED"
        for job_id, count in ((before, 48), (after, 8)):
            runs = p.store.launch_counts(job_id)
            assert len(runs) == count and set(runs.values()) == {1}, f"{job_id}: {runs}"
        all_alive(p)
        recovered = [i for i in p.procs if "sending again from the store" in p.log(i).read_text()]
        assert recovered, "no stage noticed that the broker lost its log"
        print(f"{done_in_outage} of 48 done when the broker came back; recovered by {recovered}")
    finally:
        p.stop()
        broker.kill()
        broker.wait()
