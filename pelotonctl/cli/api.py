"""pelotonctl api: serve the HTTP API (one instance; start as many as wanted)."""

from __future__ import annotations

import typer

from pelotonctl.cli.common import load_settings, out


def api(
    port: int = typer.Option(8081, help="Port to serve on."),
    host: str = typer.Option("127.0.0.1", help="Address to serve on (0.0.0.0: every interface)."),
    grpc_port: int = typer.Option(5392, "--grpc-port", help="Port of Peloton's protobuf services over gRPC "
                                  "(Peloton's job manager's port; 0: a free one; -1: no gRPC)."),
) -> None:
    """Serve the API: jobs, tasks, pools, hosts and tokens over HTTP/JSON, with its OpenAPI
    document at /openapi.json, and Peloton's own protobuf services (v0 and v1alpha) over gRPC,
    with server reflection and the standard health service. Every request but /healthz and
    /metrics needs a bearer token (`pelotonctl auth issue`; over gRPC, `authorization: Bearer
    <token>` metadata); every decision goes to the audit topic. With PELOTON_API_TLS_CERT and
    PELOTON_API_TLS_KEY both ports speak TLS. SIGTERM or Ctrl-C stops it."""
    from pelotonctl.api.server import serve

    settings = load_settings()
    scheme = "https" if settings.api_tls_cert else "http"
    out.print(f"API at {scheme}://{host}:{port} (OpenAPI: /openapi.json, docs: /docs)", highlight=False)
    serve(settings, host, port, None if grpc_port < 0 else grpc_port)
