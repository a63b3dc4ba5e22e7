"""pelotonctl deploy: what starts a cluster on machines or containers of its own (docker/compose.yaml
runs these): its secrets in one env file, the brokers' certificates, one Kafka node, and the
one-shot setup of topics, users, ACLs, the first pool and the first tokens."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import typer

from pelotonctl.cli.common import EXIT_INVALID, EXIT_UNAVAILABLE, commands, fail, load_settings, out

deploy_app = commands("Start a cluster on machines or containers of its own (docker/compose.yaml).")


@deploy_app.command("env")
def deploy_env(agents: str = typer.Option("agent-0,agent-1", "--agents", help="The agents' host ids, "
                                          "comma-separated: each gets a key of its own."),
               output: Path | None = typer.Option(None, "--output", help="Write here (mode 0600) instead of "
                                                  "printing; an existing file is never replaced.")) -> None:
    """Fresh secrets for a new cluster, as the env file docker/compose.yaml reads."""
    from peloton.private import write_private
    from pelotonctl.deploy.env_file import cluster_env, env_text

    text = env_text(cluster_env([a.strip() for a in agents.split(",") if a.strip()]))
    if output is None:
        sys.stdout.write(text)
        return
    if output.exists():
        fail(f"{output} exists: a cluster's secrets are made once (remove it to start a new cluster)", EXIT_INVALID)
    write_private(output, text)
    out.print(f"secrets of a new cluster in {output}", highlight=False)


@deploy_app.command("certificates")
def deploy_certificates(directory: Path = typer.Option(..., "--dir", help="Where ca.pem and broker.pem go."),
                        names: str = typer.Option(..., "--names", help="The brokers' host names, comma-separated "
                                                  "(kafka-1,kafka-2,kafka-3).")) -> None:
    """A CA and the brokers' certificate for their names, unless the directory has them already:
    clients check the brokers against ca.pem (PELOTON_KAFKA_CA)."""
    from pelotonctl.dev.tls import make_certificates

    if (directory / "ca.pem").exists() and (directory / "broker.pem").exists():
        out.print(f"certificates in {directory} kept", highlight=False)
        return
    make_certificates(directory, [n.strip() for n in names.split(",") if n.strip()])
    os.chmod(directory / "ca.pem", 0o644)  # every client reads it
    out.print(f"certificates for {names} in {directory}", highlight=False)


@deploy_app.command("broker")
def deploy_broker(node_id: int = typer.Option(..., "--node-id", help="This node's number: 1 for the first of "
                                              "--voters."),
                  voters: str = typer.Option(..., "--voters", help="Every node's host name, node 1 first, "
                                             "comma-separated (kafka-1,kafka-2,kafka-3)."),
                  data: Path = typer.Option(Path("/var/lib/kafka"), "--data", help="Its log and config."),
                  heap_mb: int = typer.Option(512, "--heap-mb", help="The JVM's heap."),
                  wait_s: float = typer.Option(120.0, "--wait", help="Seconds to wait for the keystore (made by "
                                               "`deploy certificates`, which may start beside it).")) -> None:
    """One Kafka node (KRaft, broker and controller; SASL_SSL for clients on 9092, brokers on 9093,
    controllers on 9094), its log formatted on its first start, then Kafka in this process's place.
    Reads PELOTON_KAFKA_CLUSTER_ID, PELOTON_KAFKA_ADMIN_PASSWORD, PELOTON_KAFKA_BROKER_PASSWORD and
    PELOTON_KAFKA_KEYSTORE (the PEM `deploy certificates` makes)."""
    import time

    from pelotonctl.deploy.broker import from_env, prepare
    from pelotonctl.dev.kafka import KafkaError

    node = from_env(node_id, tuple(v.strip() for v in voters.split(",") if v.strip()), data)
    deadline = time.monotonic() + wait_s
    while not node.keystore.is_file() and time.monotonic() < deadline:
        time.sleep(1)
    try:
        cmd = prepare(node, heap_mb)
    except KafkaError as exc:
        fail(str(exc), EXIT_INVALID)
    sys.stdout.flush()
    os.execvp(cmd[0], cmd)


@deploy_app.command("setup")
def deploy_setup(tokens: Path = typer.Option(Path("/secrets/tokens"), "--tokens", help="Where the tokens it "
                                             "issues are written (admin-token, api-command-token)."),
                 wait_s: float = typer.Option(180.0, "--wait", help="Seconds to wait for the brokers and the store.")
                 ) -> None:
    """Topics, each component's Kafka user (KAFKA_PASSWORD_<USER>) and ACLs, the store's schema, the
    pool /DefaultResPool, and an admin token and the API's, as the cluster's Kafka admin
    (PELOTON_KAFKA_USER=admin). Idempotent."""
    from pelotonctl.deploy.setup import passwords_from_env, set_up

    try:
        passwords = passwords_from_env()
    except ValueError as exc:
        fail(str(exc), EXIT_INVALID)
    try:
        set_up(load_settings(), passwords, tokens, wait_s, lambda line: out.print(line, highlight=False))
    except Exception as exc:  # noqa: BLE001 - what failed is said, and the exit code tells a retry loop
        fail(f"setup failed: {type(exc).__name__}: {exc}", EXIT_UNAVAILABLE)
