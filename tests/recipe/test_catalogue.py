"""The recipe catalogue in bundles/: every recipe parses, says where its numbers come from, pins what a
second index serves, and names bundles no other recipe names. And scripts/check-catalogue, run against
the local fake index: it locks what it can reach, skips what it cannot (saying which host), and fails
loudly on a build that does not lock. No test here reaches the network."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import PLATFORM, PY, REPO_ROOT, TOY_RECIPE
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from servers import FakeServer

from lockbuild import __version__
from lockbuild.recipe import Build, Recipe, ReleaseWheel, SelfWheel, load_recipe

ROOT = REPO_ROOT
BUNDLES = ROOT / "bundles"
CHECK = ROOT / "scripts" / "check-catalogue"
RECIPE_FILES = sorted(BUNDLES.glob("*.toml"))


def _catalogue() -> list[Recipe]:
    return [load_recipe(p) for p in RECIPE_FILES]


def _comments(recipe: Recipe) -> str:
    """Every comment in the recipe (whole-line and trailing), as one text."""
    return "\n".join(line.split("#", 1)[1] for line in recipe.text.splitlines() if "#" in line)


def _pins(build: Build) -> dict[str, str]:
    out = {}
    for text in build.requirements:
        req = Requirement(text)
        specs = list(req.specifier)
        if len(specs) == 1 and specs[0].operator == "==":
            out[canonicalize_name(req.name)] = specs[0].version
    return out


def test_the_catalogue_has_the_engines_the_release_engineers_ship() -> None:
    names = {r.engine.name for r in _catalogue()}
    assert {"vllm", "sglang", "llama-cpp", "onnxruntime"} <= names
    vllm = next(r for r in _catalogue() if r.engine.name == "vllm")
    assert {b.variant for b in vllm.builds} >= {"cu128", "cu129"}


@pytest.mark.parametrize("path", RECIPE_FILES, ids=lambda p: p.name)
def test_recipe_parses_and_names_its_file(path: Path) -> None:
    recipe = load_recipe(path)
    assert recipe.builds
    assert recipe.engine.name == path.stem, f"{path.name} holds engine {recipe.engine.name!r}; name the file after it"


@pytest.mark.parametrize("path", RECIPE_FILES, ids=lambda p: p.name)
def test_recipe_says_where_its_numbers_come_from(path: Path) -> None:
    recipe = load_recipe(path)
    assert recipe.text.startswith("#"), f"{path.name} should open with a comment saying what it is"
    notes = _comments(recipe)
    for b in recipe.builds:
        assert b.version in notes, f"{path.name}: no comment says where version {b.version} comes from"
        if b.as_of is None:
            assert "cut-off" in notes, f"{path.name}: {b.id} has no as-of; a comment should give its cut-off"
        else:
            assert "as-of" in notes, f"{path.name}: {b.id} sets as-of; a comment should say why that time"
        if b.gpu is not None and b.gpu.min_driver:
            assert b.gpu.min_driver in notes, f"{path.name}: no comment says where driver {b.gpu.min_driver} is from"
        if b.gpu is not None and b.gpu.min_capability:
            cap = "{}.{}".format(*b.gpu.min_capability)
            assert cap in notes, f"{path.name}: no comment says where capability {cap} is from"
        if b.free_gb is not None:
            assert "free-gb" in notes, f"{path.name}: {b.id} sets free-gb; a comment should say how it was chosen"
        for ix in b.extra_indexes:  # index, and each of indexes
            host = ix.url.split("/")[2]
            assert host in notes, f"{path.name}: no comment explains the extra index {ix.url}"
        if isinstance(b.wheel, ReleaseWheel):
            assert b.wheel.tag.lstrip("v") in notes, f"{path.name}: no comment names the release of the wheel"
        if b.assets is not None:
            for name in b.assets.files:
                assert name in notes, f"{path.name}: no comment says where asset {name} comes from"


@pytest.mark.parametrize("path", RECIPE_FILES, ids=lambda p: p.name)
def test_second_index_packages_are_pinned(path: Path) -> None:
    """The second index publishes no upload times: only == pins (and the lock's hashes) hold those packages,
    and only a full version with its local label (or a pin-sha256) names one release: ``torch==2.8.0`` also
    matches a ``2.8.0+cu128.post1`` added later."""
    for b in load_recipe(path).builds:
        pins = _pins(b)
        for url, name in ((i.url, n) for i in b.extra_indexes for n in i.packages):  # index, and each of indexes
            assert name in pins, f"{path.name}: {b.id} takes {name} from {url} without an == pin"
            assert "+" in pins[name] or b.pinned_sha256(name), (
                f"{path.name}: {b.id} pins {name}=={pins[name]} on an index without upload times; "
                "name the full version with its local label (e.g. 2.8.0+cu129) or pin-sha256 the file"
            )


@pytest.mark.parametrize("path", RECIPE_FILES, ids=lambda p: p.name)
def test_release_files_have_a_repository(path: Path) -> None:
    """Assets come from engine.repo, a release wheel from its own repo: both must be named."""
    recipe = load_recipe(path)
    for b in recipe.builds:
        if b.assets is not None:
            assert recipe.engine.repo, f"{path.name}: {b.id} has assets but the engine names no repo"
        if isinstance(b.wheel, ReleaseWheel):
            assert b.wheel.project in _pins(b), f"{path.name}: {b.id} should pin {b.wheel.project}== its version"
            assert _pins(b)[b.wheel.project] == b.version
        if isinstance(b.wheel, SelfWheel):  # lockbuild's own: pinned at the checkout's version
            assert recipe.engine.name == "lockbuild" and _pins(b)["lockbuild"] == b.version == __version__


def test_engine_names_and_bundle_names_are_unique_across_the_catalogue() -> None:
    engines: dict[str, str] = {}
    bundles: dict[str, str] = {}
    for recipe in _catalogue():
        where = Path(recipe.path).name
        assert recipe.engine.name not in engines, f"{where} and {engines[recipe.engine.name]} both define it"
        engines[recipe.engine.name] = where
        for b in recipe.builds:
            bundle = f"{recipe.engine.name}-{b.id}-{b.platform}.lbz"
            assert bundle not in bundles, f"{where} and {bundles[bundle]} both build {bundle}"
            bundles[bundle] = where
    assert len(bundles) >= 7


# ------------------------------------------------------------------------------- scripts/check-catalogue


def _run_check(*recipes: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, LOCKBUILD=str(Path(sys.executable).parent / "lockbuild"))
    return subprocess.run(
        [sys.executable, str(CHECK), *map(str, recipes)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )


def _recipe(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / f"{name}.toml"
    p.write_text(text.replace('name = "toyengine"', f'name = "{name}"'))
    return p


def test_check_catalogue_locks_what_it_reaches(env: FakeServer, tmp_path: Path) -> None:
    toy = _recipe(tmp_path, "toyengine", TOY_RECIPE)
    proc = _run_check(toy)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "locked   toyengine 1.0-cpu: 2 packages" in proc.stdout
    assert "cut-off 2025-01-06T00:00:00Z" in proc.stdout  # toyengine 1.0 was published on day 5, + 24 h
    assert proc.stdout.strip().endswith("1 locked, 0 skipped, 0 failed")


def test_check_catalogue_shows_the_locks_warnings(env: FakeServer, tmp_path: Path) -> None:
    """A release whose files span more than a day: the locked line says so."""
    from conftest import day
    from servers import make_wheel

    if ("primary", "ckspan") not in env.projects:
        env.publish(*make_wheel("ckspan", "1.0"), uploaded=day(5))
        env.publish(*make_wheel("ckspan", "1.0", tag="py312-none-any"), uploaded=day(90))
    text = TOY_RECIPE.replace('pypi = "toyengine"', 'pypi = "ckspan"').replace('"toyengine==1.0"', '"ckspan==1.0"')
    proc = _run_check(_recipe(tmp_path, "ckspan", text))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "warning: ckspan==1.0's files were uploaded over more than a day" in proc.stdout
    assert "treated as absent: ckspan-1.0-py312-none-any.whl" in proc.stdout


@pytest.mark.slow  # over 5 s
def test_check_catalogue_skips_unreachable_hosts_and_fails_on_a_bad_build(
    env: FakeServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    toy = _recipe(tmp_path, "toyengine", TOY_RECIPE)
    dead_index = _recipe(
        tmp_path,
        "second",
        TOY_RECIPE
        + f'''
[[builds]]
version = "1.0"
variant = "cu"
python = "{PY}"
platform = "{PLATFORM}"
requirements = ["toyengine==1.0", "toydep==1.0"]
index = {{ url = "http://127.0.0.1:9/whl/cu", packages = ["toydep"] }}
''',
    )
    release = _recipe(
        tmp_path,
        "released",
        TOY_RECIPE.replace('binary = "toyengine"', 'binary = "toyengine"\nrepo = "owner/toy"')
        + '\nassets = { tag = "v1", dir = "share", files = ["toy.tar.gz"] }\n',
    )
    missing = _recipe(tmp_path, "missing", TOY_RECIPE.replace('version = "1.0"', 'version = "9.9"'))
    monkeypatch.setenv("LOCKBUILD_GITHUB_API", "http://127.0.0.1:9/api")  # a GitHub that does not answer
    proc = _run_check(toy, dead_index, release, missing)
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr
    assert "locked   toyengine 1.0-cpu" in out
    assert "locked   second 1.0-cpu" in out
    assert "skipped  second 1.0-cu: not reachable: 127.0.0.1:9 (second index)" in out
    assert "skipped  released 1.0-cpu: not reachable: 127.0.0.1:9 (GitHub API)" in out
    assert "FAILED   missing 9.9-cpu:" in out and "no release toyengine==9.9" in out
    assert out.strip().endswith("2 locked, 2 skipped, 1 failed")
