"""The three layers of the code: imports point down only (tools -> stages -> core), and no modules
import each other in a circle. Every import counts: at the top of a module, inside a function,
or under TYPE_CHECKING."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LAYERS = ("peloton", "stages", "pelotonctl")  # from the bottom up


def _modules() -> dict[str, Path]:
    found = {}
    for package in LAYERS:
        for path in (REPO / package).rglob("*.py"):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _imports(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the project's modules it imports (a name imported from a package counts as the
    submodule when there is one by that name, else as the package)."""

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        found = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found.update(known(a.name) for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                    base = f"{parent}.{base}" if base else parent
                for a in node.names:
                    sub = f"{base}.{a.name}"
                    found.add(sub if sub in modules else known(base))
        found.discard(None)
        found.discard(module)
        graph[module] = found
    return graph


GRAPH = _imports(_modules())


def test_the_project_is_found() -> None:
    assert {"peloton.runtime.loop", "stages.place.placement", "pelotonctl.cli.job"} <= set(GRAPH)


def test_imports_point_down_only() -> None:
    upward = sorted(f"{m} imports {d}" for m, deps in GRAPH.items() for d in deps
                    if LAYERS.index(d.split(".")[0]) > LAYERS.index(m.split(".")[0]))
    assert not upward, "\n".join(upward)


def test_no_modules_import_each_other_in_a_circle() -> None:
    # A package's __init__ that re-exports its own modules is not a circle with them.
    def related(a: str, b: str) -> bool:
        return a.startswith(b + ".") or b.startswith(a + ".")

    edges = {m: sorted(d for d in deps if not related(m, d)) for m, deps in GRAPH.items()}
    circles = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        path.append(m)
        for d in edges[m]:
            if state.get(d) == 1:
                circles.append(" -> ".join(path[path.index(d):] + [d]))
            elif d not in state:
                visit(d)
        path.pop()
        state[m] = 2

    for m in sorted(edges):
        if m not in state:
            visit(m)
    assert not circles, "\n".join(circles)


def test_stages_speak_to_each_other_only_through_topics_and_the_store() -> None:
    """A stage imports the core and itself, never another stage: what two stages share (the host
    runtime, say) lives in the core. The registry beside them (stages/run.py) names them all."""
    crossing = sorted(f"{m} imports {d}" for m, deps in GRAPH.items() if m.startswith("stages.") and m.count(".") > 1
                      for d in deps if d.startswith("stages.") and d.split(".")[:2] != m.split(".")[:2]
                      and d != "stages")
    assert not crossing, "\n".join(crossing)
