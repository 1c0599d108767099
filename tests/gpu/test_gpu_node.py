"""The node uses the measured fit: a GPU any gated package lacks kernels for is refused before anything
is unpacked (naming the GPU, its capability and the package); a GPU reached only by PTX installs with a
note that its kernels are JIT-compiled at first start; the node's choice prefers SASS to JIT."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import fatbinkit
import pytest
from click.testing import CliRunner
from conftest import ENGINE_MODULE, PLATFORM, PY, Keys, day, make_keys, uv_wheel
from servers import FakeServer, make_wheel
from test_gpu_fit import VERSIONS, VLLM

from lockbuild.bundle.instructions import GpuNeeds
from lockbuild.choice.candidates import Option
from lockbuild.choice.ranking import choose
from lockbuild.cli import main
from lockbuild.install.node import Gpu, Node
from lockbuild.install.nodecheck import Facts, Needs, jit_notes, unmet

TAG = "py3-none-manylinux_2_28_x86_64"
RECIPE = f"""\
[engine]
name = "gnode"
pypi = "gnode"
binary = "gnode"
verify = ["gnode", "--version"]

[[builds]]
version = "1.0"
variant = "cu130"
python = "{PY}"
platform = "{PLATFORM}"
requirements = ["gnode==1.0"]
"""


def cli(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return r.exit_code, r.stdout, r.stderr


@pytest.fixture(scope="module")
def built(blank_server: FakeServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Keys]]:
    """gnode 1.0: SASS 7.5, 8.0, 9.0 and PTX 9.0 in its one library (so 12.x runs it by JIT)."""
    srv = blank_server
    srv.reset()
    srv.publish(*uv_wheel(), uploaded=day(1))
    libs = {"gnode/_C.abi3.so": fatbinkit.cuda_so(("7.5", "8.0", "9.0"), ("9.0",))}
    modules = {"gnode/__init__.py": ENGINE_MODULE.format(version="1.0")}
    wheel = make_wheel("gnode", "1.0", data_files=libs, tag=TAG, modules=modules, scripts={"gnode": "gnode:main"})
    srv.publish(*wheel, uploaded=day(5))
    tmp = tmp_path_factory.mktemp("gpunode")
    keys = make_keys(tmp / "keys")
    (tmp / "gnode.toml").write_text(RECIPE)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LOCKBUILD_INDEX_URL", srv.index_url())
        mp.setenv("LOCKBUILD_CACHE_DIR", str(tmp / "cache"))
        code, out, err = cli(
            "build", str(tmp / "gnode.toml"), "--key", str(keys.secret), "--out", str(tmp / "dist"), "--json"
        )
        assert code == 0, err
        yield Path(json.loads(out)["bundles"][0]["bundle"]), keys


def fake_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, driver: str, cap: str) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "nvidia-smi"
    exe.write_text(f"#!/bin/sh\necho '{driver}, {cap}, Fake GPU'\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("LOCKBUILD_GPU_FACTS", raising=False)


def test_the_bundle_carries_the_measured_fit(built: tuple[Path, Keys]) -> None:
    bundle, _ = built
    code, out, err = cli("inspect", str(bundle), "--json")
    assert code == 0, err
    gpu = json.loads(out)["install"]["gpu"]
    assert gpu["min_capability"] == "7.5" and gpu["max_capability"] is None and gpu["min_driver"] is None
    assert gpu["measured"]["packages"][0]["libraries"] == [
        {"file": "gnode/_C.abi3.so", "sass": ["7.5", "8.0", "9.0"], "ptx": ["9.0"]}
    ]
    code, out, _ = cli("inspect", str(bundle))
    assert "measured GPU fit: kernels for 7.5-9.0 and later by JIT (gnode)" in out


def test_a_gpu_without_kernels_is_refused_before_unpacking(
    built: tuple[Path, Keys], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle, keys = built
    fake_smi(tmp_path, monkeypatch, "580.65.06", "7.0")
    root = tmp_path / "engines"
    code, _, err = cli("install", str(bundle), "--root", str(root), "--trust", str(keys.trust))
    assert code == 1
    assert "the node's Fake GPU (compute capability 7.0) has no kernels in gnode" in err
    assert not any(p.name.endswith((".partial", ".bundle.partial")) for p in root.rglob("*"))
    assert not (root / "gnode" / "1.0-cu130").exists()


def test_a_gpu_reached_by_ptx_installs_and_says_jit(
    built: tuple[Path, Keys], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle, keys = built
    fake_smi(tmp_path, monkeypatch, "580.65.06", "12.0")
    root = tmp_path / "engines"
    code, _, err = cli("install", str(bundle), "--root", str(root), "--trust", str(keys.trust))
    assert code == 0, err
    assert "kernels for 12.0 will be JIT-compiled at first start" in err
    assert (root / "gnode" / "1.0-cu130" / "bin" / "gnode").exists()


FIT = __import__("lockbuild.gpu.fit", fromlist=["measure"]).measure(VLLM, VERSIONS, (), ("vllm", "torch"))


def _node(cap: tuple[int, int]) -> Node:
    return Node("x86_64", "glibc", (2, 36), "580.65.06", (Gpu("GPU", cap),))


def test_the_measured_rule_never_assumes_a_range() -> None:
    needs = Needs("3.12", "x86_64-manylinux_2_28", GpuNeeds((7, 5), "580.65.06", (12, 1), FIT), 0)
    facts = Facts(_node((11, 0)), frozenset({"3.12"}), 1 << 50)
    assert unmet(needs, facts) == (
        "the node's GPU (compute capability 11.0) has no kernels in torch (neither SASS nor PTX for it)",
    )
    assert unmet(needs, Facts(_node((8, 6)), frozenset({"3.12"}), 1 << 50)) == ()


def test_sass_beats_jit_after_the_asked_version_and_before_the_newest_cuda() -> None:
    ptx_only = measure_one(sass=(), ptx=("8.0",))
    sass = measure_one(sass=("8.0",), ptx=())
    options = [
        Option("e", "1.0", "cu130", Needs("3.12", "x86_64-manylinux_2_28", GpuNeeds((8, 0), "580", None, ptx_only), 0)),
        Option("e", "1.0", "cu129", Needs("3.12", "x86_64-manylinux_2_28", GpuNeeds((8, 0), "575", None, sass), 0)),
    ]
    facts = Facts(_node((8, 6)), frozenset({"3.12"}), 1 << 50)
    got = choose("e", "1.0", options, facts)
    assert got.chosen is not None and got.chosen.build == "e/1.0-cu129"  # SASS, though cu130 is the newer CUDA
    passed = next(c for c in got.to_json()["candidates"] if c["build"] == "e/1.0-cu130")
    assert "only by JIT from PTX" in passed["reasons"][0]
    assert jit_notes(options[0].needs, facts.node) == ("kernels for 8.6 will be JIT-compiled at first start",)


def measure_one(sass: tuple[str, ...], ptx: tuple[str, ...]):  # type: ignore[no-untyped-def]
    from test_gpu_fit import k

    from lockbuild.gpu.fit import measure

    return measure({"e": [("e/_C.so", k(" ".join(sass), " ".join(ptx)))]}, {}, ("13",), ("e",))
