"""pelotonctl agent: the process on each host that runs its tasks."""

from __future__ import annotations

from pathlib import Path

import typer

from pelotonctl.cli.common import EXIT_INVALID, commands, fail, key_values, load_settings

agent_app = commands("Host agents: the process on each host that runs its tasks.")


@agent_app.command("run")
def agent_run(
    name: str = typer.Option(..., "--name", help="The host's id (unique in the cluster)."),
    resources: str = typer.Option("cpu=8,mem_mb=16384,disk_mb=100000,gpu=0", help="What the host offers."),
    attribute: list[str] = typer.Option([], "--attribute", help="A host label KEY=VALUE (repeatable)."),
    ports: str = typer.Option("31000-32000", "--ports", help="Ports the host gives its tasks: LOW-HIGH[,LOW-HIGH]."),
    gpus: str | None = typer.Option(None, "--gpus", help="The host's GPU devices, e.g. 0,1 (default: the NVIDIA "
                                    "devices under /dev, else as many as --resources' gpu, numbered from 0)."),
    simulate: int = typer.Option(0, "--simulate", min=0, max=100_000,
                                 help="Serve N simulated hosts NAME-0 .. NAME-(N-1) instead (tasks last "
                                      "PELOTON_SIM_TASK_SECONDS), for benchmarks."),
    max_seconds: float | None = typer.Option(None, help="Stop after this long (for tests)."),
) -> None:
    """Run this host's agent: it registers with the host manager and runs the tasks placed here.
    SIGTERM stops it and its tasks (reported lost, so they run elsewhere). SIGHUP stops it for a
    restart: its tasks go on, and the next agent of the same name adopts them if it starts within
    the lease (else they are killed, and run elsewhere); after a SIGKILL, a new agent of the same
    name adopts the tasks still running."""
    from stages.agent.agent import HOST_ID, AgentSpec, gpu_devices, parse_port_ranges, parse_resources, run_agent

    if not HOST_ID.fullmatch(name):
        fail(f"--name {name!r}: a host id is letters, digits, '.', '_' and '-' (at most 64)", EXIT_INVALID)
    try:
        capacity = parse_resources(resources)
    except ValueError as exc:
        fail(f"--resources: {exc}", EXIT_INVALID)
    try:
        port_ranges = parse_port_ranges(ports)
    except ValueError as exc:
        fail(f"--ports: {exc}", EXIT_INVALID)
    devices: tuple[str, ...] = ()
    settings = load_settings()
    if not simulate:
        try:
            devices, capacity = gpu_devices(gpus, capacity, Path(settings.gpu_dev_dir))
        except ValueError as exc:
            fail(str(exc), EXIT_INVALID)
    labels = key_values(attribute, "--attribute")
    names = [f"{name}-{i}" for i in range(simulate)] if simulate else [name]
    specs = [AgentSpec(n, capacity, labels, port_ranges) for n in names]
    run_agent(settings, specs, simulate=bool(simulate), name=name, max_seconds=max_seconds, gpus=devices)
