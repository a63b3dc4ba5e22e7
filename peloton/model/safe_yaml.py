"""Load untrusted YAML without letting it crash or balloon the process.

``yaml.safe_load`` refuses arbitrary Python objects but not size: a few hundred bytes of aliases
(the "billion laughs") expand into billions of nodes, a recursive alias builds a cyclic tree
that any recursive walk over the result never leaves, and deep nesting overflows the composer's
recursion. So the text is first checked on PyYAML's event stream, which the parser produces
iteratively and lazily: the walk stops at the first limit passed, before anything is built.
Only a document that passes is loaded, and it then loads to a bounded tree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import yaml
from yaml.constructor import ConstructorError
from yaml.events import (
    AliasEvent,
    CollectionEndEvent,
    CollectionStartEvent,
    DocumentStartEvent,
    NodeEvent,
)
from yaml.reader import ReaderError


@dataclass(frozen=True, slots=True)
class YamlLimits:
    max_bytes: int = 1_048_576
    max_depth: int = 64  # nested sequences and mappings
    max_aliases: int = 1000
    max_nodes: int = 1_000_000  # with every alias counted as the whole node it stands for
    max_bytes_setting: str = "PELOTON_MAX_CONFIG_BYTES"  # named in the error, to raise the limit


class YamlLimitError(ValueError):
    """The document passes a limit; the message names the limit and, when known, the line."""


def load_yaml(text: str, limits: YamlLimits = YamlLimits()) -> Any:
    """safe_load, after checking the text against `limits`.

    Raises YamlLimitError for a limit passed and yaml.YAMLError (a MarkedYAMLError naming the
    place where it can) for a syntax error or a value that cannot be built.

    Read by libyaml where PyYAML has it: a six-line job took 1.7 ms through PyYAML's own
    Python reader (checked, then loaded), 0.16 ms through libyaml, and admit reads every job.
    A document libyaml refuses for any reason is read again by the Python reader, which
    decides what is wrong and says it as before: libyaml's messages say less ("found
    character that cannot start any token", no alias's name), and a lone surrogate makes it
    raise UnicodeEncodeError, not a YAML error."""
    if _CSafeLoader is not None:
        try:
            return _load(text, limits, _CSafeLoader)
        except Exception:  # noqa: BLE001 - the Python reader says what (read again below)
            pass
    return _load(text, limits, _SafeLoader)


def _load(text: str, limits: YamlLimits, loader: type) -> Any:
    check_yaml(text, limits, loader)
    try:
        return yaml.load(text, Loader=loader)  # noqa: S506 - SafeLoader with marked errors
    except RecursionError:
        # Only a chain of merge keys (`<<: *a`) can still recurse this deep; every other
        # recursion is bounded by max_depth.
        raise YamlLimitError("yaml: merge keys (<<) chained too deeply") from None


class YamlError(ValueError):
    """YAML that cannot be read (a syntax error or a limit passed), as one line naming the place."""


def read_yaml(text: str, limits: YamlLimits = YamlLimits()) -> Any:
    """load_yaml, with every way it can fail as one YamlError: what config parsers report."""
    try:
        return load_yaml(text, limits)
    except YamlLimitError as exc:
        raise YamlError(str(exc)) from None
    except yaml.YAMLError as exc:
        raise YamlError(yaml_error_text(exc)) from None


def yaml_error_text(exc: yaml.YAMLError) -> str:
    """A YAML error as one 'where: message' line, naming the line and column when known."""
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "yaml"
        return f"{where}: invalid YAML: {exc.problem or exc.context}"
    if isinstance(exc, ReaderError):  # a character YAML does not allow; its str() spans lines
        return f"character {exc.position + 1}: invalid YAML: {str(exc).splitlines()[0]}"
    return f"yaml: invalid YAML: {exc}"


def check_yaml(text: str, limits: YamlLimits = YamlLimits(), loader: type = yaml.SafeLoader) -> None:
    """Walk the event stream (of `loader`'s parser) and raise YamlLimitError at the first limit
    passed."""
    # Each character is at least one byte: a text longer than the limit is refused before
    # encoding it. surrogatepass: a lone surrogate is for the YAML reader to refuse, clearly.
    size = len(text) if len(text) > limits.max_bytes else len(text.encode("utf-8", "surrogatepass"))
    if size > limits.max_bytes:
        raise YamlLimitError(f"yaml: the document is {size} bytes, more than the limit of {limits.max_bytes} "
                             f"({limits.max_bytes_setting})")
    walk = _Walk(limits)
    for event in yaml.parse(text, Loader=loader):
        walk.step(event)


class _Walk:
    """Depth, alias count and expanded node count along the event stream.

    Each open collection has a frame holding its anchor and its expanded size so far; when it
    ends, its size is added to its parent's and recorded under its anchor, so an alias counts
    as that many nodes. An alias to an anchor still open refers to a collection containing
    itself: a recursive alias.
    """

    def __init__(self, limits: YamlLimits) -> None:
        self.limits = limits
        self.frames: list[list] = []  # [anchor, expanded size] per open collection
        self.sizes: dict[str, int] = {}  # anchor -> expanded size of the node it names
        self.aliases = 0
        self.nodes = 0

    def step(self, event: yaml.Event) -> None:
        if isinstance(event, DocumentStartEvent):
            self.sizes.clear()  # anchors are local to a document
        elif isinstance(event, CollectionStartEvent):
            self._grow(event, 1)
            self.frames.append([event.anchor, 1])
            if len(self.frames) > self.limits.max_depth:
                self._refuse(event, f"nesting deeper than {self.limits.max_depth} levels")
        elif isinstance(event, CollectionEndEvent):
            anchor, size = self.frames.pop()
            if self.frames:
                self.frames[-1][1] += size
            if anchor is not None:
                self.sizes[anchor] = size
        elif isinstance(event, AliasEvent):
            self.aliases += 1
            if self.aliases > self.limits.max_aliases:
                self._refuse(event, f"more than {self.limits.max_aliases} aliases")
            if any(anchor == event.anchor for anchor, _ in self.frames):
                self._refuse(event, f"alias *{event.anchor} refers to a node that contains it (a recursive alias)")
            # An unknown anchor is left for the composer to report ("found undefined alias").
            self._leaf(event, self.sizes.get(event.anchor, 1) if event.anchor is not None else 1)
        elif isinstance(event, NodeEvent):  # a scalar
            self._leaf(event, 1)
            if event.anchor is not None:
                self.sizes[event.anchor] = 1

    def _leaf(self, event: yaml.Event, size: int) -> None:
        self._grow(event, size)
        if self.frames:
            self.frames[-1][1] += size

    def _grow(self, event: yaml.Event, size: int) -> None:
        self.nodes += size
        if self.nodes > self.limits.max_nodes:
            if self.aliases:
                self._refuse(event, f"aliases expand to more than {self.limits.max_nodes} nodes (a YAML alias bomb?)")
            self._refuse(event, f"more than {self.limits.max_nodes} nodes")

    @staticmethod
    def _refuse(event: yaml.Event, message: str) -> None:
        mark = event.start_mark
        where = f"line {mark.line + 1}" if mark is not None else "yaml"
        raise YamlLimitError(f"{where}: {message}")


if TYPE_CHECKING:  # what the mixin is mixed into: a loader, whose constructor it extends
    _Constructor = yaml.constructor.BaseConstructor
else:
    _Constructor = object


class _MarkedValues(_Constructor):
    """A safe loader whose value errors name the place.

    Some plain scalars match a resolver but cannot be built: `2001-13-01` (a timestamp with
    month 13) or an integer of more than 4300 digits raise a bare ValueError from the
    constructor. Turned into a ConstructorError, they are reported like any other YAML error,
    with their line and column."""

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, OverflowError, TypeError) as exc:
            raise ConstructorError(None, None, f"cannot read this value: {exc}", node.start_mark) from None


class _SafeLoader(_MarkedValues, yaml.SafeLoader):
    """PyYAML's reader in Python: what every error is said by."""


# libyaml's reader, where PyYAML was built with it (its wheels are); the same constructor.
_CSafeLoader = type("_CSafeLoader", (_MarkedValues, yaml.CSafeLoader), {}) if yaml.__with_libyaml__ else None
