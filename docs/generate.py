"""The docs site's hook (mkdocs.yml `hooks:`): before each build, `mkdocs serve`'s rebuilds
included, the reference pages are generated from the code (pelotonctl/reference/); a page is
written only when its text changed, so that `mkdocs serve` does not rebuild forever.
`python docs/generate.py` writes them alone."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as a script or loaded by MkDocs: the project's packages import from the checkout
    sys.path.insert(0, str(REPO))

from pelotonctl.reference import write_pages  # noqa: E402 (after the path above)


def on_pre_build(config: Any) -> None:
    """MkDocs hook: the reference pages, before MkDocs reads the docs folder."""
    write_pages(Path(config["docs_dir"]) / "reference")


if __name__ == "__main__":
    for written in write_pages():
        print(f"wrote {written.relative_to(REPO)}")
