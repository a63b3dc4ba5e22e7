"""How many tasks each of the job manager's input records brings into a turn (Stage.weight), so
that a turn stops at max_turn_tasks: a create makes every task of its job in the turn that reads
it, and a record of many runs' steps moves each of them. Read from the record as it came, without
parsing a job's config (that is done, and checked, when the record is handled)."""

from __future__ import annotations

import re

from peloton.model.jobspec import MAX_INSTANCES
from peloton.runtime import Record

# A job config's instance count in its text (YAML or JSON, any case), found without parsing it.
_INSTANCE_COUNT = re.compile(r"instance_?count[\"']?\s*:\s*[\"']?(\d+)", re.IGNORECASE)


def command_weight(cmd: dict) -> int:
    """About how many tasks a command makes at once, for the size of a turn (Stage.weight): a
    create's or an update's instance count as its config's text says it (1 where it does not);
    1 for the rest. An estimate: the config is parsed, and checked, when the command is handled."""
    config = cmd.get("config")
    if cmd.get("kind") not in ("CREATE", "UPDATE") or not config:
        return 1
    found = _INSTANCE_COUNT.search(config)
    return max(1, min(int(found.group(1)), MAX_INSTANCES)) if found else 1


def record_weight(record: Record) -> int:
    """The tasks a job-commands or task-status record brings: a command's (command_weight), or
    the runs a record of steps moves (a TaskStatusRuns `with_starting` moves each twice)."""
    if record.topic == "job-commands":
        return command_weight(record.value)
    if record.schema == "peloton.TaskStatusRuns":
        return len(record.value["runs"]) * (2 if record.value.get("with_starting") else 1)
    if record.schema == "peloton.TaskProgress":
        return len(record.value["runs"])
    return 1
