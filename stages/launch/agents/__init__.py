"""Agent drivers: run the launch stage's tasks (simulated, as local subprocesses, or on host agents)."""

from __future__ import annotations

from .driver import (
    REASON_COMMAND_EXECUTOR_FAILED,
    TASK_FAILED,
    TASK_FINISHED,
    TASK_KILLED,
    TASK_LOST,
    TASK_RUNNING,
    TASK_STARTING,
    TERMINAL_STATES,
    AgentDriver,
    LaunchRequest,
    TaskUpdate,
    make_driver,
)
from .local import LocalDriver
from .sim import SimDriver

__all__ = [
    "REASON_COMMAND_EXECUTOR_FAILED",
    "TASK_FAILED",
    "TASK_FINISHED",
    "TASK_KILLED",
    "TASK_LOST",
    "TASK_RUNNING",
    "TASK_STARTING",
    "TERMINAL_STATES",
    "AgentDriver",
    "LaunchRequest",
    "LocalDriver",
    "SimDriver",
    "TaskUpdate",
    "make_driver",
]
