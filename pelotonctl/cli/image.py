"""pelotonctl image: the container images this machine's agents run tasks in. No registry is
reachable here, so an image is a root file system imported into the image directory
(PELOTON_IMAGE_DIR, by default $PELOTON_HOME/images)."""

from __future__ import annotations

import shutil
from pathlib import Path

import typer

from pelotonctl.cli.common import EXIT_INVALID, JSON_HELP, commands, fail, load_settings, out, print_json

# Where the runtime mounts the kernel's file systems, the task's sandbox and its /tmp.
MOUNT_POINTS = ("proc", "sys", "dev", "tmp", "sandbox")

image_app = commands("Container images (root file systems) for tasks that name one.")


@image_app.command("import")
def image_import(name: str = typer.Argument(..., help="The image's name as jobs write it, e.g. debian:bookworm."),
                 rootfs: Path = typer.Argument(..., help="A root file system (a directory, e.g. made by debootstrap)."),
                 force: bool = typer.Option(False, "--force", help="Replace an image of that name."),
                 as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """Copy a root file system into the image directory under NAME, for the agents on this machine."""
    from peloton.host.containers import image_directory_name
    from peloton.model.taskconfig import _IMAGE

    if not _IMAGE.fullmatch(name) or ".." in name:
        fail(f"{name!r}: an image name is letters, digits and . _ / : @ + - (like debian:bookworm)", EXIT_INVALID)
    if not (rootfs / "bin").exists() and not (rootfs / "usr").exists():
        fail(f"{rootfs}: not a root file system (no bin or usr in it)", EXIT_INVALID)
    target = load_settings().images() / image_directory_name(name) / "rootfs"
    if target.exists():
        if not force:
            fail(f"image {name} is already in {target.parent.parent} (--force replaces it)", EXIT_INVALID)
        shutil.rmtree(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(rootfs, target, symlinks=True)
    for mount_point in MOUNT_POINTS:  # the runtime mounts there, and the image is read-only when it runs
        (target / mount_point).mkdir(exist_ok=True)
    target.chmod(0o755)  # tasks run as their own users: a 0700 top (mktemp -d) would shut them out
    if as_json:
        print_json({"name": name, "path": str(target)})
    else:
        out.print(f"image {name} imported into {target}", highlight=False)


@image_app.command("list")
def image_list(as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """The images in the image directory."""
    root = load_settings().images()
    rows = sorted(str(p.parent.relative_to(root)) for p in root.glob("*/rootfs")) if root.exists() else []
    if as_json:
        print_json(rows)
    else:
        for row in rows:
            out.print(row, highlight=False)
