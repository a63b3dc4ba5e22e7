"""pelotonctl cluster: every registered instance on any machine, from ZooKeeper."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer
from rich.table import Table

from pelotonctl.cli.common import (
    EXIT_INVALID,
    client,
    cluster_call,
    commands,
    fail,
    load_settings,
    out,
    print_json,
)

cluster_app = commands("The cluster's instances on every machine, from ZooKeeper (through the API, or "
                       "PELOTON_ZOOKEEPER).")


@cluster_app.command("status")
def cluster_status(
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    timeout: float = typer.Option(5.0, help="Seconds to wait for ZooKeeper."),
) -> None:
    """Every registered instance on any machine, from ZooKeeper: through the API (admins), or
    directly from PELOTON_ZOOKEEPER where no API is configured.

    Per instance: kind, instance id, host, pid, partitions, metrics address, age."""
    import time

    rows = cluster_call(client().instances, timeout)
    now = time.time()
    for r in rows:
        started = r.get("started_ms")
        r["age_s"] = round(now - started / 1000, 1) if isinstance(started, (int, float)) else None
    if as_json:
        print_json(rows)
        return
    if not rows:
        out.print("no instances are registered in ZooKeeper", highlight=False)
        return
    table = Table("kind", "instance", "host", "pid", "partitions", "metrics", "age")
    for r in rows:
        table.add_row(r["kind"], r["instance_id"], str(r.get("host") or ""), str(r.get("pid") or ""),
                      _cluster_partitions(r.get("partitions")), str(r.get("metrics") or ""),
                      _cluster_age(r["age_s"]) if r.get("error") is None else f"[red]{r['error']}[/red]")
    out.print(table)


@cluster_app.command("targets")
def cluster_targets(output: Path | None = typer.Option(None, "--output", help="Write here (atomically) "
                                                       "instead of printing."),
                    static: list[str] = typer.Option([], "--static", help="Another target COMPONENT=HOST:PORT "
                                                     "(repeatable): an API, which does not register.")) -> None:
    """Every instance's metrics address as Prometheus file_sd targets (see docker/prometheus/prometheus.yml):
    from ZooKeeper (through the API, or PELOTON_ZOOKEEPER) where the cluster has one, else from the
    running dev stack."""
    import os
    from urllib.parse import urlparse

    settings = load_settings()
    if settings.zookeeper.strip():
        rows = cluster_call(client().instances)
        found = [(r["kind"], r["instance_id"], r.get("metrics")) for r in rows]
    else:
        from pelotonctl.dev.stack import DevStack

        found = [(c["component"], c.get("instance") or c["component"], c.get("metrics"))
                 for c in DevStack(settings).status() if c["running"]]
    # "component", not "kind": metrics have a label kind of their own (a resource or preemption kind).
    targets = [{"targets": [urlparse(url).netloc], "labels": {"component": kind, "instance_id": instance,
                                                              "__metrics_path__": urlparse(url).path or "/metrics"}}
               for kind, instance, url in found if url]
    for item in static:
        kind, _, address = item.partition("=")
        if not kind or not address:
            fail(f"--static {item!r}: expected COMPONENT=HOST:PORT", EXIT_INVALID)
        targets.append({"targets": [address], "labels": {"component": kind, "instance_id": address,
                                                         "__metrics_path__": "/metrics"}})
    text = json.dumps(targets, indent=2) + "\n"
    if output is None:
        sys.stdout.write(text)
        return
    temporary = output.with_name(output.name + ".tmp")
    temporary.write_text(text)
    os.replace(temporary, output)  # Prometheus never reads a half-written file


def _cluster_ranges(numbers: list[int]) -> str:
    """[0, 1, 2, 5] -> "0-2,5"."""
    spans: list[list[int]] = []
    for n in sorted(set(numbers)):
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def _cluster_partitions(value) -> str:
    """An instance's partitions as registered: a list of numbers, a list of [topic, partition]
    pairs, or {topic: [partitions]}; shown as "topic 0-3; other 1"."""
    if not value:
        return ""
    try:
        if isinstance(value, dict):
            by_topic = {str(t): list(ps) for t, ps in value.items()}
        elif all(isinstance(v, int) for v in value):
            return _cluster_ranges(value)
        else:
            by_topic = {}
            for topic, partition in value:
                by_topic.setdefault(str(topic), []).append(int(partition))
        return "; ".join(f"{t} {_cluster_ranges(ps)}" for t, ps in sorted(by_topic.items()))
    except (TypeError, ValueError):
        return str(value)


def _cluster_age(seconds: float | None) -> str:
    if seconds is None:
        return ""
    s = max(int(seconds), 0)
    for unit, size, sub, sub_size in (("d", 86400, "h", 3600), ("h", 3600, "m", 60), ("m", 60, "s", 1)):
        if s >= size:
            return f"{s // size}{unit}{(s % size) // sub_size:02d}{sub}"
    return f"{s}s"
