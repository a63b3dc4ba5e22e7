"""pelotonctl job stateless: Peloton's `job stateless replace-diff`, what a replace (an update) of
a job with a new spec would do to each instance, sent nowhere. The other `job stateless` forms are
the job commands (docs/peloton/migration.md)."""

from __future__ import annotations

from pathlib import Path

import typer
import yaml

from pelotonctl.cli.common import (
    EXIT_NOT_FOUND,
    JSON_HELP,
    checked,
    client,
    cluster_call,
    commands,
    fail,
    out,
    print_json,
    read_text,
)

stateless_app = commands("Peloton's stateless job forms: replace-diff.")


def replace_diff(old_text: str, new_text: str) -> dict[str, list[int]]:
    """Instances a replace adds, removes, updates (their task config changes) and leaves as they are."""
    from pelotonctl.admin import validate_job
    from stages.admit.commands import replace_diff as diff

    return diff(validate_job(old_text), validate_job(new_text))


@stateless_app.command("replace-diff")
def stateless_replace_diff(job_id: str, spec: Path,
                           respool: str | None = typer.Argument(None, help="Peloton's form: the pool path (a replace "
                                                                          "keeps the job's pool)."),
                           entity_version: str | None = typer.Argument(None, help="Peloton's form: accepted; the "
                                                                                  "diff is against the job as it is."),
                           as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """Which instances replacing the job's spec with SPEC would add, remove, update and leave
    alone, as Peloton's `job stateless replace-diff` (nothing is sent)."""
    del entity_version
    job = cluster_call(client().job, job_id)
    if job is None:
        fail(f"no job {job_id}", EXIT_NOT_FOUND)
    if respool and respool.rstrip("/") != job["pool"]:
        fail(f"job {job_id} is in {job['pool']}, not {respool}: a replace keeps the job's pool", 2)
    current = job["config"] if isinstance(job["config"], str) else yaml.safe_dump(job["config"])
    diff = checked(replace_diff, current, read_text(spec))
    if as_json:
        print_json(diff)
        return
    for key, instances in diff.items():
        out.print(f"{key.replace('_', ' ')}: {', '.join(map(str, instances)) or 'none'}", highlight=False)
