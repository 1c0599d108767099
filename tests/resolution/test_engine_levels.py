"""A package with no wheel for the build's platform: the error names the platform that has one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import PY, TOY_RECIPE, day, publish_toy
from servers import FakeServer, make_sdist, make_wheel

from lockbuild.cli import main
from lockbuild.fetch.index import IndexFile
from lockbuild.resolution.wheellevels import lowest_platform, wheel_elsewhere
from lockbuild.target import Target

CP = f"cp{PY.replace('.', '')}"


def files(*names: str) -> list[IndexFile]:
    return [IndexFile(n, f"https://x.invalid/{n}", "0" * 64, 1, day(1), False) for n in names]


def test_the_lowest_level_with_a_wheel_is_found() -> None:
    t = Target.of(PY, "x86_64-manylinux_2_28")
    names = ["g-1.0-cp39-abi3-manylinux_2_31_x86_64.whl", "g-1.0-cp39-abi3-manylinux_2_34_x86_64.whl"]
    assert lowest_platform(names, t) == "x86_64-manylinux_2_31"
    assert lowest_platform(["g-1.0-cp39-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"], t) == (
        "x86_64-manylinux_2_28"
    )
    assert lowest_platform(["g-1.0-cp39-abi3-manylinux_2_31_aarch64.whl"], t) is None


def test_another_architecture_is_named_when_the_own_has_none() -> None:
    t = Target.of(PY, "x86_64-manylinux_2_28")
    level = wheel_elsewhere("g", files("g-1.0-cp39-abi3-manylinux_2_28_aarch64.whl", "g-1.0.tar.gz"), t, None)
    assert level is not None and (level.platform, level.same_arch) == ("aarch64-manylinux_2_28", False)


def test_a_release_that_fits_is_passed_over_for_the_one_that_does_not() -> None:
    t = Target.of(PY, "x86_64-manylinux_2_28")
    got = wheel_elsewhere(
        "g",
        files("g-2.0-py3-none-any.whl", "g-1.0-cp39-abi3-manylinux_2_31_x86_64.whl", "g-1.0.tar.gz"),
        t,
        None,
    )
    assert got is not None and (got.version, got.platform) == ("1.0", "x86_64-manylinux_2_31")


@pytest.fixture
def glib_env(srv: FakeServer, monkeypatch: pytest.MonkeyPatch) -> FakeServer:
    publish_toy(srv)
    srv.publish(*make_wheel("lkglib", "1.0", tag="cp39-abi3-manylinux_2_31_x86_64"), uploaded=day(1))
    srv.publish(*make_sdist("lkglib", "1.0"), uploaded=day(1))
    monkeypatch.setenv("LOCKBUILD_INDEX_URL", srv.index_url())
    return srv


def test_a_wheel_at_a_newer_manylinux_level_is_named_as_the_fix(glib_env: FakeServer, tmp_path: Path) -> None:
    recipe = tmp_path / "r.toml"
    recipe.write_text(TOY_RECIPE.replace('"toyengine==1.0"]', '"toyengine==1.0", "lkglib==1.0"]'))
    r = CliRunner().invoke(main, ["lock", str(recipe), "--out", str(tmp_path / "out")])
    assert r.exit_code == 1
    assert "ERROR lkglib has no wheel for Python" in r.stderr and "only a source distribution" in r.stderr
    assert "lkglib 1.0 has wheels for x86_64-manylinux_2_31." in r.stderr
    assert 'TIP Raise the build\'s platform to x86_64-manylinux_2_31 (platform = "x86_64-manylinux_2_31")' in r.stderr
    assert "build-on-node" in r.stderr
    assert not (tmp_path / "out").exists()
    # and with the platform raised, it locks
    recipe.write_text(recipe.read_text().replace("x86_64-manylinux_2_28", "x86_64-manylinux_2_31"))
    r = CliRunner().invoke(main, ["--json", "lock", str(recipe), "--out", str(tmp_path / "out")])
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["locks"][0]["build"]


def test_a_release_with_no_wheel_for_the_platform_and_no_sdist_names_the_level(
    glib_env: FakeServer, tmp_path: Path
) -> None:
    glib_env.publish(*make_wheel("lknewer", "2.0", tag="cp39-abi3-manylinux_2_34_x86_64"), uploaded=day(1))
    recipe = tmp_path / "r.toml"
    recipe.write_text(TOY_RECIPE.replace('"toyengine==1.0"]', '"toyengine==1.0", "lknewer==2.0"]'))
    r = CliRunner().invoke(main, ["lock", str(recipe), "--out", str(tmp_path / "out")])
    assert r.exit_code == 1
    assert f"ERROR lknewer 2.0 has no wheel for Python {PY} on x86_64-manylinux_2_28." in r.stderr
    assert "lknewer 2.0 has wheels for x86_64-manylinux_2_34." in r.stderr
    assert "Raise the build's platform to x86_64-manylinux_2_34" in r.stderr
