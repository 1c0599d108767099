"""scripts/wheelhouse: lockbuild's own wheels for the node's platform, checked before they travel."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
from conftest import REPO_ROOT

from lockbuild.target import Target

SCRIPT = REPO_ROOT / "scripts" / "wheelhouse"


@pytest.fixture(scope="module")
def wheelhouse() -> ModuleType:
    loader = importlib.machinery.SourceFileLoader("wheelhouse_script", str(SCRIPT))
    spec = importlib.util.spec_from_loader("wheelhouse_script", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


NODE = Target.of("3.11", "x86_64-manylinux_2_28")


def test_a_wheel_for_a_newer_glibc_than_the_node_is_refused(wheelhouse: ModuleType, tmp_path: Path) -> None:
    for name in (
        "cryptography-44.0.0-cp39-abi3-manylinux_2_34_x86_64.whl",  # what `pip wheel .` picks on a new builder
        "cffi-1.17.1-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
        "click-8.1.8-py3-none-any.whl",
        "zstandard-0.23.0.tar.gz",
    ):
        (tmp_path / name).write_bytes(b"")
    bad = wheelhouse.misfits(tmp_path, NODE)
    assert bad == [
        "cryptography-44.0.0-cp39-abi3-manylinux_2_34_x86_64.whl: no tag for Python 3.11 on x86_64-manylinux_2_28",
        "zstandard-0.23.0.tar.gz: not a wheel (the node would have to build it)",
    ]


def test_wheels_for_the_node_glibc_or_older_pass(wheelhouse: ModuleType, tmp_path: Path) -> None:
    for name in (
        "cryptography-44.0.0-cp39-abi3-manylinux_2_28_x86_64.whl",
        "cffi-1.17.1-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
        "uv-0.9.5-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
    ):
        (tmp_path / name).write_bytes(b"")
    assert wheelhouse.misfits(tmp_path, NODE) == []


def test_pip_is_asked_for_the_node_tags_not_the_builder(wheelhouse: ModuleType, tmp_path: Path) -> None:
    argv = wheelhouse.pip_download_argv("3.11", NODE, tmp_path, ["cryptography>=42"])
    assert argv[:4] == [sys.executable, "-m", "pip", "download"]
    assert "--only-binary=:all:" in argv
    assert argv[argv.index("--python-version") + 1] == "3.11"
    assert argv[argv.index("--abi") + 1] == "cp311"
    platforms = [argv[i + 1] for i, a in enumerate(argv) if a == "--platform"]
    assert platforms[0] == "manylinux_2_28_x86_64"
    assert "manylinux2014_x86_64" in platforms
    assert not any("2_34" in p or "2_29" in p for p in platforms)
    assert argv[-1] == "cryptography>=42"


def test_requirements_come_from_pyproject(wheelhouse: ModuleType) -> None:
    deps = wheelhouse.dependencies(SCRIPT.parent.parent / "pyproject.toml")
    assert any(d.startswith("cryptography") for d in deps)
    assert any(d.startswith("uv") for d in deps)
