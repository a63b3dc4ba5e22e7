"""Server jars from Maven Central: jvm/NAME/pom.xml lists a server's artifacts, and its runtime
jars are copied into .jars/NAME once (`make jars`, or fetch() on first use); later calls find
them, until the pom changes. Each server keeps a folder of its own: Kafka and Cassandra pin
different Netty, Guava and Jackson, so one classpath cannot hold both."""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import subprocess
from pathlib import Path

from peloton.config import REPO_ROOT

JARS = REPO_ROOT / ".jars"


class JarsUnavailable(RuntimeError):
    """The jars are missing and cannot be fetched; the message says why and what to run."""


def pom_mark(name: str) -> str:
    """What .jars/NAME/.complete holds once the jars are whole: the SHA-256 of the pom they came
    from (the Makefile's `sha256sum` writes the same), so a changed pin fetches again."""
    return hashlib.sha256((REPO_ROOT / "jvm" / name / "pom.xml").read_bytes()).hexdigest()


def is_complete(folder: Path, mark: str) -> bool:
    try:
        return (folder / ".complete").read_text().split()[0] == mark
    except (OSError, IndexError):  # no mark yet, or an empty one (before the mark held the pom's hash)
        return False


def fetch(name: str) -> Path:
    """The folder of NAME's jars, fetched with Maven from jvm/NAME/pom.xml when missing or when
    they came from another version of the pom."""
    folder = JARS / name
    mark = pom_mark(name)
    if is_complete(folder, mark):
        return folder
    if shutil.which("mvn") is None:
        raise JarsUnavailable(f"{name}'s jars are not in {folder} and Maven (mvn) is not on PATH to fetch them; "
                              "install Maven and run `make jars`")
    JARS.mkdir(parents=True, exist_ok=True)
    with open(JARS / f".{name}.lock", "w") as lock:  # two test sessions may ask at once
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not is_complete(folder, mark):
            partial = folder.with_name(f"{name}.partial")
            shutil.rmtree(partial, ignore_errors=True)
            done = subprocess.run(["mvn", "-q", "-B", "-f", str(REPO_ROOT / "jvm" / name / "pom.xml"),
                                   "org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies",
                                   f"-DoutputDirectory={partial}", "-DincludeScope=runtime"],
                                  capture_output=True, text=True)
            if done.returncode != 0:
                said = (done.stdout + done.stderr)[-3000:]
                raise JarsUnavailable(f"fetching {name}'s jars with Maven failed:\n{said}")
            shutil.rmtree(folder, ignore_errors=True)
            partial.rename(folder)  # whole or not at all: an interrupted fetch leaves no half folder
            (folder / ".complete").write_text(mark + "\n")
    return folder
