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


# Modules another engineer is editing as this rule lands; each follows once that work is merged.
MIB_WRITTEN_OUT = {
    "builder/cache.py": "its hashing is being reworked: its own _CHUNK follows digest.CHUNK after that merge",
    "site/oci.py": "being split: its max_token bound becomes MiB after that merge",
}


def _is_one_mib(node: ast.AST) -> bool:
    return (isinstance(node, ast.BinOp) and isinstance(node.op, ast.LShift)
            and isinstance(node.left, ast.Constant) and node.left.value == 1
            and isinstance(node.right, ast.Constant) and node.right.value == 20)


def test_one_read_size_and_one_mib() -> None:
    """Every copy and hash loop reads ``digest.CHUNK``, the only chunk constant; a MiB is written once
    (``limits.MiB``), so no loop reads a size of its own in a disguise like ``1 << 20``."""
    written: dict[str, list[int]] = {}
    chunks: dict[str, list[str]] = {}
    for path in _modules():
        tree = ast.parse(path.read_text())
        if lines := [n.lineno for n in ast.walk(tree) if _is_one_mib(n)]:
            written[_rel(path)] = lines
        names = [t.id for n in ast.walk(tree) if isinstance(n, ast.Assign | ast.AnnAssign)
                 for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
                 if isinstance(t, ast.Name) and t.id.lstrip("_").endswith("CHUNK")]
        if names:
            chunks[_rel(path)] = names
    assert {k: len(v) for k, v in written.items() if k not in MIB_WRITTEN_OUT} == {"limits.py": 1}, (
        "write MiB (lockbuild.limits) for a size, digest.CHUNK for a read size"
    )
    assert {k: v for k, v in chunks.items() if k not in MIB_WRITTEN_OUT} == {"digest.py": ["CHUNK"]}, (
        "read digest.CHUNK; one chunk constant"
    )
    stale = [rel for rel in MIB_WRITTEN_OUT if rel not in written and rel not in chunks]
    assert stale == [], "remove the entries that no longer write their own size (the list only shrinks)"
