"""What a user and an operator see when the store or the broker is away: every command answers in
seconds with one line naming what is away and exit 5; stages stop on SIGTERM in seconds while they
wait; with the store back, the same commands work."""

from __future__ import annotations

import signal
import time

import pytest

from pelotonctl.dev.postgres import start_postgres
from pelotonctl.dev.stack import free_port

pytestmark = pytest.mark.integration

JOB = """
name: answers
instancecount: 2
defaultconfig:
  resource: {cpulimit: 0.5, memlimitmb: 32, disklimitmb: 1}
  command: {shell: true, value: 'true'}
"""


def one_line_exit_5(result, names: str) -> None:
    assert result.returncode == 5, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and names in lines[0] and "Traceback" not in result.stderr, result.stderr


def test_with_the_store_stopped_commands_answer_in_one_line_and_work_when_it_is_back(pipeline_factory,
                                                                                     tmp_path) -> None:
    server = start_postgres(free_port())
    try:
        p = pipeline_factory(hosts="sim:2:cpu=4,mem_mb=4096,disk_mb=1000", store=server.create_database(),
                             sim_task_seconds=0.2)
        p.start_all()
        job = p.submit(JOB)
        assert p.wait_job(job, timeout=60) == "SUCCEEDED"
        config = tmp_path / "job.yaml"
        config.write_text(JOB)
        p.store.close()
        server.stop(keep=True)
        for args in (["job", "status", job], ["job", "create", "/test", str(config)]):
            started = time.monotonic()
            result = p.ctl(*args, timeout=30)
            took = time.monotonic() - started
            one_line_exit_5(result, "the store at postgresql://")
            assert took < 10, f"{args}: {took:.1f}s"
        # every stage waits for the store; SIGTERM still ends each in seconds
        entitle = p.procs["entitle-0"]
        time.sleep(2)
        started = time.monotonic()
        entitle.send_signal(signal.SIGTERM)
        entitle.wait(15)
        assert time.monotonic() - started < 8, f"entitle took {time.monotonic() - started:.1f}s to stop"
        server.start()
        p.start("entitle", instance="entitle-0")
        assert p.ctl("job", "status", job).returncode == 0
        created = p.ctl("job", "create", "/test", str(config))
        assert created.returncode == 0, created.stderr
        new_job = created.stdout.split()[1] if created.stdout.startswith("Job ") else ""  # Job <id> created
        assert new_job, created.stdout
    finally:
        server.stop()


@pytest.mark.long
def test_with_the_broker_away_commands_answer_in_one_line(pipeline_factory, tmp_path) -> None:
    p = pipeline_factory(hosts="sim:2:cpu=4,mem_mb=4096,disk_mb=1000")
    config = tmp_path / "job.yaml"
    config.write_text(JOB)
    # Nothing listens there; a command waits at most its flush timeout for the broker, and the
    # bound leaves 10 s past it for start-up on a loaded machine (job create took 15.5 s with
    # the default 10 s, in a full run on a slow one).
    away = {"PELOTON_KAFKA_BOOTSTRAP": f"127.0.0.1:{free_port()}", "PELOTON_FLUSH_TIMEOUT_S": "5"}
    for args in (["job", "create", "/test", str(config)], ["host", "list"], ["lag"]):
        started = time.monotonic()
        result = p.ctl(*args, timeout=60, extra_env=away)
        one_line_exit_5(result, "broker")
        assert time.monotonic() - started < 15, f"{args}: {time.monotonic() - started:.1f}s"
