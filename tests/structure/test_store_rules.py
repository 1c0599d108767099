"""Structural rules for the site store and the places lockbuild writes: one ancestor rule (shared by --root
and stores, in fsio), and a store that moves files only between directories it holds open."""

from __future__ import annotations

import ast
from pathlib import Path

import lockbuild

PACKAGE = Path(lockbuild.__file__).parent
STORE_MODULES = ("site/storage.py", "site/storeread.py", "site/importer.py", "site/storecare.py")


def _tree(rel: str) -> ast.AST:
    return ast.parse((PACKAGE / rel).read_text())


def test_only_fsio_judges_whether_a_directory_above_a_place_is_safe() -> None:
    """The sticky exception is part of the one ancestor rule (``fsio.ancestor_problem``): a module that
    tests S_ISVTX itself is writing a second copy of it, which drifts."""
    copies = [
        p.relative_to(PACKAGE).as_posix()
        for p in sorted(PACKAGE.rglob("*.py"))
        if p.relative_to(PACKAGE).as_posix() != "fsio/owners.py" and "S_ISVTX" in p.read_text()
    ]
    assert copies == [], "judge directories above a place with lockbuild.fsio.ancestor_problem"


def test_root_and_stores_both_use_the_one_ancestor_rule() -> None:
    store = {ast.unparse(n.func) for n in ast.walk(_tree("site/storage.py")) if isinstance(n, ast.Call)}
    assert "storecare.check_ancestors" in store
    for rel in ("install/places.py", "site/storecare.py"):
        calls = {ast.unparse(n.func) for n in ast.walk(_tree(rel)) if isinstance(n, ast.Call)}
        assert "ancestor_problem" in calls, rel


def test_the_store_renames_only_between_directories_it_holds_open() -> None:
    """Every rename in the store's modules names both directories by descriptor: a path, even one under
    the store, could be redirected by a tmp/ (or blobs/) renamed away and replaced with a link."""
    by_path = []
    for rel in STORE_MODULES:
        for n in ast.walk(_tree(rel)):
            if isinstance(n, ast.Call) and ast.unparse(n.func) in ("os.rename", "os.replace"):
                kw = {k.arg for k in n.keywords}
                if not {"src_dir_fd", "dst_dir_fd"} <= kw:
                    by_path.append(f"{rel}:{n.lineno}")
            elif (
                isinstance(n, ast.Call)
                and isinstance(n.func, ast.Attribute)
                and n.func.attr in ("rename", "replace")
                and not ast.unparse(n.func).startswith("os.")
            ):
                by_path.append(f"{rel}:{n.lineno} ({ast.unparse(n.func)})")
    assert by_path == [], "rename with src_dir_fd= and dst_dir_fd="
