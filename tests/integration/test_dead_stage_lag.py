"""A stage whose only instance dies, as operators see it (issue 63): the API's lag sampler reads the
group's offsets from the brokers, so `pelotonctl lag` says STALL or STOP within 10 s of a SIGKILL,
and the group's lag series on the API's /metrics goes on growing instead of vanishing with the
instance's own kafka_consumergroup_lag."""

from __future__ import annotations

import json
import re
import signal
import time
import urllib.request

import pytest

from peloton.auth.tokens import issue
from peloton.config import Settings
from pelotonctl.dev.stack import free_port, start_api, wait_for_port
from tests.integration.helpers import sleepers

pytestmark = pytest.mark.integration

TOLD_WITHIN_S = 10.0


def serve_api(p) -> str:
    """An API process beside the pipeline's stages (its lag sampler starts with it); its address."""
    port = free_port()
    p.procs["api-0"] = start_api(p.settings, p.log("api-0"), port, extra_env=p.as_user("api"))
    wait_for_port("127.0.0.1", port, 60)
    return f"http://127.0.0.1:{port}"


def group_lag(api: str, group: str) -> int:
    """The group's peloton_group_lag summed over its partitions, scraped from the API's /metrics
    (-1 when it has no such series)."""
    with urllib.request.urlopen(f"{api}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    values = [float(v) for v in re.findall(rf'^peloton_group_lag\{{[^}}]*group="{re.escape(group)}"[^}}]*\}} (\S+)$',
                                           text, re.MULTILINE)]
    return int(sum(values)) if values else -1


@pytest.mark.alone  # its bound is a time
def test_the_only_launch_instance_killed_is_stall_or_stop_within_10_s_and_its_lag_series_grows(
        pipeline_factory) -> None:
    # Production's session timeout (the dev stack's too): the coordinator lists the dead member for
    # 20 s, so STOP cannot come from it within 10 s; the sampler must tell by the position alone.
    session_s = Settings().session_timeout_ms / 1000
    p = pipeline_factory(hosts="agent:2:cpu=4,mem_mb=4096,disk_mb=10000", session_timeout_ms=int(session_s * 1000))
    p.start_all()
    api = serve_api(p)
    token, row = issue("ops", ["ops"], False, now_ms=1)
    p.store.add_token(row)
    through_api = {"PELOTON_API_URL": api, "PELOTON_TOKEN": token}
    launch = f"{p.settings.topic_prefix}peloton.launch"

    def launch_lag() -> dict:
        done = p.ctl("lag", "--json", "--group", "launch", extra_env=through_api)
        assert done.returncode == 0, done.stderr
        answer = json.loads(done.stdout)
        assert answer["sampler"]["every_s"] <= 2  # the API's sampler, not a sample of this process
        return answer["groups"][0]

    job = p.submit(sleepers(4, 300))
    p.wait_for("4 tasks running", lambda: p.counts(job).get("RUNNING") == 4, 90)
    p.wait_for("launch OK, its one member listed",
               lambda: (g := launch_lag())["status"] == "OK" and g["member_count"] == 1, 30)

    # The agents go on reporting their running tasks (every second) to launch's group, and place
    # goes on placing a new job's tasks on launch's input: its lag grows with nobody to read it.
    p.procs["launch-0"].send_signal(signal.SIGKILL)
    killed = time.time()
    p.procs["launch-0"].wait(10)
    p.submit(sleepers(2, 300))
    seen = []
    while (g := launch_lag())["status"] not in ("STALL", "STOP"):
        seen.append((round(time.time() - killed, 1), g["status"], g["total_lag"]))
        assert time.time() - killed < TOLD_WITHIN_S, f"launch still {g['status']} after {TOLD_WITHIN_S}s: {seen}"
    told_s = time.time() - killed  # `pelotonctl lag` printed it, its start included
    said_s = g["status_since_ms"] / 1000 - killed  # the sampler's own time to say it
    print(f"launch {g['status']} in {told_s:.1f}s by `pelotonctl lag` (the sampler said it at {said_s:.1f}s): "
          f"{g['detail']}")
    assert told_s < TOLD_WITHIN_S and g["total_lag"] > 0
    if g["status"] == "STALL":  # the member the coordinator still lists is what STALL tells past
        assert g["member_count"] == 1 and g["stalled_seconds"] >= 4

    # Two scrapes of the API's /metrics: the group's series is there and grows.
    first = group_lag(api, launch)
    time.sleep(3)
    second = group_lag(api, launch)
    assert 0 < first < second, (first, second)
    print(f"peloton_group_lag of launch: {first} then {second} three seconds later")

    # Once the session times out the coordinator drops the member: STOP, and it stays so.
    p.wait_for("launch STOP once the dead member's session timed out",
               lambda: (g := launch_lag())["status"] == "STOP" and g["member_count"] == 0, session_s + 15)
    print(f"launch STOP {time.time() - killed:.1f}s after the kill (session timeout {session_s:g}s)")
