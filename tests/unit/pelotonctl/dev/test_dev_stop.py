"""`dev down`'s order: the stages, the API and the agents told to stop together, the servers after
they are gone, one by one; a component that outlives its wait is killed."""

from __future__ import annotations

import subprocess
import sys
import time

from pelotonctl.dev.stack import DevStack

# A component that notes when it was told to stop and when it ends (a second later for a stage,
# an API or an agent finishing its batch: room for a loaded machine to run every handler before
# any of them ends; a tenth for a server), or one that never ends on SIGTERM.
CHILD = """
import signal, sys, time
mark = open(sys.argv[1], "a")
def told(*_):
    mark.write(f"term {time.monotonic()}\\n"); mark.flush()
    if sys.argv[2] == "stubborn":
        return
    time.sleep(0.1 if sys.argv[2] in ("broker", "zookeeper") else 1.0)
    mark.write(f"end {time.monotonic()}\\n"); mark.flush()
    sys.exit(0)
signal.signal(signal.SIGTERM, told)
mark.write("up\\n"); mark.flush()
while True:
    time.sleep(0.02)
"""


def test_the_stages_stop_together_and_the_servers_after_them_one_by_one(tmp_path) -> None:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    names = ["admit", "entitle", "api", "agent", "broker", "zookeeper", "stubborn"]
    components, procs = [], []
    for name in names:
        proc = subprocess.Popen([sys.executable, str(script), str(tmp_path / name), name], start_new_session=True)
        procs.append(proc)
        component = "agent" if name == "stubborn" else name
        components.append({"component": component, "instance": name, "pid": proc.pid})
    while not all((tmp_path / n).exists() and "up" in (tmp_path / n).read_text() for n in names):
        time.sleep(0.02)
    said: list[str] = []
    try:
        DevStack._stop(None, components, said.append, timeout=2)  # a zombie of ours counts as gone
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    marks = {n: dict(line.split() for line in (tmp_path / n).read_text().splitlines() if " " in line) for n in names}
    clients = ["admit", "entitle", "api", "agent"]
    # Every client was told before any of them ended: together, not one after the other.
    assert max(float(marks[n]["term"]) for n in clients) < min(float(marks[n]["end"]) for n in clients)
    # The servers only once every client (the stubborn one killed) is gone, and one at a time.
    assert float(marks["broker"]["term"]) > max(float(marks[n]["end"]) for n in clients)
    assert float(marks["zookeeper"]["term"]) > float(marks["broker"]["end"])
    assert "stubborn  killed after 2s" in said
    assert said[-2:] == ["broker    stopped", "zookeeper stopped"]
    assert sorted(said[:4]) == sorted(f"{n:<9} stopped" for n in clients)

