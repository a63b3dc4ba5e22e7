"""pelotonctl api: serve the HTTP API (one instance; start as many as wanted)."""

from __future__ import annotations

import typer

from pelotonctl.cli.common import load_settings, out


def api(
    port: int = typer.Option(8081, help="Port to serve on."),
    host: str = typer.Option("127.0.0.1", help="Address to serve on (0.0.0.0: every interface)."),
) -> None:
    """Serve the API: jobs, tasks, pools, hosts and tokens over HTTP/JSON, with its OpenAPI
    document at /openapi.json. Every request but /healthz and /metrics needs a bearer token
    (`pelotonctl auth issue`); every decision goes to the audit topic. SIGTERM or Ctrl-C stops it."""
    from pelotonctl.api.server import serve

    out.print(f"API at http://{host}:{port} (OpenAPI: /openapi.json, docs: /docs)", highlight=False)
    serve(load_settings(), host, port)
