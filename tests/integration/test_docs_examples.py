"""The examples of README.md and of the tutorials (docs/tutorials/), run as written: the project's
doctest for its documentation.

Every fenced block says what it is. `sh` blocks run in bash (strict mode: set -euo pipefail) from
the checkout's root; `python` blocks run with the project's Python from there, with what
`pelotonctl dev env --kafka-user producer` exports (what the tutorial has the reader export
first), and a python block that publishes to job-commands must print the id of a job that then
SUCCEEDS. The `java` block, wherever it is, is jvm/examples' SubmitJob, which test_java_clients
builds with Maven and runs against a pipeline: here its lines are checked to be SubmitJob's, in
order, and its schema id against ids.yaml. `text` blocks are pictures. The one line not run is
README's `make test`, the suite this test is part of (`make demo` runs, as a reader runs it: it
also makes the .venv the other blocks call).

README.md runs first, in a PELOTON_HOME of its own, whatever it keeps of a tour (and what it
starts is stopped after it). Then the tutorials run in the order docs/tutorials/index.md links
them, against one dev stack in another home: the first page starts it and the last page's last
block stops it. A page's blocks run as one reader's shell would: the variables a block sets
(JOB=..., an eval of `dev env`) are there in the page's later blocks, not in the next page's. A
block that fails fails the test naming the file and the line of the command that failed."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from peloton.config import REPO_ROOT

pytestmark = pytest.mark.integration

README = REPO_ROOT / "README.md"
TUTORIALS = REPO_ROOT / "docs" / "tutorials"
KINDS = {"sh", "python", "java", "text"}
NOT_RUN = {"make test"}  # README's Quick start: the suite this test is in (`make demo` runs, as a reader would)
BLOCK_TIMEOUT_S = 600


@dataclass
class Block:
    path: Path
    kind: str
    body: str
    line: int  # the line of its opening fence

    @property
    def where(self) -> str:
        return self.at(self.line)

    def at(self, line: int) -> str:
        return f"{_shown(self.path)} line {line}"


def _shown(path: Path) -> str:
    return str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path)


def blocks(path: Path) -> list[Block]:
    """Every fenced block of a Markdown file, in order."""
    text = path.read_text()
    return [Block(path, m.group(1), m.group(2), text.count("\n", 0, m.start()) + 1)
            for m in re.finditer(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", text, re.M | re.S)]


def tutorial_pages() -> list[Path]:
    """The tutorials in the order their index links them (each page once, at its first link)."""
    order: list[Path] = []
    for m in re.finditer(r"\]\(([\w.-]+\.md)(?:#[\w-]*)?\)", (TUTORIALS / "index.md").read_text()):
        page = TUTORIALS / m.group(1)
        if page.name != "index.md" and page not in order:
            order.append(page)
    return order


def documents() -> list[Path]:
    return [README, TUTORIALS / "index.md", *tutorial_pages()]


def java_blocks() -> list[Block]:
    return [b for path in documents() for b in blocks(path) if b.kind == "java"]


def submit_job_source() -> Path:
    [found] = [p for p in REPO_ROOT.glob("jvm/**/src/main/java/**/SubmitJob.java")]
    return found


def _headings(path: Path) -> list[str]:
    """The Markdown headings of a page, outside its fenced blocks."""
    text = re.sub(r"^```.*?^```[ \t]*$", "", path.read_text(), flags=re.M | re.S)
    return re.findall(r"^#{1,6} .*$", text, re.M)


# -- what the documents must be, checked without a cluster ---------------------------------------

def test_every_block_of_the_readme_and_the_tutorials_says_what_it_is() -> None:
    for path in [README, *sorted(TUTORIALS.glob("*.md"))]:
        for b in blocks(path):
            assert b.kind in KINDS, f"{b.where}: a block marked {b.kind!r}; mark it one of {sorted(KINDS)}"


def test_the_tutorials_index_links_every_page_and_the_first_starts_the_stack_the_last_stops() -> None:
    pages = tutorial_pages()
    assert pages, "docs/tutorials/index.md links no page"
    missing = [p.name for p in pages if not p.exists()]
    assert not missing, f"docs/tutorials/index.md links pages that are not there: {missing}"
    unlisted = sorted(p.name for p in TUTORIALS.glob("*.md") if p.name != "index.md" and p not in pages)
    assert not unlisted, f"tutorials that docs/tutorials/index.md does not give a place in its order: {unlisted}"
    for page in [TUTORIALS / "index.md", *pages]:
        h1 = [h for h in _headings(page) if h.startswith("# ")]
        assert len(h1) == 1, f"{_shown(page)}: one H1 per page, not {h1}"
    runnable = [[b for b in blocks(p) if b.kind in ("sh", "python")] for p in pages]
    idle = [p.name for p, r in zip(pages, runnable, strict=True) if not r]
    assert not idle, f"tutorials with nothing to run: {idle}"
    first, last = runnable[0][0], runnable[-1][-1]
    assert "pelotonctl dev up" in first.body, f"{first.where}: the first tutorial's first block starts no dev stack"
    assert "pelotonctl dev down" in last.body, f"{last.where}: the last tutorial's last block leaves the stack running"


def test_the_java_producer_uses_the_schema_id_of_ids_yaml() -> None:
    ids = yaml.safe_load((REPO_ROOT / "schemas" / "avro" / "ids.yaml").read_text())
    java = java_blocks()
    assert java, "neither the README nor a tutorial holds the Java producer any more"
    for b in java:
        assert re.findall(r"putInt\((\d+)\)", b.body) == [str(ids["peloton.JobCommand"])], b.where


def test_every_line_of_the_java_producer_is_a_line_of_submit_job_in_the_same_order() -> None:
    # SubmitJob's own lines (its arguments, the topic prefix) sit between them; a line changed on
    # one side only would leave the docs showing code that no test runs.
    submit_job = submit_job_source()
    source = [line.strip() for line in submit_job.read_text().splitlines()]
    for b in java_blocks():
        at = 0
        for line in filter(None, (line.strip() for line in b.body.splitlines())):
            assert line in source[at:], (f"{b.where}: the Java line {line!r} is not in "
                                         f"{submit_job.relative_to(REPO_ROOT)} after its line {at}: change both")
            at = source.index(line, at) + 1


# -- running them ------------------------------------------------------------------------------

# Before a block: the page's shell so far (what its earlier blocks set), strict mode, and a trap
# that names the line of a command that failed. After it: what it set, for the page's next block
# (every variable bash did not start with; the bookkeeping's own start with __).
_PRELUDE = """\
declare -A __known=(); for __v in $(compgen -v); do __known[$__v]=1; done
if [ -f "$__STATE" ]; then source "$__STATE"; fi
set -euo pipefail
trap 'echo "__FAILED_AT_LINE $LINENO" >&2' ERR
"""
_EPILOGUE = """
trap - ERR
for __v in $(compgen -v); do
  case "$__v" in __*|BASH*|PIPESTATUS|FUNCNAME|GROUPS|COLUMNS|LINES|_) continue;; esac
  if [ -z "${__known[$__v]+x}" ]; then declare -p "$__v"; fi
done > "$__STATE.new"
mv "$__STATE.new" "$__STATE"
"""


@dataclass
class Reader:
    """One reader at one terminal: a PELOTON_HOME, and the shell state of the page being read."""
    home: Path
    work: Path
    ran: list[str] = field(default_factory=list)
    produced: list[str] = field(default_factory=list)

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PELOTON_")}
        env.update(PELOTON_HOME=str(self.home), PELOTON_SESSION_TIMEOUT_MS="2000", PYTHONUNBUFFERED="1")
        return env

    def read(self, path: Path) -> None:
        """Run every sh and python block of one document, in order, in one shell of its own."""
        state = self.work / f"{path.stem}.state"
        state.unlink(missing_ok=True)
        for b in blocks(path):
            if b.kind == "sh":
                self._sh(b, state)
            elif b.kind == "python":
                self._python(b)
            else:
                continue
            self.ran.append(f"{path.name}@{b.line}")

    def _sh(self, b: Block, state: Path) -> None:
        # Lines not run stay as no-ops, so that the script's line numbers are the block's.
        lines = [": not run here" if line.split("#")[0].strip() in NOT_RUN else line for line in b.body.splitlines()]
        script = _PRELUDE + "\n".join(lines) + "\n" + _EPILOGUE
        offset = _PRELUDE.count("\n")
        # Its output goes to files, not pipes: a command a block leaves in the background (a stream
        # it follows) would otherwise hold the pipes open past the block's end.
        out, err = self.work / "block.out", self.work / "block.err"
        with out.open("w") as stdout, err.open("w") as stderr:
            try:
                code = subprocess.run(["bash", "-c", script], cwd=REPO_ROOT, env={**self.env(), "__STATE": str(state)},
                                      stdout=stdout, stderr=stderr, timeout=BLOCK_TIMEOUT_S).returncode
            except subprocess.TimeoutExpired:
                pytest.fail(f"{b.where} (sh) did not end within {BLOCK_TIMEOUT_S} s:\n{out.read_text()[-3000:]}\n"
                            f"{err.read_text()[-3000:]}")
        result = subprocess.CompletedProcess(["bash"], code, out.read_text(), err.read_text())
        failed_at = re.findall(r"__FAILED_AT_LINE (\d+)", result.stderr)
        where = b.at(b.line + int(failed_at[0]) - offset) if failed_at else b.where
        stderr_text = re.sub(r"__FAILED_AT_LINE \d+\n?", "", result.stderr)
        assert result.returncode == 0, (f"{where} (in the sh block of line {b.line}) failed with {result.returncode}:"
                                        f"\n{result.stdout[-3000:]}\n{stderr_text[-3000:]}")
        assert "Traceback" not in result.stderr, f"{b.where}: {result.stderr[-3000:]}"

    def _python(self, b: Block) -> None:
        script = self.work / f"{b.path.stem}_{b.line}.py"
        script.write_text(b.body)
        # What the tutorial has the reader export first: the dev stack's producer.
        exports = subprocess.run([sys.executable, "-m", "pelotonctl", "dev", "env", "--kafka-user", "producer"],
                                 cwd=REPO_ROOT, env=self.env(), capture_output=True, text=True, timeout=60)
        assert exports.returncode == 0, f"{b.where}: `pelotonctl dev env --kafka-user producer`: {exports.stderr}"
        producer = dict(shlex.split(row)[1].split("=", 1) for row in exports.stdout.splitlines())
        try:
            result = subprocess.run([sys.executable, str(script)], cwd=REPO_ROOT, env={**self.env(), **producer},
                                    capture_output=True, text=True, timeout=120)
        except subprocess.TimeoutExpired as exc:
            pytest.fail(f"{b.where} (python) did not end within 120 s:\n{exc.stdout!r}\n{exc.stderr!r}")
        assert result.returncode == 0, (f"{b.where} (python) failed with {result.returncode}:\n"
                                        f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
        if "job-commands" in b.body:  # a producer: the job it published runs to its end
            assert result.stdout.split(), f"{b.where}: the producer printed no job id"
            job_id = result.stdout.split()[-1]
            waited = subprocess.run([sys.executable, "-m", "pelotonctl", "job", "status", job_id, "--wait",
                                     "--timeout", "60", "--json"], cwd=REPO_ROOT, env=self.env(),
                                    capture_output=True, text=True, timeout=120)
            assert waited.returncode == 0, (f"{b.where}: the producer's job {job_id} did not succeed "
                                            f"(exit {waited.returncode}):\n{waited.stdout[-2000:]}\n{waited.stderr}")
            self.produced.append(job_id)

    def stop(self) -> None:
        subprocess.run([sys.executable, "-m", "pelotonctl", "dev", "down"], cwd=REPO_ROOT, env=self.env(),
                       capture_output=True, timeout=120)


@pytest.mark.long
def test_every_example_in_the_readme_and_the_tutorials_runs_as_written(tmp_path) -> None:
    readme = Reader(tmp_path / "readme-home", tmp_path)
    try:
        readme.read(README)
    finally:
        readme.stop()  # whatever the README left running
    tutorials = Reader(tmp_path / "tutorial-home", tmp_path)
    pages = [TUTORIALS / "index.md", *tutorial_pages()]
    try:
        for page in pages:
            before = len(tutorials.ran)
            tutorials.read(page)
            assert page.name == "index.md" or len(tutorials.ran) > before, f"{page.name}: nothing ran"
    finally:
        tutorials.stop()
    produced = readme.produced + tutorials.produced
    assert produced, "no python block published a job (the producer moved out of README and the tutorials?)"
    print(f"ran {readme.ran + tutorials.ran}; the producers made jobs {produced}")
