"""The mutation table's runner: only a failing test counts as caught; every other outcome is named."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.mutation_table import Mutation, off
from bench.mutations import run_one, totals

CHECK = "def check(n):\n    if n < 0:\n        raise ValueError(n)\n    return n\n"
TESTS = (
    "import pytest\nfrom checked import check\n\n"
    "def test_refused():\n    with pytest.raises(ValueError):\n        check(-1)\n"
)
UNTESTED = "from checked import check\n\ndef test_kept():\n    assert check(1) == 1\n"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "checked.py").write_text(CHECK)
    (tmp_path / "test_checked.py").write_text(TESTS)
    (tmp_path / "test_untested.py").write_text(UNTESTED)
    (tmp_path / "conftest.py").write_text("")  # the tree's root on sys.path
    return tmp_path


def test_a_failing_test_is_a_catch_and_the_file_is_restored(tree: Path) -> None:
    got = run_one(off("refused", "checked.py", "n < 0", "test_checked.py"), 60, root=tree)
    assert (got.result, got.line, got.by) == ("caught", 2, "test_checked.py::test_refused")
    assert (tree / "checked.py").read_text() == CHECK


def test_tests_that_pass_with_the_check_removed_report_survived(tree: Path) -> None:
    got = run_one(off("refused", "checked.py", "n < 0", "test_untested.py"), 60, root=tree)
    assert got.result == "SURVIVED"
    assert (tree / "checked.py").read_text() == CHECK


@pytest.mark.parametrize(
    ("entry", "result", "why"),
    [
        (off("gone", "checked.py", "n <= 0", "test_checked.py"), "NOT FOUND", "snippet occurs 0 times"),
        (Mutation("twice", "checked.py", "n", "m", "test_checked.py"), "AMBIGUOUS", "snippet occurs"),
        (Mutation("same", "checked.py", "n < 0", "n < 0", "test_checked.py"), "ERROR", "leaves the file as it was"),
        (Mutation("broken", "checked.py", "if n < 0:", "if n < 0", "test_checked.py"), "ERROR", "does not compile"),
        (off("no file", "checked.py", "n < 0", "test_missing.py"), "ERROR", "usage error"),
        (off("no test", "checked.py", "n < 0", "test_checked.py -k nothing"), "NOT FOUND", "collected no tests"),
    ],
    ids=["not-found", "ambiguous", "unchanged", "not-compiling", "missing-test-file", "no-test-selected"],
)
def test_what_is_no_verdict_is_never_reported_as_caught(tree: Path, entry: Mutation, result: str, why: str) -> None:
    got = run_one(entry, 60, root=tree)
    assert (got.result, why in got.by) == (result, True), got
    assert (tree / "checked.py").read_text() == CHECK
    assert totals([got]).startswith("0 of 1 caught, 0 equivalent, 0 survived, 1 errors")
