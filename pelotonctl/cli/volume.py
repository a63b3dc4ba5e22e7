"""pelotonctl volume: Peloton's persistent volumes (list, delete), and get."""

from __future__ import annotations

import datetime
import sys

import typer

from pelotonctl.cli.common import JSON_HELP, client, cluster_call, commands, print_json

volume_app = commands("Persistent volumes: each instance of a stateful job keeps its volume on the host where it "
                      "first ran, across its runs, until the volume or its job is deleted.")


@volume_app.command("list")
def volume_list(job_id: str | None = typer.Argument(None, metavar="JOB", help="job identifier (none: every "
                                                                                 "volume you may read)"),
                as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """A job's volumes by instance, DELETED ones too: host, path in the sandbox, size, state."""
    found = cluster_call(client().volumes, job_id)
    if as_json:
        print_json({"volumes": found})
        return
    if not found:
        sys.stdout.write("No volume was found\n")
        return
    print_volumes(found)


@volume_app.command("get")
def volume_get(volume_id: str = typer.Argument(..., metavar="VOLUME", help="volume identifier (<job>-<instance>)"),
               as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """One volume: its job and instance, host, path in the sandbox, size, state and times."""
    volume = cluster_call(client().volume, volume_id)
    print_json(volume) if as_json else print_volumes([volume])


@volume_app.command("delete")
def volume_delete(volume_id: str = typer.Argument(..., metavar="VOLUME", help="volume identifier "
                                                                              "(<job>-<instance>)"),
                  as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """Delete a volume: its directory is removed from its host. Only once its job has ended (or
    is gone): a job not ended may run the instance on it again (exit 2). A volume deleted
    already is said so (exit 0)."""
    done = cluster_call(client().delete_volume, volume_id)
    if as_json:
        print_json(done)
    elif done["already_deleted"]:
        sys.stdout.write(f"Volume {volume_id} was deleted already ({when(done['updated_ms'])}).\n")
    else:
        sys.stdout.write(f"Deleted volume {volume_id} (instance {done['instance']} of job {done['job_id']}) on host "
                         f"{done['host_id'] or '-'}.\n")


def print_volumes(rows: list[dict]) -> None:
    """Peloton's columns (its goal state is the state here: a volume is CREATED or DELETED)."""
    id_width = max(9, *(len(v["volume_id"]) for v in rows))
    job_width = max(6, *(len(v["job_id"]) for v in rows))
    host_width = max(8, *(len(v["host_id"]) for v in rows))
    sys.stdout.write(f"{'VOLUME ID':<{id_width}} {'JOB ID':<{job_width}} {'INSTANCE':>8} {'HOSTNAME':<{host_width}} "
                     f"{'STATE':<8} {'SIZE MB':>8}  {'CONTAINER PATH':<16} {'CREATE TIME':<19} UPDATE TIME\n")
    for v in rows:
        sys.stdout.write(f"{v['volume_id']:<{id_width}} {v['job_id']:<{job_width}} {v['instance']:>8} "
                         f"{v['host_id'] or '-':<{host_width}} {v['state']:<8} {v['size_mb']:>8}  "
                         f"{v['container_path']:<16} {when(v['created_ms']):<19} {when(v['updated_ms'])}\n")


def when(ms: int | None) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S") if ms else "-"
