"""Which driver runs a launch stage's hosts: simulated ones, real processes on this machine, or (in
remote.py) the hosts' own agents over Kafka."""

from __future__ import annotations

import importlib
from typing import Any

from peloton.host.driver import AgentDriver

# Imported lazily so that importing the contract does not drag in every driver.
_DRIVERS: dict[str, tuple[str, str]] = {
    "local": ("peloton.host.local", "LocalDriver"),
    "sim": ("peloton.host.sim", "SimDriver"),
}


def make_driver(name: str, **options: Any) -> AgentDriver:
    """Build the driver called `name` ('sim' or 'local') with its constructor options."""
    try:
        module_name, class_name = _DRIVERS[name]
    except KeyError:
        known = ", ".join(sorted(_DRIVERS))
        raise ValueError(f"unknown agent driver {name!r}; known drivers: {known}") from None
    driver_class = getattr(importlib.import_module(module_name), class_name)
    return driver_class(**options)
