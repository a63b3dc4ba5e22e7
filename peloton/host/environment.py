"""A run's environment, built from nothing: the job's own variables, the run's identity and a
small base, never anything of the agent's (its Kafka user and password, the store's address, any
PELOTON_* setting). Mesos gives a task its own environment plus MESOS_* variables alike; Nomad's
and Kubernetes' tasks get no node credentials.

    base       PATH (the system's), HOME and TMPDIR (in the sandbox), LANG, USER and LOGNAME
    the job's  its config's environment (a port's variable among them), over the base
    identity   PELOTON_JOB_ID, PELOTON_INSTANCE_ID, PELOTON_TASK_ID, PELOTON_SANDBOX and, for a run
               given GPUs, CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES: set last, so a job's
               config cannot override them

A run's health check runs in the same environment. A run in an image gets the same, with the
sandbox at /sandbox and the image's own /tmp.
"""

from __future__ import annotations

from pathlib import Path

from .driver import LaunchRequest

# The system's directories only: a job that wants others names its own PATH.
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
BASE_LANG = "C.UTF-8"
TMP_DIR = "tmp"  # in the sandbox: TMPDIR, so a run's temporary files stay its own
CONTAINER_SANDBOX = "/sandbox"  # where an image's run finds its sandbox


def gpu_variables(gpus: tuple[str, ...]) -> dict[str, str]:
    """The variables that name a run's GPU devices to CUDA and NVIDIA's container tools."""
    if not gpus:
        return {}
    named = ",".join(gpus)
    return {"CUDA_VISIBLE_DEVICES": named, "NVIDIA_VISIBLE_DEVICES": named}


def identity(request: LaunchRequest, sandbox: str, gpus: tuple[str, ...] = ()) -> dict[str, str]:
    """What says which run this is and what it was given; no job's config may override it."""
    return {"PELOTON_JOB_ID": request.job_id, "PELOTON_INSTANCE_ID": str(request.instance),
            "PELOTON_TASK_ID": request.task_id, "PELOTON_SANDBOX": sandbox, **gpu_variables(gpus)}


def task_environment(request: LaunchRequest, sandbox: Path, user: str = "",
                     gpus: tuple[str, ...] = ()) -> dict[str, str]:
    """The environment of a run on the host's own file system, in `sandbox`, as `user` (a name
    for USER and LOGNAME; empty: none is set)."""
    base = {"PATH": BASE_PATH, "HOME": str(sandbox), "TMPDIR": str(sandbox / TMP_DIR), "LANG": BASE_LANG}
    if user:
        base.update(USER=user, LOGNAME=user)
    return {**base, **dict(request.environment), **identity(request, str(sandbox), gpus)}


def container_environment(request: LaunchRequest, gpus: tuple[str, ...] = ()) -> dict[str, str]:
    """The environment of a run inside its image (the image's /tmp is the run's own)."""
    base = {"PATH": BASE_PATH, "HOME": CONTAINER_SANDBOX, "LANG": BASE_LANG}
    return {**base, **dict(request.environment), **identity(request, CONTAINER_SANDBOX, gpus)}
