"""pelotonctl dashboard: a web page of the cluster."""

from __future__ import annotations

import typer

from pelotonctl.cli.common import EXIT_UNAVAILABLE, fail, load_settings, open_store, out


def dashboard(
    port: int = typer.Option(8080, help="Port to serve on (0: any free port)."),
    host: str = typer.Option("127.0.0.1", help="Address to serve on (0.0.0.0: every interface)."),
    every: float = typer.Option(2.0, "--every", help="Seconds between samples of lag, pools, jobs and hosts."),
) -> None:
    """A web page of the cluster: per-stage lag and throughput over time, pools' entitlement against
    allocation and demand, jobs and their tasks by state, hosts, and why pending tasks wait.
    It reads what the other commands read (the broker and the store). It asks for one of the API's
    tokens (`pelotonctl auth issue`) and shows each user the jobs of the pools they may read.
    Ctrl-C stops it."""
    from pelotonctl.dashboard.server import serve

    try:
        running = serve(load_settings(), open_store(), port=port, host=host, sample_every_s=every)
    except OSError as exc:
        fail(f"cannot serve on {host}:{port}: {exc.strerror or exc}", EXIT_UNAVAILABLE)
    out.print(f"dashboard at {running.url}: sign in with a token from `pelotonctl auth issue` (Ctrl-C stops it)",
              highlight=False)
    try:
        running.wait()
    except KeyboardInterrupt:
        pass
    finally:
        running.close()
