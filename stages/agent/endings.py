"""The endings an agent saw and has not yet had acknowledged, kept on disk across its restart.

A run that ends is reported in the agent's next AgentReport and forgotten once the broker
acknowledges that report. An agent that dies in between (a SIGKILL, the OOM killer; a broker
outage stretches the window to the whole outage) used to find the run gone and report it lost,
and the host manager ran a task that had succeeded a second time. Its ending (state, exit code,
signal, usage) is written here first, and the next agent reports it again as it was. Written to
the kernel, not synced: what a process's death leaves, as runs.json.

An append-only file of one JSON line per ending: appending costs the few endings of a step, where
writing them into runs.json would rewrite every run there at each step that ends one (the agent's
CPU per task in the bench's simagent run went from 0.048-0.058 to 0.074-0.098 ms that way). Once
per step that had acknowledgements, it is emptied in place when every ending was acknowledged
(the usual case) and rewritten with those still unacknowledged otherwise.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import fields
from pathlib import Path
from typing import TextIO

from peloton.host.driver import TaskUpdate


class EndingsJournal:
    def __init__(self, path: Path):
        self.path = path
        self._file: TextIO | None = None  # kept open for appending: one write a step, not an open and a close too

    def load(self, runs: dict) -> dict[str, TaskUpdate]:
        """The endings kept for runs still in `runs` (others were acknowledged: their lines are
        left from before the last rewrite). A line this release cannot read (one cut short by a
        crash mid-append, one of a later release) is no ending: the run is reported lost, as
        before there was this file."""
        try:
            lines = self.path.read_text().splitlines()
        except OSError:
            return {}
        out: dict[str, TaskUpdate] = {}
        for line in lines:
            ending = read_ending(line)
            if ending is not None and ending.task_id in runs:
                out[ending.task_id] = ending
        return out

    def append(self, endings: list[TaskUpdate]) -> None:
        if endings:
            if self._file is None:
                self._file = open(self.path, "a")  # noqa: SIM115 - kept open, closed by close()
            self._file.write("".join(map(line_of, endings)))
            self._file.flush()  # to the kernel: a SIGKILL of the agent now loses nothing

    def rewrite(self, endings: list[TaskUpdate]) -> None:
        if not endings:  # the usual case, every ending acknowledged: emptied in place
            with contextlib.suppress(FileNotFoundError):
                os.truncate(self.path, 0)  # appends through the open file go on from 0
            return
        self.close()  # the file it has open is replaced
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text("".join(map(line_of, endings)))
        os.replace(tmp, self.path)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


_FIELDS = tuple(f.name for f in fields(TaskUpdate))


def line_of(ending: TaskUpdate) -> str:
    # getattr per field, not dataclasses.asdict: asdict deep-copies every value, at each ending
    return json.dumps({name: getattr(ending, name) for name in _FIELDS}) + "\n"


def read_ending(line: str) -> TaskUpdate | None:
    try:
        fields = json.loads(line)
        ending = TaskUpdate(**fields) if isinstance(fields, dict) else None
    except (ValueError, TypeError):
        return None
    return ending if ending is not None and isinstance(ending.task_id, str) and ending.terminal else None
