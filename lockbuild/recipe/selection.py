"""Which files of a Hub revision a model bundle takes: pure rules over repo paths.

Patterns match the whole path as huggingface_hub's do (``*`` crosses ``/``; a trailing ``/`` means all under
it); ``exclude`` wins. A pickle or unknown format (``bundle/modelformat.py``) is taken only when a pattern
names it (its path, or ``*.bin``): ``*`` alone never brings one in. Code (``.py``) is taken and reported."""

from __future__ import annotations

import fnmatch
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

from lockbuild.bundle.modelformat import DEFAULT_INCLUDE, format_of, names

__all__ = ["DEFAULT_INCLUDE", "MAX_PATTERN", "MAX_PATTERNS", "Selection", "pattern_problem", "select"]

MAX_PATTERNS = 256
MAX_PATTERN = 512


def pattern_problem(pattern: str) -> str | None:
    """Why ``pattern`` is not a usable file pattern (None when it is)."""
    if not pattern or len(pattern) > MAX_PATTERN:
        return f"expected a pattern of 1 to {MAX_PATTERN} characters"
    if pattern.startswith("/") or "\\" in pattern:
        return "expected a pattern relative to the repository, with '/' between folders"
    if any(unicodedata.category(c).startswith("C") for c in pattern):
        return "expected plain text (no control character)"
    return None


def _matches(path: str, pattern: str) -> bool:
    if pattern.endswith("/"):
        pattern += "*"  # as huggingface_hub: a folder means everything under it
    return fnmatch.fnmatchcase(path, pattern)


@dataclass(frozen=True)
class Selection:
    taken: tuple[str, ...]  # the repo paths taken, in the order given
    pickles: tuple[str, ...]  # those of them that are pickles or not a known safe format (named explicitly)
    left_out_pickles: tuple[str, ...]  # such files an include pattern matched but did not name
    code: tuple[str, ...] = ()  # those taken that are code (.py)


def select(paths: Iterable[str], include: tuple[str, ...], exclude: tuple[str, ...]) -> Selection:
    """The paths a model bundle takes, by the rules above."""
    taken: list[str] = []
    pickles: list[str] = []
    left_out: list[str] = []
    code: list[str] = []
    for path in paths:
        hits = [p for p in include if _matches(path, p)]
        if not hits or any(_matches(path, p) for p in exclude):
            continue
        kind = format_of(path)
        if kind == "unsafe":
            if not any(names(p, path) for p in hits):
                left_out.append(path)
                continue
            pickles.append(path)
        elif kind == "code":
            code.append(path)
        taken.append(path)
    return Selection(tuple(taken), tuple(pickles), tuple(left_out), tuple(code))
