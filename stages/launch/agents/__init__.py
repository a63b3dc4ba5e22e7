"""The launch stage's drivers: which one runs a group of its hosts (driver.py: simulated hosts, or
real processes on this machine, both from the host runtime in peloton/host), and remote.py, which
drives the hosts' own agents over Kafka."""

from __future__ import annotations

from .driver import make_driver

__all__ = ["make_driver"]
