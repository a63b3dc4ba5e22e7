"""Tasks that name an image run inside it through an OCI runtime (runc): their sandbox mounted at
/sandbox (their working directory), the host's network and process ids, their
cpu, memory and pids limits in the bundle, so the runtime's cgroup holds them.

No registry is reachable from these machines, so an image is a root file system under the
agent's image directory (PELOTON_IMAGE_DIR, by default $PELOTON_HOME/images):
<image dir>/<image name, '/' and ':' as '_'>/rootfs. `pelotonctl image import NAME DIR` puts one
there. A host whose agent has no runtime advertises none (the host label container.runtime),
and placement keeps tasks with images off it.

The runtime's own process is the task's process here: `runc run` stays in the foreground and
exits with the container's code (128 + n when a signal ended it). Signals go through `runc
kill`, since the container's init has a session of its own and a signal to runc's process group
never reaches it (measured); `runc delete -f` removes what is left."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

RUNTIME_LABEL = "container.runtime"  # the host label that says which runtime its agent has
_MB = 1024 * 1024
CPU_PERIOD_US = 100_000


class ImageError(OSError):
    """The task's image cannot run here (no runtime, no such image): a launch failure."""


def image_directory_name(image: str) -> str:
    return image.replace("/", "_").replace(":", "_").replace("@", "_")


class ContainerRuntime:
    def __init__(self, binary: str, state_root: Path, image_dir: Path, agent: str):
        self.binary = binary
        self.state_root = state_root  # runc's --root: its state of this agent's containers
        self.image_dir = image_dir
        self.cgroup_parent = f"/peloton-agent-{agent}-containers"
        self.name = Path(binary).name

    def describe(self) -> str:
        return f"{self.name} ({self.binary}), images from {self.image_dir}"

    def rootfs(self, image: str) -> Path:
        path = self.image_dir / image_directory_name(image) / "rootfs"
        if not (path / "bin").exists() and not (path / "usr").exists():
            raise ImageError(f"image {image!r} is not in {self.image_dir} (no registry here: "
                             f"`pelotonctl image import {image} ROOTFS` puts a root file system there)")
        return path

    def cgroups_path(self, task_id: str) -> str:
        return f"{self.cgroup_parent}/{task_id}"

    def bundle(self, bundle: Path, image: str, argv: list[str], env: dict[str, str], sandbox: Path,
               uid: int, gid: int, cpu: float, mem_mb: float, pids: int, task_id: str,
               devices: list[dict] | None = None, binds: list[tuple[Path, str]] | None = None) -> Path:
        """Write the task's bundle (config.json) from the runtime's own default spec; `devices`:
        OCI device entries of the GPUs the run was given (devices.py), made in it and allowed to
        it (the default spec allows none but the usual few); `binds`: (host folder, path in the
        container) of its persistent volume, mounted after the sandbox it lies in."""
        rootfs = self.rootfs(image)
        bundle.mkdir(parents=True, exist_ok=True)
        config_path = bundle / "config.json"
        config_path.unlink(missing_ok=True)
        try:
            subprocess.run([self.binary, "spec", "--bundle", str(bundle)], check=True, capture_output=True, timeout=30)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
            raise ImageError(f"{self.name} spec failed: {exc}") from None
        config = json.loads(config_path.read_text())
        config["root"] = {"path": str(rootfs), "readonly": True}
        process = config["process"]
        process.update(terminal=False, args=argv, cwd="/sandbox", user={"uid": uid, "gid": gid},
                       env=[f"{k}={v}" for k, v in env.items()])
        process.pop("rlimits", None)  # the host's limits: raising one needs CAP_SYS_RESOURCE
        config["mounts"] += [
            {"destination": "/sandbox", "type": "bind", "source": str(sandbox), "options": ["rbind", "rw"]},
            {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev", "mode=1777"]},
            *({"destination": inside, "type": "bind", "source": str(folder), "options": ["rbind", "rw"]}
              for folder, inside in binds or ()),
        ]
        linux = config["linux"]
        # The host's network (a task's ports are the host's) and the host's pids: as PID 1 of a
        # namespace of its own, a shell ignores SIGTERM without a handler (a stop would wait out
        # the whole kill grace), where Mesos' executor or docker's init would pass it on.
        linux["namespaces"] = [n for n in linux["namespaces"] if n["type"] not in ("network", "pid")]
        linux["cgroupsPath"] = self.cgroups_path(task_id)
        resources = linux.setdefault("resources", {})
        if mem_mb > 0:
            resources["memory"] = {"limit": int(mem_mb * _MB), "swap": int(mem_mb * _MB)}
        if cpu > 0:
            resources["cpu"] = {"quota": max(1000, round(cpu * CPU_PERIOD_US)), "period": CPU_PERIOD_US}
        if pids > 0:
            resources["pids"] = {"limit": pids}
        for device in devices or ():
            linux.setdefault("devices", []).append(device)
            resources.setdefault("devices", []).append({"allow": True, "type": device["type"], "major": device["major"],
                                                        "minor": device["minor"], "access": "rwm"})
        config_path.write_text(json.dumps(config))
        return bundle

    def run_argv(self, task_id: str, bundle: Path) -> list[str]:
        # --keep: the container and its cgroup stay after it exits, until delete(), so that what
        # it used and whether the kernel killed it can still be read
        return [self.binary, "--root", str(self.state_root), "run", "--keep", "--bundle", str(bundle), task_id]

    def signal(self, task_id: str, signum: int) -> None:
        subprocess.run([self.binary, "--root", str(self.state_root), "kill", task_id, str(signum)],
                       capture_output=True, timeout=10)

    def delete(self, task_id: str) -> None:
        subprocess.run([self.binary, "--root", str(self.state_root), "delete", "--force", task_id],
                       capture_output=True, timeout=10)


def find_runtime(setting: str, image_dir: Path, state_root: Path, agent: str) -> tuple[ContainerRuntime | None, str]:
    """The agent's runtime (`auto`: runc where it is installed and the agent is root; a path or
    name: that one; `off`: none), and a sentence saying which, or why none."""
    if setting == "off":
        return None, "no container runtime (PELOTON_CONTAINER_RUNTIME=off): tasks with an image go to other hosts"
    if os.geteuid() != 0:
        return None, "no container runtime (the agent does not run as root): tasks with an image go to other hosts"
    binary = shutil.which("runc" if setting == "auto" else setting)
    if binary is None:
        return None, (f"no container runtime ({'runc' if setting == 'auto' else setting} is not installed): "
                      "tasks with an image go to other hosts")
    runtime = ContainerRuntime(binary, state_root, image_dir, agent)
    return runtime, f"container runtime {runtime.describe()}"
