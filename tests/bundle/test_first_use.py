"""First-use downloads: the one table (firstuse.py), shown by lock, inspect and lockbuild test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import TOY_RECIPE, Keys, day, publish_toy
from servers import FakeServer, make_wheel

from lockbuild.bundle.firstuse import first_use, follows
from lockbuild.cli import main
from lockbuild.selftest.report import Report, Step


def test_flashinfer_without_its_kernels_at_the_same_version_fetches_them() -> None:
    (u,) = first_use([("flashinfer-python", "0.7.2.post1"), ("flashinfer-cubin", "0.6.13"), ("torch", "2.14.0")])
    assert (u.package, u.carried, u.missing) == (
        "flashinfer-python",
        False,
        ("flashinfer-cubin", "flashinfer-jit-cache"),
    )
    assert "nvcc" in u.fetches and "flashinfer-jit-cache" in u.remedy and "#2941" in u.source


def test_flashinfer_with_both_kernel_packages_of_its_version_is_carried() -> None:
    got = first_use(
        [("flashinfer_python", "0.5.2"), ("flashinfer-cubin", "0.5.2"), ("flashinfer-jit-cache", "0.5.2+cu128")]
    )
    assert [(u.package, u.carried) for u in got] == [("flashinfer-python", True)]
    assert follows("flashinfer-jit-cache") == "flashinfer-python" and follows("torch") is None


def test_tiktoken_is_carried_when_the_recipe_points_it_at_its_files() -> None:
    (bare,) = first_use([("tiktoken", "0.12.0")])
    assert not bare.carried and "TIKTOKEN_ENCODINGS_BASE" in bare.remedy
    env = {"TIKTOKEN_ENCODINGS_BASE": "{prefix}/share/tiktoken"}
    (set_,) = first_use([("tiktoken", "0.12.0")], env, extra_files=True)
    assert set_.carried
    (no_files,) = first_use([("tiktoken", "0.12.0")], env)  # the setting alone carries nothing
    assert not no_files.carried


def test_the_self_test_names_what_it_did_not_exercise_beside_its_verdict() -> None:
    r = Report(
        "b.lbz", "e", "1-x", "ns", "strace", (Step("install", "passed", ""),), (), (), first_use=("fi 1 fetches",)
    )
    assert r.text().splitlines()[-2:] == [
        "PASSED: the bundle ran with no network",
        "not exercised without a GPU: fi 1 fetches",
    ]
    assert r.to_json()["first_use"] == ["fi 1 fetches"]


@pytest.fixture
def fi_index(srv: FakeServer, monkeypatch: pytest.MonkeyPatch) -> FakeServer:
    publish_toy(srv)
    srv.publish(*make_wheel("flashinfer-python", "0.7.2.post1"), uploaded=day(1))
    monkeypatch.setenv("LOCKBUILD_INDEX_URL", srv.index_url())
    return srv


def test_lock_and_inspect_name_flashinfers_kernels_as_a_first_use_download(
    fi_index: FakeServer, tmp_path: Path, keys: Keys
) -> None:
    recipe = tmp_path / "r.toml"
    recipe.write_text(TOY_RECIPE.replace('"toyengine==1.0"]', '"toyengine==1.0", "flashinfer-python"]'))
    r = CliRunner().invoke(main, ["--json", "lock", str(recipe), "--out", str(tmp_path / "locks")])
    assert r.exit_code == 0, r.stderr
    (u,) = json.loads(r.stdout)["locks"][0]["first_use"]
    assert (u["package"], u["version"], u["carried"]) == ("flashinfer-python", "0.7.2.post1", False)
    r = CliRunner().invoke(main, ["lock", str(recipe), "--out", str(tmp_path / "locks")])
    assert "  first use: flashinfer-python 0.7.2.post1 fetches at first use FlashInfer's kernels" in r.stdout
    r = CliRunner().invoke(main, ["build", str(recipe), "--key", str(keys.secret), "--out", str(tmp_path / "dist")])
    assert r.exit_code == 0, r.stderr
    (bundle,) = (tmp_path / "dist").glob("*.lbz")
    r = CliRunner().invoke(main, ["--json", "inspect", str(bundle)])
    assert [u["package"] for u in json.loads(r.stdout)["first_use"]] == ["flashinfer-python"]
    r = CliRunner().invoke(main, ["inspect", str(bundle)])
    assert "first use: flashinfer-python 0.7.2.post1 fetches at first use" in r.stdout
