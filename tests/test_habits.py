"""Habits the library keeps, pinned by scanning its source: checks that survive ``python -O``, types
that are not hidden, one read size, and modules small enough to hold in one's head."""

from __future__ import annotations

import ast
from pathlib import Path

import lockbuild

PACKAGE = Path(lockbuild.__file__).parent


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _rel(path: Path) -> str:
    return path.relative_to(PACKAGE).as_posix()


def test_no_assert_statement_in_the_library() -> None:
    """``python -O`` drops assert statements: a check the library relies on raises the family's error."""
    found = [
        f"{_rel(path)}:{node.lineno}"
        for path in _modules()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Assert)
    ]
    assert not found, f"assert statements in lockbuild/ (raise an error from lockbuild.errors instead): {found}"
