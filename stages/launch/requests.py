"""What a launch stage hands its drivers: a LaunchRequest made from a placed task's TaskLaunchSpec,
and the health a TASK_RUNNING carries when the driver said none."""

from __future__ import annotations

from peloton.host.driver import LaunchRequest
from peloton.model.health import DISABLED, HEALTH_UNKNOWN
from peloton.model.mesos import MesosState
from peloton.model.resources import Resources
from peloton.model.volumes import mount_of


def running_health(state: str, spec: dict) -> str:
    """What a TASK_RUNNING that says nothing of health means: no check (DISABLED), or none answered yet."""
    if state != MesosState.TASK_RUNNING:
        return ""
    return HEALTH_UNKNOWN if spec.get("health_check_json") else DISABLED


# The environment and arguments of the last spec without port variables, as a LaunchRequest holds
# them: a job's alike tasks read from one bundle share those values (avrocodec's shared spans,
# read-only), so their tuples are made once.
_LAST_COMMAND: list = [(None, None, (), ())]


def launch_request(t: dict, host_id: str) -> LaunchRequest:
    env, args, ports = t["environment"], t["arguments"], t.get("ports")
    last = _LAST_COMMAND[0]
    if ports or env is not last[0] or args is not last[1]:
        environment = dict(env)
        assigned = t.get("assigned_ports") or {}
        for port in ports or []:  # each port in the variable its config names
            if port["env_name"] and port["name"] in assigned:
                environment[port["env_name"]] = str(assigned[port["name"]])
        last = (env, args, tuple(environment.items()), tuple(args))
        if not ports:
            _LAST_COMMAND[0] = last
    return LaunchRequest(
        task_id=t["task_id"], job_id=t["job_id"], instance=t["instance"], run_id=t["run_id"], host_id=host_id,
        command=t["command"], shell=t["shell"], arguments=last[3],
        environment=last[2], resources=Resources.of_read(t["resources"]),
        kill_grace_seconds=t["kill_grace_seconds"], user=t.get("user", ""), image=t.get("image", ""),
        health_check=t.get("health_check_json"),
        volume=mount_of(t.get("volume")), revocable=bool(t.get("revocable")),
    )


def away_from_volumes(accepted: list[tuple[dict, str]]) -> tuple[list[tuple[dict, str]], list[tuple[dict, str, str]]]:
    """The placed runs that may launch where they were placed, and those refused: a run whose
    instance's volume is on another host (its job manager pins it there; a placement made before
    the pin reached it must not make a second volume)."""
    ok: list[tuple[dict, str]] = []
    refused: list[tuple[dict, str, str]] = []
    for t, host_id in accepted:
        home = (t.get("volume") or {}).get("host_id")
        if home and home != host_id:
            refused.append((t, host_id, f"its volume {t['volume']['volume_id']} is on host {home}"))
        else:
            ok.append((t, host_id))
    return ok, refused
