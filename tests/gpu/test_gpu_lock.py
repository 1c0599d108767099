"""The measured fit through the commands: ``lock --json`` from the kept readings only (it downloads
nothing), ``fetch`` reading every file it brings, and the recipe's ``gpu`` checked against the binaries
(exit 2, both numbers and the package) or filled in from them in the resolved recipe."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import fatbinkit
import pytest
from click.testing import CliRunner
from conftest import PLATFORM, PY, day, uv_wheel
from servers import FakeServer, make_wheel

from lockbuild.cli import main

TAG = "py3-none-manylinux_2_28_x86_64"


@pytest.fixture
def gpu_index(srv: FakeServer, monkeypatch: pytest.MonkeyPatch) -> FakeServer:
    monkeypatch.setenv("LOCKBUILD_INDEX_URL", srv.index_url())
    srv.publish(*uv_wheel(), uploaded=day(1))
    libs = {"gfeng/_C.abi3.so": fatbinkit.cuda_so(("7.5", "8.0", "9.0", "12.0"), ("9.0",))}
    libs["gfeng/fa3/_fa3_C.abi3.so"] = fatbinkit.cuda_so(("9.0a",))
    tag = TAG
    srv.publish(
        *make_wheel("gfeng", "1.0", deps=("torch", "nvidia-cuda-runtime"), data_files=libs, tag=tag), uploaded=day(5)
    )
    torch = {"torch/lib/libtorch_cuda.so": fatbinkit.cuda_so(("7.5", "8.0", "8.6", "9.0", "10.0", "12.0", "12.1"))}
    srv.publish(*make_wheel("torch", "2.9.0", data_files=torch, tag=tag), uploaded=day(2))
    srv.publish(*make_wheel("nvidia-cuda-runtime", "13.0.96", tag=tag), uploaded=day(2))
    return srv


def recipe(tmp_path: Path, gpu: str = "") -> Path:
    text = (
        '[engine]\nname = "gfeng"\npypi = "gfeng"\nbinary = "gfeng"\nverify = ["gfeng"]\n\n[[builds]]\n'
        f'version = "1.0"\nvariant = "cu130"\npython = "{PY}"\nplatform = "{PLATFORM}"\nrequirements = ["gfeng==1.0"]\n'
        + (f"gpu = {gpu}\n" if gpu else "")
    )
    path = tmp_path / "gfeng.toml"
    path.write_text(text)
    return path


def run(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return r.exit_code, r.stdout, r.stderr


FIT = {
    "cuda": "13.0",
    "min_driver": "580.65.06",
    "min_capability": "7.5",
    "max_capability": "12.1",
    "jit_beyond": False,
}


def test_lock_reads_nothing_and_fetch_measures(gpu_index: FakeServer, tmp_path: Path) -> None:
    path = recipe(tmp_path)
    code, out, _ = run("lock", str(path), "--out", str(tmp_path / "locks"))
    assert code == 0
    assert "GPU fit: not measured yet (" in out and "`lockbuild fetch` reads them" in out
    code, out, _ = run("lock", str(path), "--out", str(tmp_path / "locks"), "--json", "--fresh-lock")
    lock = json.loads(out)["locks"][0]
    assert lock["gpu_fit"] is None
    assert sorted(lock["gpu_fit_unread"]) == sorted(
        [f"gfeng-1.0-{TAG}.whl", f"nvidia_cuda_runtime-13.0.96-{TAG}.whl", f"torch-2.9.0-{TAG}.whl"]
    )

    code, out, err = run("fetch", str(path), "--out", str(tmp_path / "fetched"))
    assert code == 0, err
    assert "GPU fit: CUDA 13.0 (driver >= 580.65.06), kernels for 7.5-12.1 (gfeng, torch); " in out
    assert "gfeng/fa3/_fa3_C.abi3.so: 9.0a only" in out

    code, out, _ = run("lock", str(path), "--out", str(tmp_path / "locks"), "--json")
    fit = json.loads(out)["locks"][0]["gpu_fit"]
    assert {k: fit[k] for k in FIT} == FIT
    gfeng = next(p for p in fit["packages"] if p["name"] == "gfeng")
    assert gfeng["files"] == ["gfeng/_C.abi3.so", "gfeng/fa3/_fa3_C.abi3.so"]
    assert {"file": "gfeng/fa3/_fa3_C.abi3.so", "sass": ["9.0a"], "ptx": []} in gfeng["libraries"]


def test_a_recipe_the_binaries_contradict_is_refused(gpu_index: FakeServer, tmp_path: Path) -> None:
    path = recipe(tmp_path, '{ min-capability = "7.0", min-driver = "575" }')
    code, _, err = run("fetch", str(path), "--out", str(tmp_path / "fetched"))
    assert code == 2
    assert "min-capability 7.0: gfeng, torch have no kernels for 7.0 (the gated packages start at 7.5)" in err
    assert "min-driver 575: the CUDA 13.0 runtime of the lock needs driver 580.65.06" in err
    assert not (tmp_path / "fetched" / "1.0-cu130").exists()


def test_omitted_values_are_filled_in_from_the_binaries(gpu_index: FakeServer, tmp_path: Path) -> None:
    path = recipe(tmp_path)
    code, _, err = run("fetch", str(path), "--out", str(tmp_path / "fetched"))
    assert code == 0, err
    resolved = tomllib.loads((tmp_path / "fetched" / "1.0-cu130" / "recipe.toml").read_text())
    assert resolved["builds"][0]["gpu"] == {
        "min-capability": "7.5",
        "max-capability": "12.1",
        "min-driver": "580.65.06",
    }
