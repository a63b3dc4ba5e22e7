"""What every command of pelotonctl shares: its settings and store, how it answers (tables on a
terminal, JSON for scripts) and how it fails (one line on stderr and an exit code).

Exit codes: 0 success; 1 the job ended but did not succeed; 2 invalid input (bad file, unknown
pool, bad arguments); 3 not found; 4 timed out waiting; 5 the broker, the store or the API is
unavailable; 6 not permitted (no valid token, or the token's user may not do it).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer
from rich.console import Console

from peloton.config import Settings

JSON_HELP = "Print JSON (for scripts) instead of a table."


def commands(help: str, **options) -> typer.Typer:
    """A command group. Its help is plain text (rich_markup_mode=None): no markup or emoji codes
    are read into it, so that 'sim:100:cpu=32' shows as written."""
    return typer.Typer(rich_markup_mode=None, help=help, no_args_is_help=True, **options)


# Piped or redirected, tables keep their full width: ids are copied from them, never cut at 80.
out = Console(soft_wrap=True, emoji=False, width=None if sys.stdout.isatty() else 400)
err = Console(stderr=True, emoji=False)

EXIT_FAILED, EXIT_INVALID, EXIT_NOT_FOUND, EXIT_TIMEOUT, EXIT_UNAVAILABLE, EXIT_NOT_PERMITTED = 1, 2, 3, 4, 5, 6


def fail(message: str, code: int) -> None:
    err.print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def check_store_kind(store: str) -> None:
    """--store of `dev up` and `bench`: one of the stores a dev stack runs on, or exit naming them."""
    from pelotonctl.dev.stack import STORE_KINDS

    if store not in STORE_KINDS:
        fail(f"--store: {store!r} is not {', '.join(STORE_KINDS[:-1])} or {STORE_KINDS[-1]}", EXIT_INVALID)


def load_settings() -> Settings:
    from peloton.config import SettingsError

    try:
        return Settings.from_env()
    except SettingsError as exc:
        fail(str(exc), EXIT_INVALID)
        raise


def open_store():
    from peloton.store import open_store as open_url

    return open_url(load_settings().store)


def print_json(data) -> None:
    sys.stdout.write(json.dumps(rounded(data), indent=2, default=str) + "\n")


def rounded(data):
    """Floats to 6 decimals, everywhere in a JSON answer: sums of resources carry binary noise
    (0.1 + 0.2 is 0.30000000000000004) that means nothing to a reader or a script."""
    if isinstance(data, float):
        return round(data, 6)
    if isinstance(data, dict):
        return {k: rounded(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [rounded(v) for v in data]
    return data


def amount(x: float | None) -> str:
    """A resource amount for a table: whole numbers as they are (1024000, never 1.024e+06), others
    to 3 decimals at most; '?' when it is not known."""
    if x is None:
        return "?"
    if x != x or x in (float("inf"), float("-inf")):
        return str(x)
    if x == int(x):
        return str(int(x))
    return f"{x:.3f}".rstrip("0").rstrip(".")


def counted(n: int, noun: str) -> str:
    """`1 gang`, `6 gangs`."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def read_text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as exc:
        fail(f"cannot read {path}: {exc.strerror}", EXIT_INVALID)
        raise


def key_values(items: list[str], option: str) -> dict[str, str]:
    """KEY=VALUE options (repeated) as a dict; exit 2 naming the option for one without '='."""
    pairs = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            fail(f"{option} {item!r}: expected KEY=VALUE", EXIT_INVALID)
        pairs[key] = value
    return pairs


def broker_call(fn, *args):
    from confluent_kafka import KafkaException

    from peloton.registry import LockNotAcquired, RegistryUnavailable
    from peloton.runtime import BrokerUnavailable, DeliveryError

    try:
        return fn(*args)
    except (RegistryUnavailable, LockNotAcquired) as exc:
        fail(str(exc), EXIT_UNAVAILABLE)
    except (KafkaException, DeliveryError, BrokerUnavailable) as exc:
        fail(f"broker at {load_settings().bootstrap} is unavailable (is `pelotonctl dev up` running, or "
              f"PELOTON_KAFKA_BOOTSTRAP set?): {exc}", EXIT_UNAVAILABLE)


def client():
    """The cluster as this command reaches it: through the API when one is configured, else directly
    (pelotonctl.client). An answer the API served from its views without the store says so on stderr."""
    from pelotonctl.client import ApiClient, connect

    cluster = connect(load_settings())
    if isinstance(cluster, ApiClient):
        cluster.on_note = lambda line: err.print(f"note: {line}", highlight=False, soft_wrap=True, markup=False)
    return cluster


def say_health(answer: dict, to_stderr: bool = False) -> None:
    """The lines of an answer's stage_problems and silent_hosts (pelotonctl.health): a job whose
    statuses are not applied, or whose hosts are silent, says so beside what it shows."""
    from pelotonctl.health import health_lines

    for line in health_lines(answer):
        if to_stderr:
            err.print(f"warning: {line}", highlight=False, soft_wrap=True, markup=False)
        else:
            out.print(line, highlight=False, soft_wrap=True, markup=False)


def checked(fn, *args, **kwargs):
    """What a command makes of its options (a query from Peloton's words): a UserError is exit 2."""
    from pelotonctl.admin import UserError

    try:
        return fn(*args, **kwargs)
    except UserError as exc:
        fail(str(exc), EXIT_INVALID)


def cluster_call(fn, *args, invalid: str = "", **kwargs):
    """Call the cluster (either way) and turn what it refuses into one line and an exit code;
    `invalid` goes before the message of invalid input (the file it came from)."""
    from pelotonctl.admin import NotFound, UserError
    from pelotonctl.client import ApiUnavailable, NotPermitted

    try:
        return broker_call(lambda: fn(*args, **kwargs))
    except NotFound as exc:
        fail(str(exc), EXIT_NOT_FOUND)
    except UserError as exc:
        fail(f"{invalid}{exc}", EXIT_INVALID)
    except NotPermitted as exc:
        fail(f"not permitted: {exc}", EXIT_NOT_PERMITTED)
    except (ApiUnavailable, TimeoutError, ConnectionError) as exc:
        fail(str(exc), EXIT_UNAVAILABLE)
