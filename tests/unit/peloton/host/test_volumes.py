"""A persistent volume's folder on a host: made once, reached from each run's sandbox by a
relative link (or a mount point for a run in an image), never a path outside the sandbox, and
removed when deleted."""

from __future__ import annotations

import os

import pytest

from peloton.host.identities import give_back_volumes
from peloton.host.volumes import delete_volume, link_volume, mount_point, prepare_volume, volume_path


def test_a_volume_outlives_its_runs_sandboxes(tmp_path) -> None:
    root = tmp_path / "sandboxes"
    root.mkdir()
    for run in (1, 2):
        sandbox = root / f"j-0-{run}"
        sandbox.mkdir()
        link = link_volume(sandbox, "state/db", prepare_volume(root, "j-0", None), None)
        assert os.readlink(link) == "../../.volumes/j-0"
        (link / "log").open("a").write(f"run {run}\n")
    assert (volume_path(root, "j-0") / "log").read_text() == "run 1\nrun 2\n"
    assert oct(volume_path(root, "j-0").stat().st_mode & 0o777) == "0o700"
    assert mount_point(root / "j-0-3", "state/db", None) == "/sandbox/state/db"
    assert (root / "j-0-3" / "state" / "db").is_dir()
    assert delete_volume(root, "j-0") and not volume_path(root, "j-0").exists()
    assert not delete_volume(root, "j-0")  # gone already


def test_a_volume_path_never_leaves_the_sandbox_nor_its_id_the_volumes_folder(tmp_path) -> None:
    for bad in ("../x", "/etc", "a/../../b", ""):
        with pytest.raises(ValueError):
            link_volume(tmp_path, bad, tmp_path, None)
    for bad in ("../x", "a/b", ""):
        with pytest.raises(ValueError):
            volume_path(tmp_path, bad)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving files to other uids needs root")
def test_a_volume_is_its_runs_account_s_and_roots_once_the_uid_is_given_back(tmp_path) -> None:
    from peloton.host.identities import Account

    root = tmp_path / "sandboxes"
    root.mkdir()
    account = Account(61999, 61999, "job")
    volume = prepare_volume(root, "j-0", account)
    (volume / "data").write_text("x")
    os.chown(volume / "data", 61999, 61999)
    assert volume.stat().st_uid == 61999
    assert give_back_volumes(root, 61999) == 1
    assert volume.stat().st_uid == 0 and (volume / "data").stat().st_uid == 0
