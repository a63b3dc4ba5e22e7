"""Peloton's own API, its protobuf services (proto/), over gRPC beside the HTTP one: the same Door
(identities, pool permissions, audit), the same admin calls and store reads behind both. A method
with no meaning here answers UNIMPLEMENTED with the reason (catalog.py)."""
