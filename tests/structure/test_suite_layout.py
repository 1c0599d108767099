"""The tests mirror the package: each test file sits one folder down, in tests/<package>/ for the lockbuild
package it tests (core/ for the top-level modules, structure/ for the tests of the code's shape), its name
unique across tests/ (pytest names a test module by its file name, and conftest.py puts every test folder
on sys.path); the kits stay at tests/'s root, beside the one conftest.py, and no folder is a package."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import REPO_ROOT

import lockbuild

TESTS = REPO_ROOT / "tests"
BESIDES = {"core", "structure"}  # the folders that are not a lockbuild package
NOT_TESTS = {"data", "__pycache__"}  # what the kits read, and Python's caches


def packages(package: Path) -> set[str]:
    return {p.name for p in package.iterdir() if (p / "__init__.py").is_file()}


def layout_problems(tests: Path, allowed: set[str]) -> list[str]:
    """Each test file out of place, each name used twice, each folder no package explains."""
    problems = []
    seen: dict[str, Path] = {}
    for path in sorted(tests.rglob("*.py")):
        rel = path.relative_to(tests)
        if "__pycache__" in rel.parts or rel.parts[0] in NOT_TESTS:
            continue
        if path.name == "__init__.py":
            problems.append(f"{rel}: no __init__.py in tests/ (pytest would name its modules by their package)")
        elif path.name == "conftest.py" and rel != Path("conftest.py"):
            problems.append(f"{rel}: one conftest.py, at tests/'s root (a second one would share its module name)")
        elif not path.name.startswith("test_"):
            if len(rel.parts) != 1:
                problems.append(f"{rel}: a kit sits at tests/'s root, where every test imports it")
        elif len(rel.parts) != 2:
            problems.append(f"{rel}: a test file sits in tests/<package>/, one folder down")
        elif rel.parts[0] not in allowed:
            problems.append(f"{rel}: {rel.parts[0]}/ is neither a lockbuild package nor one of {sorted(BESIDES)}")
        if path.name.startswith("test_"):
            if path.name in seen:
                problems.append(f"{rel}: the same file name as {seen[path.name]}")
            seen.setdefault(path.name, rel)
    for folder in sorted(p for p in tests.iterdir() if p.is_dir() and p.name not in NOT_TESTS):
        if folder.name not in allowed:
            problems.append(f"{folder.name}/: neither a lockbuild package nor one of {sorted(BESIDES)}")
    return problems


def test_each_test_file_sits_in_the_folder_of_a_package_under_a_name_of_its_own() -> None:
    allowed = packages(Path(lockbuild.__file__).parent) | BESIDES
    assert layout_problems(TESTS, allowed) == []
    assert len(list(TESTS.glob("*/test_*.py"))) >= 100  # the scan saw the suite


@pytest.mark.parametrize(
    ("planted", "said"),
    [
        ("test_stray.py", "one folder down"),
        ("gpu/deeper/test_deep.py", "one folder down"),
        ("nowhere/test_lost.py", "neither a lockbuild package"),
        ("trust/test_gpu.py", "the same file name as gpu/test_gpu.py"),
        ("gpu/__init__.py", "no __init__.py"),
        ("gpu/conftest.py", "one conftest.py"),
        ("gpu/helpers.py", "a kit sits at tests/'s root"),
    ],
)
def test_the_scan_sees_each_planted_violation(tmp_path: Path, planted: str, said: str) -> None:
    for good in ("conftest.py", "servers.py", "gpu/test_gpu.py", "core/test_text.py", "data/test_data.py"):
        (tmp_path / good).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / good).touch()
    allowed = {"gpu", "trust"} | BESIDES
    assert layout_problems(tmp_path, allowed) == []
    (tmp_path / planted).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / planted).touch()
    problems = layout_problems(tmp_path, allowed)
    assert any(said in p for p in problems), problems
