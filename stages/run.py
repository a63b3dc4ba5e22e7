"""Build and run one instance of a stage: `pelotonctl stage run <name>`."""

from __future__ import annotations

import logging

from peloton.config import Settings
from peloton.runtime import Stage, StageRuntime
from peloton.runtime.heap import settle_heap
from peloton.store import open_store

STAGES = ("admit", "entitle", "place", "launch")


def build_stage(name: str, settings: Settings) -> Stage:
    if name == "admit":
        from stages.admit.stage import AdmitStage

        return AdmitStage(open_store(settings.store))
    if name == "entitle":
        from stages.entitle.stage import EntitleStage

        return EntitleStage(open_store(settings.store))
    if name == "place":
        from stages.place.stage import PlaceStage

        return PlaceStage()
    if name == "launch":
        from stages.launch.stage import LaunchStage

        return LaunchStage(open_store(settings.store))
    raise ValueError(f"unknown stage {name!r}; stages are {', '.join(STAGES)}")


def run_stage(name: str, settings: Settings, instance_id: str | None = None, max_seconds: float | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s {name} %(levelname)s %(name)s: %(message)s")
    runtime = StageRuntime(build_stage(name, settings), settings, instance_id)
    settle_heap()
    runtime.install_signal_handlers()
    logging.getLogger("peloton.runtime").info("%s started (group %s, broker %s)", runtime.instance_id,
                                              runtime.catalogue.group(name), settings.bootstrap)
    runtime.run(max_seconds)
    logging.getLogger("peloton.runtime").info("%s stopped after %d records", runtime.instance_id, runtime.records)
