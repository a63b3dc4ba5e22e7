"""How a stage process collects garbage.

CPython runs a young collection every 700 new objects, and from time to time a full one that walks
every object alive. A stage makes tens of objects per task and holds large long-lived views (a
host record per host, queued gangs), so by default it spent a tenth to a quarter of its CPU
collecting: more, the more hosts it knows. The pipeline's records form no cycles worth chasing
often, so young collections run a hundred times less often, full ones rarely, and what start-up
made is left out of them for good."""

from __future__ import annotations

import gc

# (young, middle, old) thresholds; CPython's defaults are (700, 10, 10)
THRESHOLDS = (100_000, 50, 1000)


def settle_heap() -> None:
    """Call once the process has built what it keeps for its life (imports, clients, stage)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
