"""Persistent volumes on a host: a directory per volume under the sandboxes' root
(`.volumes/<volume id>`, 0700, given to the run's account at each launch and to root when its
job's uid is released: identities.give_back_volumes), reached from the run's sandbox at the
volume's containerPath: a relative link for a run on the host's file system, a bind mount for a
run in an image. Kept across the instance's runs until the volume is deleted."""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

from peloton.model.volumes import container_path_problem

from .identities import VOLUMES_DIR, Account, own_tree


def volume_path(sandbox_root: Path, volume_id: str) -> Path:
    """<sandbox_root>/.volumes/<volume id>; ids are plain names (ValueError otherwise)."""
    if volume_id in ("", ".", "..") or "/" in volume_id or "\0" in volume_id:
        raise ValueError(f"volume id {volume_id!r} cannot name a volume directory")
    return Path(sandbox_root) / VOLUMES_DIR / volume_id


def prepare_volume(sandbox_root: Path, volume_id: str, account: Account | None) -> Path:
    """The volume's directory, made if new, and everything in it given to the run's account
    (whatever uid its job had before). Its folder lets others through (0711) but not list it."""
    path = volume_path(sandbox_root, volume_id)
    path.parent.mkdir(mode=0o711, exist_ok=True)
    os.chmod(path.parent, 0o711)
    path.mkdir(mode=0o700, exist_ok=True)
    os.chmod(path, 0o700, follow_symlinks=False)
    if account is not None:
        own_tree(path, None, account.uid, account.gid)
    return path


def in_sandbox(sandbox: Path, container_path: str) -> Path:
    """Where a volume's containerPath is in the sandbox (ValueError for one that leaves it)."""
    problem = container_path_problem(container_path)
    if problem:
        raise ValueError(f"volume containerPath {container_path!r} {problem}")
    return sandbox / container_path


def link_volume(sandbox: Path, container_path: str, volume: Path, account: Account | None) -> Path:
    """The sandbox's link at container_path to the volume, relative (`../.volumes/<id>`): a run
    reaches it from its sandbox without passing through the folders above the sandboxes' root.
    What the sandbox held at that name (an earlier attempt's link) is replaced."""
    link = in_sandbox(sandbox, container_path)
    made = []
    for parent in reversed(link.relative_to(sandbox).parents):
        folder = sandbox / parent
        if folder != sandbox and not folder.is_dir():
            folder.mkdir(mode=0o700)
            made.append(folder)
    if account is not None:
        for folder in made:
            os.chown(folder, account.uid, account.gid, follow_symlinks=False)
    with contextlib.suppress(FileNotFoundError):
        if link.is_symlink() or link.is_file():
            link.unlink()
        elif link.is_dir():
            link.rmdir()  # an empty mount point left by a run in an image
    os.symlink(os.path.relpath(volume, link.parent), link)
    if account is not None:
        os.chown(link, account.uid, account.gid, follow_symlinks=False)
    return link


def mount_point(sandbox: Path, container_path: str, account: Account | None) -> str:
    """For a run in an image: the empty folder the volume is bound onto, and its path inside the
    container (the sandbox is /sandbox there)."""
    target = in_sandbox(sandbox, container_path)
    if target.is_symlink():
        target.unlink()
    target.mkdir(mode=0o700, parents=True, exist_ok=True)
    if account is not None:
        os.chown(target, account.uid, account.gid, follow_symlinks=False)
    return f"/sandbox/{container_path}"


def delete_volume(sandbox_root: Path, volume_id: str) -> bool:
    """Remove a volume's directory and what is in it; False when there was none."""
    path = volume_path(sandbox_root, volume_id)
    if not path.is_dir() or path.is_symlink():
        return False
    shutil.rmtree(path)
    return True
