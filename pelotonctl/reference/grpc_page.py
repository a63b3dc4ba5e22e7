"""grpc.md: every service and method of Peloton's API (proto/) as the gRPC port answers it: served
(with what it does here, from the function's docstring) or not served (with the reason the caller
reads in UNIMPLEMENTED)."""

from __future__ import annotations

from pelotonctl.reference.markdown import banner, cell, table


def grpc_md() -> str:
    from pelotonctl.api.rpc import catalog, server

    services = server.services()
    server.unaccounted()  # imports the servicers, which register what they serve
    methods = [(s, m) for s in services for m in s.methods]
    served = sum(server.method_name(m) in catalog.SERVED for _s, m in methods)
    out = [banner("pelotonctl/api/rpc/", "gRPC services"), "# gRPC services\n\n",
           f"`pelotonctl api` serves Peloton's own protobuf API over gRPC (`--grpc-port`, 5392 by default; the "
           f"dev stack's is in `pelotonctl dev status --json` as `grpc`): {len(services)} services, {len(methods)} "
           f"methods, {served} served. A method not served answers `UNIMPLEMENTED` with the reason below. The "
           "messages are Peloton's, field for field (`proto/`); every call carries `authorization: Bearer <token>` "
           "in its metadata, and is allowed or refused, and audited, as the same call over HTTP is. Server "
           "reflection (`grpc.reflection.v1alpha`) and the standard health service (`grpc.health.v1.Health`) "
           "are served beside them. How to call it: [Peloton's API over gRPC](../tutorials/grpc.md).\n\n"]
    for service in services:
        rows = []
        for method in service.methods:
            name = server.method_name(method)
            stream = " (stream)" if method.server_streaming else ""
            if name in catalog.SERVED:
                rows.append([f"`{method.name}`{stream}", "served", cell(catalog.described(name))])
            else:
                rows.append([f"`{method.name}`{stream}", "not served", cell(catalog.not_served_reason(name) or "")])
        out.append(f"## `{service.full_name}`\n\n")
        out.append(table(["method", "", "here"], rows))
        out.append("\n")
    return "".join(out)
