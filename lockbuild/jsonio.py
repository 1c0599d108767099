"""JSON: the type of a JSON value, and the one bounded parser of JSON text from outside.

Every JSON document lockbuild reads from outside (a registry's answer, an image record, a marker, the
node's facts, a provenance record) is parsed by :func:`loads_json`: its size and its nesting depth are
checked before the parser sees a byte, so a deep or huge answer is never recursed into.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias

from lockbuild.errors import LockbuildError

MAX_JSON_DEPTH = 64

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
