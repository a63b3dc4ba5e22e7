"""api.md: the HTTP API's OpenAPI document, from the FastAPI app over a throwaway SQLite store, and
the permission each route checks (read from the route's code with ast)."""

from __future__ import annotations

import ast
import inspect
import json
import re
import sys
import tempfile
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pelotonctl.reference.markdown import banner, cell, code, paragraphs, prose, table


def api_app() -> Any:
    """The API's FastAPI app as `pelotonctl api` builds it, over a throwaway SQLite store and an
    emitter with no broker: nothing is served or sent, the app is only asked for its OpenAPI
    document and routes."""
    from peloton.config import Settings
    from peloton.runtime import RecordingEmitter, StaticView
    from peloton.store import open_store
    from pelotonctl.api.app import make_app
    from pelotonctl.api.audit import Audit

    with tempfile.TemporaryDirectory(prefix="peloton-docs-") as scratch:
        home = Path(scratch)
        store = open_store(home / "peloton.db")
        try:
            app = make_app(Settings(home=home, store=str(home / "peloton.db")), store, RecordingEmitter("api"),
                           Audit(RecordingEmitter("api"), 1.0), StaticView({}))
            app.openapi()  # made now and kept: the store goes with the directory
        finally:
            store.close()
    return app


def openapi_document() -> dict[str, Any]:
    return api_app().openapi()


def _evaluate(node: ast.AST, env: dict[str, str]) -> str | None:
    """A string a route computes from constants, its helpers' arguments and its own path parameters
    ({name}); None when it is not that simple."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return env.get(node.id, "{" + node.id + "}")
    if isinstance(node, ast.JoinedStr):
        parts = [_evaluate(v.value if isinstance(v, ast.FormattedValue) else v, env) for v in node.values]
        return None if None in parts else "".join(p or "" for p in parts)
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("lower", "upper")
            and not node.args):
        inner = _evaluate(node.func.value, env)
        if inner is None or inner.startswith("{"):
            return inner
        return inner.lower() if node.func.attr == "lower" else inner.upper()
    return None


def route_permissions(fn: Callable[..., Any], env: dict[str, str] | None = None,
                      depth: int = 0) -> tuple[list[str], list[str]]:
    """What a route function checks the caller may do (door.allow(who, ACTION, ...), and
    door.readable_job: job.read), and what it filters its answer by (decide(who, ACTION, ...)):
    in it and in the helpers of its module it calls, their arguments followed."""
    env = dict(env or {})
    module = sys.modules[fn.__module__]
    function = ast.parse(textwrap.dedent(inspect.getsource(fn))).body[0]
    for node in sorted((n for n in ast.walk(function) if isinstance(n, ast.Assign)), key=lambda n: n.lineno):
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = _evaluate(node.value, env)
            if value is not None:
                env[node.targets[0].id] = value
    checks: list[str] = []
    filters: list[str] = []
    calls = sorted((n for n in ast.walk(function) if isinstance(n, ast.Call)), key=lambda n: (n.lineno, n.col_offset))
    for node in calls:
        f = node.func
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "door":
            if f.attr == "allow" and len(node.args) >= 2:
                checks.append(_evaluate(node.args[1], env) or "?")
            elif f.attr == "readable_job":
                checks.append("job.read")
        elif isinstance(f, ast.Name) and f.id == "decide" and len(node.args) >= 2:
            filters.append(_evaluate(node.args[1], env) or "?")
        elif isinstance(f, ast.Name) and depth < 3:
            helper = getattr(module, f.id, None)
            if inspect.isfunction(helper) and helper.__module__ == module.__name__:
                names = list(inspect.signature(helper).parameters)
                bound = {names[i]: _evaluate(a, env) for i, a in enumerate(node.args) if i < len(names)}
                bound.update({k.arg: _evaluate(k.value, env) for k in node.keywords if k.arg})
                more_checks, more_filters = route_permissions(
                    helper, {k: v for k, v in bound.items() if v is not None}, depth + 1)
                checks += more_checks
                filters += more_filters
    return list(dict.fromkeys(checks)), list(dict.fromkeys(filters))


def api_routes(app: Any) -> dict[tuple[str, str], Callable[..., Any]]:
    """(path, method) -> route function, through the routers the app includes."""
    from fastapi.routing import APIRoute

    found: dict[tuple[str, str], Callable[..., Any]] = {}

    def walk(routes: list[Any], prefix: str) -> None:
        for route in routes:
            if isinstance(route, APIRoute):
                path = re.sub(r"\{(\w+):\w+\}", r"{\1}", prefix + route.path)  # {path:path} is {path} in OpenAPI
                found.update({(path, m.lower()): route.endpoint for m in route.methods})
            inner = getattr(route, "original_router", None) or getattr(route, "app", None)
            if inner is not None and hasattr(inner, "routes") and inner is not route:
                walk(inner.routes, prefix + getattr(inner, "prefix", ""))

    walk(app.routes, "")
    return found


def _who_may(action: str) -> str:
    from peloton.auth import permissions

    pattern = re.compile("^" + re.sub(r"\\\{\w+\\\}", r"\\w+", re.escape(action)) + "$")
    for actions, who in ((permissions.ADMIN_ACTIONS, "administrators"),
                         (permissions.JOB_ACTIONS, "the pool's owners and administrators"),
                         (permissions.READ_ACTIONS, "any known user")):
        if any(pattern.match(a) for a in actions):
            return who
    return "see `peloton/auth/permissions.py`"


def _permission_line(op: dict[str, Any], endpoint: Callable[..., Any] | None) -> str:
    if not op.get("security"):
        return "Permission: none (no token).\n\n"
    checks, filters = route_permissions(endpoint) if endpoint else ([], [])
    said = [f"{code(a)} ({_who_may(a)})" for a in checks]
    left_out = [code(a) for a in filters if a not in checks]
    if left_out:
        said.append(f"the answer holds only what the caller has {' and '.join(left_out)} for")
    return "Permission: " + ("; ".join(said) if said else "a valid token") + ".\n\n"


def api_operations() -> list[tuple[str, str, dict[str, Any]]]:
    """(path, method, operation) of every operation in the OpenAPI document."""
    paths = openapi_document()["paths"]
    return [(path, method, op) for path, ops in paths.items() for method, op in ops.items()]


def _schema_type(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        return schema["$ref"].rsplit("/", 1)[-1]
    if "anyOf" in schema:
        return " or ".join(_schema_type(s) for s in schema["anyOf"])
    kind = schema.get("type", "any")
    if kind == "array":
        kind = f"array of {_schema_type(schema.get('items', {}))}"
    if "enum" in schema:
        kind += " (" + ", ".join(map(str, schema["enum"])) + ")"
    bounds = [f"{word} {schema[key]:g}" for key, word in (("minimum", "≥"), ("exclusiveMinimum", ">"),
                                                         ("maximum", "≤"), ("exclusiveMaximum", "<"))
              if key in schema]
    return kind + (f" ({', '.join(bounds)})" if bounds else "")


def api_md() -> str:
    app = api_app()
    doc = app.openapi()
    endpoints = api_routes(app)
    components = doc.get("components", {}).get("schemas", {})
    operations = [(path, method, op) for path, ops in doc["paths"].items() for method, op in ops.items()]
    out = [banner("pelotonctl/api", "HTTP API"), f"# HTTP API\n\n{doc['info']['title']} {doc['info']['version']}: "
           f"{len(doc['paths'])} paths, {len(operations)} operations, from the OpenAPI document the API serves "
           "at `/openapi.json` (interactive at `/docs`). Every operation but the probes takes a bearer token "
           "(`Authorization: Bearer <token>`, from `pelotonctl auth issue`); the permission each checks is "
           "read from its route's code.\n\n",
           paragraphs(doc["info"].get("description", "")) + "\n\n"]
    tag = None
    for path, method, op in operations:
        if (op.get("tags") or ["other"])[0] != tag:
            tag = (op.get("tags") or ["other"])[0]
            out.append(f"## {tag.capitalize()}\n\n")
        out.append(f"### {method.upper()} {code(path)}\n\n")
        if op.get("summary"):
            out.append(prose(op["summary"].rstrip(".")) + ".\n\n")
        if op.get("description"):
            out.append(paragraphs(op["description"]) + "\n\n")
        out.append(_permission_line(op, endpoints.get((path, method))))
        params = op.get("parameters", [])
        if params:
            rows = [[code(p["name"]), p["in"], cell(_schema_type(p.get("schema", {}))),
                     "yes" if p.get("required") else "no",
                     code(json.dumps(p["schema"]["default"])) if "default" in p.get("schema", {}) else "",
                     cell(p.get("description", ""))] for p in params]
            out.append(table(["Parameter", "In", "Type", "Required", "Default", "Description"], rows) + "\n")
        body = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
        if body:
            name = _schema_type(body)
            schema = components.get(name, body)
            required = set(schema.get("required", []))
            rows = [[code(field), cell(_schema_type(s)), "yes" if field in required else "no",
                     code(json.dumps(s["default"])) if "default" in s else "", cell(s.get("description", ""))]
                    for field, s in schema.get("properties", {}).items()]
            optional = "" if op["requestBody"].get("required") else " (may be left out)"
            out.append(f"Body{optional}: JSON, {code(name)}.\n\n")
            if rows:
                out.append(table(["Field", "Type", "Required", "Default", "Description"], rows) + "\n")
        answers = ", ".join(f"{code(status)} {prose(r.get('description', ''))}"
                            for status, r in op.get("responses", {}).items())
        out.append(f"Answers: {answers}.\n\n")
    return "".join(out).rstrip() + "\n"
