"""cli.md: every command of `pelotonctl`, from the Click tree Typer builds (typer.main.get_command)."""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterator
from typing import Any

from pelotonctl.reference.markdown import banner, code, paragraphs, prose, slug


def cli_tree() -> Iterator[tuple[list[str], Any, Any]]:
    """(path, command, context) of the root, every group and every command, depth first in the
    order `--help` lists them; path [] is the root."""
    from typer.main import get_command

    from pelotonctl.cli.main import app

    root = get_command(app)

    def walk(command: Any, path: list[str], parent: Any) -> Iterator[tuple[list[str], Any, Any]]:
        ctx = command.context_class(command, info_name=path[-1] if path else "pelotonctl", parent=parent)
        yield path, command, ctx
        for name, sub in getattr(command, "commands", {}).items():
            yield from walk(sub, [*path, name], ctx)

    yield from walk(root, [], None)


def _help_of(command: Any) -> str:
    return inspect.cleandoc((command.help or "").split("\f")[0])


def _param_line(param: Any, ctx: Any) -> str:
    """One argument or option: its names, its type, whether required, its default, its help."""
    if param.param_type_name == "argument":
        names = code(param.metavar or param.name.upper())
    else:
        names = ", ".join(code(o) for o in sorted(param.opts, key=lambda o: (o.startswith("--"), o)))
        if param.secondary_opts:
            names += " / " + ", ".join(code(o) for o in param.secondary_opts)
    facts = []
    is_flag = getattr(param, "is_flag", False)
    if not is_flag:
        facts.append(_kind(param, ctx) + (", repeatable" if param.multiple else ""))
    if param.required:
        facts.append("required")
    low, high = getattr(param, "min", None), getattr(param, "max", None)
    if low is not None or high is not None:
        facts.append(f"{low if low is not None else ''}..{high if high is not None else ''}")
    default = param.default
    if is_flag and param.secondary_opts:
        facts.append(f"default {code(param.opts[0] if default else param.secondary_opts[0])}")
    elif not is_flag and default not in (None, [], ()) and not callable(default):
        shown = ",".join(map(str, default)) if isinstance(default, (list, tuple)) else default
        facts.append(f"default {code(shown)}")
    text = f"- {names} ({'; '.join(facts)})" if facts else f"- {names}"
    help_text = " ".join((param.help or "").split())
    return text + (f": {prose(help_text)}" if help_text else "")


def _kind(param: Any, ctx: Any) -> str:
    """A parameter's type in a word: Typer's own (`<int range>`), or Click's where Typer is Click."""
    kind = param.display_type(ctx).strip("<>") if hasattr(param, "display_type") else param.type.name
    return re.sub(r"^list\[(.*)\]$", r"\1", kind).replace("int range", "int").replace("float range", "float")


def _usage(path: list[str], command: Any, ctx: Any) -> str:
    words = ["pelotonctl", *path, "[OPTIONS]"]
    for param in command.get_params(ctx):
        if param.param_type_name == "argument":
            name = param.metavar or param.name.upper()
            name += "..." if param.nargs == -1 or param.multiple else ""
            words.append(name if param.required else f"[{name}]")
    if hasattr(command, "commands"):
        words.append("COMMAND [ARGS]...")
    return " ".join(words)


def cli_md() -> str:
    tree = list(cli_tree())
    commands = [p for p, c, _ in tree if p and not hasattr(c, "commands")]
    out = [banner("pelotonctl/cli", "Command line"), "# pelotonctl\n\n",
           f"Every command of the command line, {len(commands)} in all, with its arguments and options, as "
           "`pelotonctl COMMAND --help` gives them. Exit codes (`pelotonctl/cli/common.py`):\n\n",
           paragraphs(_exit_codes()) + "\n\n",
           "Commands that print data take `--json` (or Peloton's `-j`/`--json` before the command); "
           "tables and text are for people and may change.\n\n"]
    for path, command, ctx in tree:
        level = "#" * min(len(path) + 1, 4)
        if path:
            kind = " (group)" if hasattr(command, "commands") else ""
            out.append(f"{level} pelotonctl {' '.join(path)}{kind} {{ #{slug('pelotonctl ' + ' '.join(path))} }}\n\n")
        else:
            out.append("## Global options { #global-options }\n\n")
        if path:
            out.append(paragraphs(_help_of(command)) + "\n\n")
        if hasattr(command, "commands"):
            listed = ", ".join(f"[{code(n)}](#{slug('pelotonctl ' + ' '.join([*path, n]))})" for n in command.commands)
            out.append(f"Usage: {code(_usage(path, command, ctx))}. Commands: {listed}.\n\n")
        else:
            out.append(f"Usage: {code(_usage(path, command, ctx))}\n\n")
        params = [p for p in command.get_params(ctx) if "--help" not in p.opts and not getattr(p, "hidden", False)]
        arguments = [p for p in params if p.param_type_name == "argument"]
        options = [p for p in params if p.param_type_name != "argument"]
        if arguments:
            out.append("Arguments:\n\n" + "\n".join(_param_line(p, ctx) for p in arguments) + "\n\n")
        if options:
            out.append("Options:\n\n" + "\n".join(_param_line(p, ctx) for p in options) + "\n\n")
    return "".join(out).rstrip() + "\n"


def _exit_codes() -> str:
    from pelotonctl.cli import common

    doc = common.__doc__ or ""
    return next((p for p in doc.split("\n\n") if p.startswith("Exit codes")), "").removeprefix("Exit codes: ")
