"""What runs an agent's tasks on its host: the cgroup hierarchy they are isolated in, the
container runtime that runs those naming an image, and the driver (peloton/host/) over both; or,
for an agent of simulated hosts, a driver that only pretends."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from peloton.config import Settings
from peloton.host.cgroups import Hierarchy, agent_cgroup_name, find_hierarchy
from peloton.host.containers import ContainerRuntime, find_runtime
from peloton.host.driver import AgentDriver
from peloton.host.local import LocalDriver
from peloton.host.sim import SimDriver


@dataclass(frozen=True)
class HostRuntime:
    isolation: Hierarchy | None
    isolation_said: str  # which isolators are on, or why none is
    runtime: ContainerRuntime | None
    runtime_said: str
    driver: AgentDriver
    label: str  # the host label that lets placement send it tasks that name an image ("": none)


def host_runtime(settings: Settings, name: str, state_dir: Path, sandbox_root: Path, simulate: bool,
                 gpus: tuple[str, ...]) -> HostRuntime:
    """The agent's runtime; its cgroups and runc's state are named by its state directory."""
    if simulate:
        return HostRuntime(None, "simulated runs", None, "simulated runs (any image)",
                           SimDriver(settings.sim_task_seconds), "simulated")
    cgroup_name = agent_cgroup_name(name, state_dir)
    isolation, isolation_said = isolation_for(settings, cgroup_name)
    runtime, runtime_said = find_runtime(settings.container_runtime, settings.images(), state_dir / "runc",
                                         cgroup_name)
    driver = LocalDriver(
        sandbox_root, user=settings.task_user, allowed_users=settings.task_users, task_uids=settings.task_uids,
        identities_dir=settings.identities_dir,
        isolation=isolation, pids_max=settings.task_pids_max, gpus=gpus, gpu_dev=Path(settings.gpu_dev_dir),
        runtime=runtime,
        sandbox_keep_seconds=settings.sandbox_keep_s, lease_file=state_dir / "executor-lease")
    return HostRuntime(isolation, isolation_said, runtime, runtime_said, driver, runtime.name if runtime else "")


def isolation_for(settings: Settings, agent: str) -> tuple[Hierarchy | None, str]:
    """The cgroup hierarchy the agent's tasks run in (`agent`: its agent_cgroup_name), or None,
    and a sentence saying which isolators are on, or why none is."""
    if settings.isolation == "off":
        return None, "off (PELOTON_ISOLATION=off): tasks are bare process groups, their resources only counted"
    hierarchy, note = find_hierarchy(agent)
    if hierarchy is None:
        return None, f"{note}: tasks are bare process groups, their resources only counted"
    return hierarchy, (f"{hierarchy.describe()}: cpu quota, memory (swap off), pids {settings.task_pids_max}"
                       + (f"; {note}" if note else ""))


def describe(host: HostRuntime, gpus: tuple[str, ...], logs_url: str | None) -> list[str]:
    """The lines an agent logs as it starts about what runs its tasks."""
    lines = [f"isolation: {host.isolation_said}"]
    if isinstance(host.driver, LocalDriver):
        lines.append(f"accounts: {host.driver.describe_accounts()}")
    lines.append(f"images: {host.runtime_said}")
    if logs_url is not None:
        lines.append(f"run output served at {logs_url}, to a caller with the API's grant for the run")
    if gpus:
        fenced = ("each run may open its own alone (devices cgroup)" if host.isolation and host.isolation.devices
                  else "a run is not kept from opening others' (no devices cgroup here; a run in an image is)")
        lines.append(f"GPUs: {','.join(gpus)}, each given to one task at a time (CUDA_VISIBLE_DEVICES, "
                     f"NVIDIA_VISIBLE_DEVICES); {fenced}")
    return lines
