"""``lockbuild recipe update``: a new release's builds from the recipe's templates, locked before written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import ENGINE_MODULE, PY, day, publish_toy, uv_wheel
from servers import FakeServer, make_sdist, make_wheel

from lockbuild.cli import main

RECIPE = f'''\
# The toy engine (a comment the update keeps).
[engine]
name = "toyengine"
pypi = "toyengine"
binary = "toyengine"
verify = ["toyengine", "--version"]
gpu-probe = "torch"

# The 1.0 build, with a comment of its own.
[[builds]]
version = "1.0"
variant = "cu128-fi"
python = "{PY}"
platform = "x86_64-manylinux_2_28"
requirements = ["toyengine==1.0", "toydep==1.0"]  # toydep pinned for 1.0
serves = ["1.1"]
'''


def engine(version: str, tag: str, deps: tuple[str, ...]) -> tuple[str, bytes]:
    return make_wheel(
        "toyengine",
        version,
        deps=deps,
        tag=tag,
        modules={"toyengine/__init__.py": ENGINE_MODULE.format(version=version)},
        scripts={"toyengine": "toyengine:main"},
    )


@pytest.fixture
def index(srv: FakeServer, monkeypatch: pytest.MonkeyPatch) -> FakeServer:
    publish_toy(srv)
    name, data = uv_wheel()
    srv.publish(name.replace("x86_64", "aarch64"), data, uploaded=day(1))
    srv.publish(*make_wheel("nvidia-cuda-runtime", "13.0.96"), uploaded=day(1))
    srv.publish(*make_wheel("lkglib", "1.0", tag="cp39-abi3-manylinux_2_31_x86_64"), uploaded=day(1))
    srv.publish(*make_wheel("lkglib", "1.0", tag="cp39-abi3-manylinux_2_28_aarch64"), uploaded=day(1))
    srv.publish(*make_sdist("lkglib", "1.0"), uploaded=day(1))
    deps = ("toydep", "lkglib", "nvidia-cuda-runtime")
    for arch in ("x86_64", "aarch64"):
        srv.publish(*engine("2.0", f"py3-none-manylinux_2_28_{arch}", deps), uploaded=day(40))
        srv.publish(*engine("3.0", f"py3-none-manylinux_2_28_{arch}", (*deps, "lkmissing==9")), uploaded=day(50))
    monkeypatch.setenv("LOCKBUILD_INDEX_URL", srv.index_url())
    return srv


def update(recipe: Path, *args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, ["recipe", "update", str(recipe), *args])
    return r.exit_code, r.stdout, r.stderr


def test_the_new_release_gets_a_build_per_architecture_at_the_level_its_packages_need(
    index: FakeServer, tmp_path: Path
) -> None:
    recipe = tmp_path / "toy.toml"
    recipe.write_text(RECIPE)
    code, out, err = update(recipe, "--version", "2.0")
    assert code == 0, err
    text = recipe.read_text()
    assert text.startswith(RECIPE)  # every comment and the order kept; the new builds follow
    assert "added 2.0-cu130-fi (x86_64-manylinux_2_31)" in out
    assert "platform x86_64-manylinux_2_31: lkglib 1.0 has no older wheel" in out
    assert "added 2.0-cu130-fi-aarch64 (aarch64-manylinux_2_28)" in out
    assert "variant cu130-fi: CUDA level from nvidia-cuda-runtime 13.0.96" in out
    assert '+requirements = ["toyengine==2.0", "toydep"]' in out  # the diff; toydep's old pin dropped
    assert 'serves = ["1.1"]' in text.split("2.0-cu130", 1)[0] or text.count('serves = ["1.1"]') == 3
    # the result locks
    r = CliRunner().invoke(main, ["--json", "lock", str(recipe), "--out", str(tmp_path / "locks")])
    assert r.exit_code == 0, r.stderr
    assert sorted(x["build"] for x in json.loads(r.stdout)["locks"]) == [
        "1.0-cu128-fi",
        "2.0-cu130-fi",
        "2.0-cu130-fi-aarch64",
    ]


def test_dry_run_prints_the_diff_and_writes_nothing(index: FakeServer, tmp_path: Path) -> None:
    recipe = tmp_path / "toy.toml"
    recipe.write_text(RECIPE)
    code, out, err = update(recipe, "--version", "2.0", "--platform", "aarch64-manylinux_2_28", "--dry-run")
    assert code == 0, err
    assert recipe.read_text() == RECIPE
    assert out.startswith(f"--- a/{recipe}")
    assert '+variant = "cu130-fi-aarch64"' in out and "x86_64-manylinux_2_31" not in out


def test_a_release_that_cannot_be_resolved_names_uvs_reason_and_the_newest_that_can(
    index: FakeServer, tmp_path: Path
) -> None:
    recipe = tmp_path / "toy.toml"
    recipe.write_text(RECIPE)
    code, _, err = update(recipe, "--version", "3.0")
    assert code == 1
    assert "toyengine 3.0 cannot be resolved from this index" in err
    assert "2.0 is the newest that can" in err and "lkmissing" in err
    assert recipe.read_text() == RECIPE
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "toy.toml"]  # nothing beside it


FOLLOWING = RECIPE.replace(
    'requirements = ["toyengine==1.0", "toydep==1.0"]  # toydep pinned for 1.0',
    'requirements = ["toyengine==1.0", "flashinfer-cubin==0.5.2", "flashinfer-jit-cache==0.5.2+cu128"]',
).replace('serves = ["1.1"]', 'indexes = [{ name = "fi", url = "INDEX", packages = ["flashinfer-jit-cache"] }]')


@pytest.mark.parametrize("cubin_published", [True, False])
def test_flashinfers_kernels_follow_its_version_and_the_cuda_level(
    index: FakeServer, tmp_path: Path, cubin_published: bool
) -> None:
    index.publish(*make_wheel("flashinfer-python", "0.7.2", deps=("nvidia-cuda-runtime",)), uploaded=day(1))
    if cubin_published:
        index.publish(*make_wheel("flashinfer-cubin", "0.7.2"), uploaded=day(1))
    index.publish(*make_wheel("flashinfer-jit-cache", "0.7.2+cu130"), index="cu130")
    for arch in ("x86_64", "aarch64"):
        index.publish(*engine("4.0", f"py3-none-manylinux_2_28_{arch}", ("flashinfer-python",)), uploaded=day(60))
    recipe = tmp_path / "toy.toml"
    recipe.write_text(FOLLOWING.replace("INDEX", index.index_url("cu128")))
    code, out, err = update(recipe, "--version", "4.0", "--platform", "x86_64-manylinux_2_28")
    assert code == 0, err
    cubin = '"flashinfer-cubin==0.7.2", ' if cubin_published else ""
    assert f'+requirements = ["toyengine==4.0", {cubin}"flashinfer-jit-cache==0.7.2+cu130"]' in out
    assert f'url = "{index.index_url("cu130")}"' in out
    if not cubin_published:
        assert "flashinfer-cubin left out: the package index" in out and "first-use download" in out
    r = CliRunner().invoke(
        main, ["--json", "lock", str(recipe), "--build", "4.0-cu130-fi", "--out", str(tmp_path / "l")]
    )
    assert r.exit_code == 0, r.stderr
    (use,) = json.loads(r.stdout)["locks"][0]["first_use"]
    assert use["carried"] is cubin_published


def test_the_new_builds_gpu_table_is_measured_from_its_binaries(
    srv: FakeServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import fatbinkit

    monkeypatch.setenv("LOCKBUILD_INDEX_URL", srv.index_url())
    srv.publish(*uv_wheel(), uploaded=day(1))
    tag = "py3-none-manylinux_2_28_x86_64"
    for version, when in (("1.0", day(5)), ("2.0", day(30))):
        libs = {"gfeng/_C.abi3.so": fatbinkit.cuda_so(("7.5", "8.0", "9.0", "12.0"), ("9.0",))}
        wheel = make_wheel("gfeng", version, deps=("torch", "nvidia-cuda-runtime"), data_files=libs, tag=tag)
        srv.publish(*wheel, uploaded=when)
    torch = {"torch/lib/libtorch_cuda.so": fatbinkit.cuda_so(("7.5", "8.0", "9.0", "12.0"))}
    srv.publish(*make_wheel("torch", "2.14.0", data_files=torch, tag=tag), uploaded=day(2))
    srv.publish(*make_wheel("nvidia-cuda-runtime", "13.0.96", tag=tag), uploaded=day(2))
    recipe = tmp_path / "gfeng.toml"
    recipe.write_text(
        '[engine]\nname = "gfeng"\npypi = "gfeng"\nbinary = "gfeng"\nverify = ["gfeng"]\n\n# the template\n'
        f'[[builds]]\nversion = "1.0"\nvariant = "cu128"\npython = "{PY}"\nplatform = "x86_64-manylinux_2_28"\n'
        'requirements = ["gfeng==1.0"]\n'
    )
    code, out, err = update(recipe, "--version", "2.0")
    assert code == 0, err
    assert '+gpu = { min-capability = "7.5", max-capability = "12.0", min-driver = "580.65.06" }' in out
    assert (
        "# - gpu: measured from the binaries on " in out and "by `lockbuild recipe update`: GPU fit: CUDA 13.0" in out
    )
    r = CliRunner().invoke(main, ["--json", "lock", str(recipe), "--build", "2.0-cu130", "--out", str(tmp_path / "l")])
    assert r.exit_code == 0, r.stderr


def test_a_release_that_cannot_be_resolved_after_the_recipes_own_names_the_recipes(
    index: FakeServer, tmp_path: Path
) -> None:
    recipe = tmp_path / "toy.toml"
    recipe.write_text(
        RECIPE.replace('"1.0"', '"2.0"').replace("toyengine==1.0", "toyengine==2.0").replace('serves = ["1.1"]\n', "")
    )
    before = recipe.read_text()
    code, _, err = update(recipe, "--version", "3.0")
    assert code == 1
    assert "toyengine 3.0 cannot be resolved from this index" in err
    assert "2.0 is the newest that can (the recipe has its builds)" in err
    assert recipe.read_text() == before
