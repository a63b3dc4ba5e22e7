"""pelotonctl lag: consumer lag per stage group, in Burrow's manner."""

from __future__ import annotations

import json

import typer
from rich.table import Table

from pelotonctl.cli.common import EXIT_INVALID, JSON_HELP, client, cluster_call, fail, load_settings, out, print_json

_STATUS_STYLE = {"OK": "green", "WARN": "yellow", "STALL": "red", "STOP": "red", "ERR": "bold red"}


def lag(
    group: list[str] = typer.Option([], "--group", help="A stage (admit, entitle, place, launch) or group name; "
                                    "repeat for several. Default: every stage."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
    watch: bool = typer.Option(False, "--watch", help="Refresh until Ctrl-C."),
    interval: float = typer.Option(2.0, help="Seconds between samples (and, without an API, between the two "
                                   "samples of one look)."),
    window: int = typer.Option(10, help="Without an API: samples the status word looks back over. Through the "
                               "API the status is its sampler's, the same for every caller."),
) -> None:
    """Consumer lag per stage group, topic and partition: committed and log-end offsets, lag, lag in
    seconds, held messages, and a status word (OK, WARN, STALL, STOP, ERR) in Burrow's manner,
    with since when the group has had it and why.

    Through the API (PELOTON_API_URL, a dev stack's by default) this is the API's lag sampler's
    view: it samples every group once a second, so one look sees movement, and the dashboard
    and `job status` tell the same status. Without an API it samples twice, INTERVAL apart.
    STALL: messages wait and the group's position has not moved over the window or for 5 s (a
    member that died stays listed until its session times out); STOP: messages wait and the
    group has no member. Messages a stage holds back (gangs waiting for a host) are counted as
    held, and demand queued in a pool as queued: neither is a backlog."""
    import time

    from pelotonctl.lag import STAGES, stage_of

    settings = load_settings()
    stages = []
    for g in group or STAGES:
        stage = stage_of(settings, g)
        if stage is None:
            fail(f"--group {g!r}: not a stage group (stages: {', '.join(STAGES)})", EXIT_INVALID)
        stages.append(stage)
    if not 1 <= window <= 60:
        fail(f"--window {window}: expected 1 to 60 samples", EXIT_INVALID)
    cluster = client()  # through the API (any user may read lag), or directly with the broker's credentials
    try:
        if not watch:
            report = cluster_call(cluster.lag, tuple(stages), window)
            if "sampler" not in report:  # sampled here, not by a sampler that keeps a window: look again
                time.sleep(interval)
                report = cluster_call(cluster.lag, tuple(stages), window)
            print_json(report) if as_json else out.print(_lag_view(report))
            return
        from rich.live import Live

        with Live(console=out, auto_refresh=False) as live:
            while True:
                report = cluster_call(cluster.lag, tuple(stages), window)
                if as_json:
                    print(json.dumps(report), flush=True)
                else:
                    live.update(_lag_view(report), refresh=True)
                time.sleep(interval)
    except KeyboardInterrupt:
        pass
    finally:
        cluster.close()


def _lag_view(report: dict):
    from rich.console import Group
    from rich.text import Text

    table = Table("group", "status", "topic", "partition", "current", "log end", "lag", "lag s", "held")
    for g in report["groups"]:
        style = _STATUS_STYLE.get(g["status"], "")
        table.add_row(f"[bold]{g['group']}[/bold]", f"[{style}]{g['status']}[/{style}]", "", "",
                      "", "", f"[bold]{g['total_lag']:,}[/bold]", f"{g['max_lag_seconds']:.1f}", f"{g['held']:,}")
        for p in g["partitions"]:
            if p["current_offset"] is None and p["log_end_offset"] == 0:
                continue  # never written to: nothing to say (--json lists it)

            def num(v):
                return "?" if v is None else f"{v:,}"
            table.add_row("", "", p["topic"], str(p["partition"]), num(p["current_offset"]), num(p["log_end_offset"]),
                          num(p["lag"]), "?" if p["lag_seconds"] is None else f"{p['lag_seconds']:.1f}", num(p["held"]))
    parts: list = [table]
    for g in report["groups"]:
        if g["status"] != "OK" and g.get("detail"):
            since = g.get("status_since_ms")
            held = f" for {max(0.0, report['sampled_ms'] - since) / 1000:.0f} s" if since else ""
            style = _STATUS_STYLE.get(g["status"], "")
            parts.append(Text.from_markup(f"[bold]{g['stage']}[/bold] [{style}]{g['status']}[/{style}]{held}: ")
                         + Text(g["detail"]))
    queued = [q for q in report["queued"] if q["queued_gangs"]]
    if queued:
        pools = Table("pool", "queued gangs", "queued cpu", "queued mem_mb", title="demand queued in pools (not lag)")
        for q in queued:
            pools.add_row(q["pool"], f"{q['queued_gangs']:,}", f"{q['demand']['cpu']:,.6g}",
                          f"{q['demand']['mem_mb']:,.0f}")
        parts.append(pools)
    return Group(*parts)
