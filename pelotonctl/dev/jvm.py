"""How much the dev stack's JVMs compile: `light` (the default) or `full`.

A server that starts, serves a demo or a test for a few minutes and stops spends much of its CPU
compiling itself. Light runs C1 alone with the serial collector: on a 2-core machine a secure
Kafka node's start took 5.5 s of CPU instead of 10.1, and a Cassandra node's start with our schema
and 30 s idle 20 s instead of 38 (the test suite starts dozens of them). Full is the servers' own
options (G1, and C2 for code that runs hot): a broker that moves records at load for minutes pays
for C2's compiling (a secure node relaying 100,000 messages through 4 hops spent 16.4 s of CPU
light, 10.1 s full), as the bench's broker does. A broker that mostly answers idle readers does
not: an idle dev stack's took 24 % of a core light and 32-45 % full, so the test session's shared
broker is light too. Short-lived tools (the storage tool, the consumer groups tool) always run
light: they end before C2 would help."""

from __future__ import annotations

KINDS = ("light", "full")
DEFAULT = "light"  # also what a cluster or node made before the choice was kept starts as
LIGHT = ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"]


def check_kind(kind: str) -> str:
    """`kind` when it is one of KINDS; a ValueError that says so otherwise."""
    if kind not in KINDS:
        raise ValueError(f"a JVM is light or full, not {kind!r}")
    return kind


def jvm_options(kind: str, collector: list[str], other: list[str]) -> list[str]:
    """A server's options: its own collector's for `full`, the light ones in their place for `light`."""
    return [*(collector if check_kind(kind) == "full" else LIGHT), *other]
