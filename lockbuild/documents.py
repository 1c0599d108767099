"""Documents from outside, read strictly: the one bounded JSON parser and the one strict TOML reader.

:func:`loads_json` checks a JSON text's size and depth before parsing; :func:`loads_toml` bounds, decodes
and parses every TOML file lockbuild reads (duplicate keys refused); :class:`Problems` reports a document's
problems in two modes: every one collected, or the first raised (tests/core/test_toml_reader.py)."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from lockbuild.errors import LockbuildError

MAX_JSON_DEPTH = 64
MAX_TOML_DEPTH = 32  # tables and arrays within each other: recipes, manifests and locks use fewer than 8

JSON: TypeAlias = Mapping[str, "JSON"] | Sequence["JSON"] | str | int | float | bool | None
"""A JSON value as lockbuild writes it (``--json`` output, records): read-only containers, so a
``dict[str, str]`` or a ``list[dict[str, JSON]]`` is one too."""


def json_depth_ok(raw: bytes, max_depth: int) -> bool:
    """Whether the JSON text ``raw`` nests arrays and objects at most ``max_depth`` deep (brackets
    inside strings do not count): checked before parsing, so a deep answer is never recursed into."""
    depth = 0
    in_string = escaped = False
    for b in raw:
        if in_string:
            if escaped:
                escaped = False
            elif b == 0x5C:  # backslash
                escaped = True
            elif b == 0x22:
                in_string = False
        elif b == 0x22:
            in_string = True
        elif b in (0x5B, 0x7B):
            depth += 1
            if depth > max_depth:
                return False
        elif b in (0x5D, 0x7D):
            depth -= 1
    return True


def loads_json(
    raw: bytes, *, what: str, max_bytes: int, max_depth: int = MAX_JSON_DEPTH, error: type[LockbuildError]
) -> Any:  # parsed, not yet checked: each caller checks its shape
    """``raw`` parsed as JSON, refused (``error``) when over ``max_bytes``, nested deeper than
    ``max_depth``, not UTF-8 or not JSON."""
    if len(raw) > max_bytes:
        raise error(f"{what} is {len(raw)} bytes: expected at most {max_bytes}.")
    if not json_depth_ok(raw, max_depth):
        raise error(f"{what} nests deeper than {max_depth} levels: expected a plain JSON document.")
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise error(f"{what} is not valid JSON.") from None


@dataclass(frozen=True)
class TomlRefusal:
    """Why a TOML document was refused before its reader saw a value: ``size`` (over the bound),
    ``encoding`` (not UTF-8), ``syntax`` (not TOML, a duplicate key included) or ``depth`` (nested too
    deeply); ``detail`` says what was found in the decoder's or the parser's own words, ``size`` is the
    document's bytes."""

    kind: Literal["size", "encoding", "syntax", "depth"]
    detail: str
    size: int


def loads_toml(
    raw: bytes | str, *, max_bytes: int, refuse: Callable[[TomlRefusal], LockbuildError]
) -> dict[str, Any]:  # parsed, not yet checked: each caller's parser checks the types
    """``raw`` as a TOML document, strictly: at most ``max_bytes`` bytes (counted before the parser sees
    one), UTF-8, valid TOML with no key given twice, nested no deeper than the parser can follow. Each
    failure is the error ``refuse`` makes of it, so every reader words its own message."""
    size = len(raw) if isinstance(raw, bytes) else len(raw.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise refuse(TomlRefusal("size", f"{size} bytes, expected at most {max_bytes}", size))
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    except UnicodeDecodeError as exc:
        raise refuse(TomlRefusal("encoding", str(exc), size)) from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:  # tomllib refuses a key defined twice as a syntax error
        raise refuse(TomlRefusal("syntax", str(exc), size)) from None
    except ValueError as exc:  # an integer of more digits than Python converts (over 4,300)
        raise refuse(TomlRefusal("syntax", str(exc).split(";")[0], size)) from None
    except RecursionError as exc:
        raise refuse(TomlRefusal("depth", str(exc), size)) from None
    if (depth := _toml_depth(doc)) > MAX_TOML_DEPTH:  # dotted keys and [a.b.c] headers nest without recursing
        raise refuse(TomlRefusal("depth", f"tables or arrays nested {depth} deep, expected {MAX_TOML_DEPTH}", size))
    return doc


def _toml_depth(doc: dict[str, Any]) -> int:
    """How deeply tables and arrays nest in a parsed document, walked without recursion (stops past the bound)."""
    deepest = 0
    stack: list[tuple[dict[str, Any] | list[Any], int]] = [(doc, 1)]
    while stack:
        value, depth = stack.pop()
        deepest = max(deepest, depth)
        if depth > MAX_TOML_DEPTH:
            break
        children = value.values() if isinstance(value, dict) else value
        stack.extend((v, depth + 1) for v in children if isinstance(v, (dict, list)))
    return deepest


class Problems:
    """What is wrong with a document, in one of two modes: ``first=False`` collects every problem and
    ``raise_if_any`` raises them once (a recipe: its author fixes them all in one pass); ``first=True``
    raises at the first (a file a program wrote or a site's trust file: one problem refuses it).
    ``error`` makes the error of the problems found, each "KEY: MESSAGE"."""

    def __init__(self, path: str, *, error: Callable[[tuple[str, ...]], LockbuildError], first: bool = False) -> None:
        self.path = path
        self.error = error
        self.first = first
        self.items: list[str] = []

    def add(self, key: str, message: str) -> None:
        self.items.append(f"{key}: {message}")
        if self.first:
            raise self.error(tuple(self.items))

    def raise_if_any(self) -> None:
        if self.items:
            raise self.error(tuple(self.items))
