"""pelotonctl dead-letters: messages a stage could not use, shown and sent again."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.table import Table

from pelotonctl.cli.common import (
    EXIT_INVALID,
    JSON_HELP,
    client,
    cluster_call,
    commands,
    fail,
    key_values,
    out,
    print_json,
    read_text,
)

letters_app = commands("The dead-letter topic: messages a stage could not use, with the reason.")


def _since(text: str | None) -> int | None:
    """--since: seconds, minutes, hours or days ago (30s, 10m, 2h, 1d), as epoch ms."""
    import time

    if text is None:
        return None
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    try:
        amount, unit = float(text[:-1]), units[text[-1]]
    except (KeyError, ValueError, IndexError):
        fail(f"--since {text!r}: expected a number and a unit, as 30s, 10m, 2h or 1d", EXIT_INVALID)
    return int((time.time() - amount * unit) * 1000)


@letters_app.command("list")
def letters_list(
    since: str | None = typer.Option(None, "--since", help="Only letters from this long ago: 30s, 10m, 2h, 1d."),
    stage: str | None = typer.Option(None, "--stage", help="Only letters from this stage (admit, launch, ...)."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Every dead letter: number, time, stage, source topic, partition, offset, reason."""
    import datetime

    rows = cluster_call(client().dead_letters, _since(since), stage)
    if as_json:
        print_json(rows)
        return
    if not rows:
        out.print("no dead letters" + (" matching" if since or stage else ""))
        return
    table = Table("#", "time", "stage", "source", "reason")
    for r in rows:
        at = datetime.datetime.fromtimestamp(r["time_ms"] / 1000).strftime("%Y-%m-%d %H:%M:%S")
        reason = r["reason"] if len(r["reason"]) <= 160 else r["reason"][:157] + "..."
        table.add_row(str(r["number"]), at, r["stage"], f"{r['source_topic']}[{r['partition']}]@{r['offset']}", reason)
    out.print(table)


@letters_app.command("show")
def letters_show(number: str, as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """One dead letter whole: where it came from, why, and the original message decoded where possible."""
    shown = cluster_call(client().dead_letter, number)
    if as_json:
        print_json(shown)
        return
    for field in ("number", "stage", "source_topic", "partition", "offset", "key", "reason"):
        out.print(f"[bold]{field:<13}[/bold] {shown[field]}", highlight=False)
    original = shown["original"]
    if original["schema"]:
        out.print(f"[bold]{'schema':<13}[/bold] {original['schema']}", highlight=False)
        for field, value in original["value"].items():
            text = value if isinstance(value, str) else json.dumps(value)
            if "\n" in text:
                out.print(f"[bold]{field}[/bold]:", highlight=False)
                out.print(text.rstrip("\n"), highlight=False, markup=False)
            else:
                out.print(f"[bold]{field:<13}[/bold] {text}", highlight=False, markup=False)
    else:
        out.print(f"[bold]{'original':<13}[/bold] ", end="", highlight=False)
        out.print(f"not decodable: {original['error']}", highlight=False, markup=False)
        if original.get("text") is not None:
            out.print(original["text"], highlight=False, markup=False)


@letters_app.command("replay")
def letters_replay(
    number: str,
    value: Path | None = typer.Option(None, "--value", help="JSON file: the whole fixed record (as `show --json` "
                                      "prints under original.value)."),
    set_fields: list[str] = typer.Option([], "--set", help="FIELD=VALUE or FIELD=@FILE: replace one field of the "
                                         "record, e.g. --set config=@fixed.yaml; repeat for several."),
    schema: str | None = typer.Option(None, "--schema", help="The record's schema, when the original cannot be "
                                      "decoded (e.g. peloton.JobCommand)."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Send a dead letter's message back to its topic, fixed with --value or --set (or as it was,
    when what refused it has changed, e.g. its pool now exists)."""
    record = None
    if value is not None:
        try:
            record = json.loads(read_text(value))
        except ValueError as exc:
            fail(f"--value {value}: not JSON: {exc}", EXIT_INVALID)
        if isinstance(record, dict) and isinstance(record.get("original"), dict):  # a whole `show --json`
            record = record["original"].get("value")
        if not isinstance(record, dict):
            fail(f"--value {value}: expected a JSON object (the record)", EXIT_INVALID)
    sets = {k: (read_text(Path(v[1:])) if v.startswith("@") else v) for k, v in key_values(set_fields, "--set").items()}
    sent = cluster_call(client().replay_dead_letter, number, record, sets, schema)
    if as_json:
        print_json(sent)
    else:
        out.print(f"dead letter {sent['number']} sent again to {sent['topic']}[{sent['partition']}] as "
                  f"{sent['schema'] or 'its original bytes'} ({sent['bytes']:,} bytes)", highlight=False)
