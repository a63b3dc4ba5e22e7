"""The jars folder's completion mark: whole jars from the pom as it is now, or fetch again."""

from __future__ import annotations

import hashlib

from pelotonctl.dev import jars


def test_jars_count_as_fetched_only_for_the_pom_they_came_from(tmp_path, monkeypatch) -> None:
    (tmp_path / "jvm" / "kafka").mkdir(parents=True)
    pom = tmp_path / "jvm" / "kafka" / "pom.xml"
    pom.write_text("<kafka.version>4.1.1</kafka.version>")
    monkeypatch.setattr(jars, "REPO_ROOT", tmp_path)
    monkeypatch.setattr(jars, "JARS", tmp_path / ".jars")
    folder = tmp_path / ".jars" / "kafka"
    folder.mkdir(parents=True)
    mark = jars.pom_mark("kafka")
    assert mark == hashlib.sha256(pom.read_bytes()).hexdigest()  # what the Makefile's sha256sum writes

    assert not jars.is_complete(folder, mark)  # no mark: a fetch cut short
    (folder / ".complete").touch()
    assert not jars.is_complete(folder, mark)  # an empty mark, from before the mark held the pom's hash
    (folder / ".complete").write_text(mark + "\n")
    assert jars.is_complete(folder, mark)
    monkeypatch.setattr(jars.shutil, "which", lambda name: None)  # fetch() must not need Maven now
    assert jars.fetch("kafka") == folder

    pom.write_text("<kafka.version>4.1.2</kafka.version>")  # the pin moved: these jars are not its
    assert not jars.is_complete(folder, jars.pom_mark("kafka"))
    try:
        jars.fetch("kafka")
    except jars.JarsUnavailable as exc:
        assert "Maven" in str(exc)
    else:
        raise AssertionError("jars of another pom were taken for the pinned ones")
