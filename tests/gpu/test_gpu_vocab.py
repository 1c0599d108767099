"""The GPU vocabulary: one definition of a capability, a driver version and NVIDIA's CUDA table, used by
the recipe, the manifest, the node and the doctor; no other module writes its own pattern for them."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import lockbuild
from lockbuild.gpu.vocab import (
    CUDA_DRIVERS,
    Arch,
    architecture_name,
    cuda_release,
    driver_at_least,
    is_driver,
    min_driver_for,
    newest_cuda_for,
    parse_arch,
    parse_capability,
)

PACKAGE = Path(lockbuild.__file__).parent
# What a capability or driver pattern looks like written out: a number, a dot, a number, with the
# repetition a driver version needs or the capture a capability needs.
_LOOKS_LIKE = re.compile(r"\\d\{1,\d\}\)?\\\.\(?\\d|\\d\{1,4\}\((?:\?:)?\\\.|\\d\+\(\?:\\\.\\d\+\)\*")


def _pattern_literals(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    return [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def test_no_module_outside_the_vocabulary_writes_a_capability_or_driver_pattern() -> None:
    found = {
        path.relative_to(PACKAGE).as_posix(): hits
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.parent.name != "gpu" and (hits := [s for s in _pattern_literals(path) if _LOOKS_LIKE.search(s)])
    }
    assert found == {}, "use lockbuild.gpu.vocab (parse_capability, is_driver, driver_in) instead"


@pytest.mark.parametrize(
    "planted", [r"(\d{1,2})\.(\d)", r"\d{1,4}(\.\d{1,4}){0,2}", r"\d{1,4}(?:\.\d{1,4}){0,3}", r"(\d+(?:\.\d+)*)"]
)
def test_the_structural_scan_sees_each_pattern_the_modules_used_to_write(planted: str) -> None:
    assert _LOOKS_LIKE.search(planted)


def test_python_and_glibc_versions_are_not_mistaken_for_gpu_patterns() -> None:
    for ok in (r"3\.\d{1,2}", r"cpython-(\d+)\.(\d+)\.", r"(\d+)\.(\d+).*"):
        assert not _LOOKS_LIKE.search(ok)


def test_capabilities_and_architectures() -> None:
    assert parse_capability("8.0") == (8, 0)
    assert parse_capability("12.1") == (12, 1)
    for bad in ("8", "8.0a", " 8.0", "8.0\n", "100.0", None, 8.0):
        assert parse_capability(bad) is None
    assert str(parse_arch("9.0a")) == "9.0a" and str(parse_arch("10.0f")) == "10.0f"
    assert parse_arch("9.0b") is None
    assert Arch(8, 0).runs_on((8, 6)) and not Arch(8, 6).runs_on((8, 0)) and not Arch(8, 0).runs_on((9, 0))
    assert Arch(9, 0, "a").runs_on((9, 0)) and not Arch(9, 0, "a").runs_on((9, 1))
    assert Arch(10, 0, "f").runs_on((10, 3)) and not Arch(10, 0, "f").runs_on((12, 0))
    assert architecture_name((8, 9)) == "Ada Lovelace" and architecture_name((9, 0)) == "Hopper"


def test_driver_versions_compare_number_by_number() -> None:
    assert is_driver("580") and is_driver("580.65.06") and is_driver("1.2.3.4")
    assert not is_driver("1.2.3.4.5") and not is_driver("580.") and not is_driver("v580")
    assert driver_at_least("580.65.06", "580") and driver_at_least("580.82.07", "580.65.06")
    assert not driver_at_least("575.64", "580") and not driver_at_least("580.65.05", "580.65.06")
    assert not driver_at_least("unknown", "1")


def test_the_cuda_table_gives_full_minimum_drivers() -> None:
    assert min_driver_for("13.0") == "580.65.06"
    assert min_driver_for("12.9") == "575.51.03"
    assert min_driver_for("12.8") == "570.26"
    assert min_driver_for("11.0") is None
    assert cuda_release("13.0.96") == "13.0" and cuda_release("12.8") == "12.8" and cuda_release("x") is None
    assert newest_cuda_for("580") == "13.0" and newest_cuda_for("575.51.03") == "12.9"
    assert newest_cuda_for("520") is None
    drivers = [tuple(int(x) for x in d.split(".")) for _, d in CUDA_DRIVERS]
    assert drivers == sorted(drivers)
