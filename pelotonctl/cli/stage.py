"""pelotonctl stage: run one instance of a pipeline stage."""

from __future__ import annotations

import typer

from pelotonctl.cli.common import EXIT_INVALID, commands, fail, load_settings

stage_app = commands("Run pipeline stages.")


@stage_app.command("run")
def stage_run(
    name: str = typer.Argument(..., help="admit, entitle, place or launch"),
    instance_id: str | None = typer.Option(None, help="Client id of this instance (default: random)."),
    max_seconds: float | None = typer.Option(None, help="Stop after this long (for tests and benchmarks)."),
) -> None:
    """Start one instance of a stage; it joins the stage's consumer group. SIGTERM stops it cleanly."""
    from stages.launch.inventory import InventoryError
    from stages.run import STAGES, run_stage

    if name not in STAGES:
        fail(f"unknown stage {name!r}; stages are {', '.join(STAGES)}", EXIT_INVALID)
    try:
        run_stage(name, load_settings(), instance_id, max_seconds)
    except InventoryError as exc:
        fail(f"PELOTON_HOSTS: {exc}", EXIT_INVALID)
