"""Several extra indexes: ``indexes = [{ name, url, packages }]`` next to ``index``.

Each extra index serves exactly the packages it names, pinned with ==, and nothing else; a package named
on two indexes is refused when the recipe is read; the lock records which index served each file and
whether its time came from the index's upload times or from an exemption."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import PLATFORM, PY, TOY_RECIPE, Keys, day
from servers import FakeServer, make_wheel

from lockbuild.builder.direct import read_source_requirements
from lockbuild.builder.session import session
from lockbuild.bundle.lockfiles import bundle_pylock, bundle_requirements
from lockbuild.cli import main
from lockbuild.errors import RecipeError
from lockbuild.progress import Progress
from lockbuild.recipe import SecondIndex, load_recipe, parse_recipe
from lockbuild.resolution.resolve import second_index_project
from lockbuild.settings import load


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def body(name: str, where: str) -> bytes:
    """A wheel of NAME 1.0 whose content says which index it was put on (so each copy has its own hash)."""
    return make_wheel(name, "1.0", modules={f"{name}/__init__.py": f"where = {where!r}\n"})[1]


WHEEL = "{}-1.0-py3-none-any.whl"


@pytest.fixture(scope="module")
def indexes(server: FakeServer) -> FakeServer:
    """ixeng on the primary index needs ixa and ixb; every index offers both, each copy different."""
    server.publish(*make_wheel("ixeng", "1.0", deps=("ixa", "ixb", "ixdep")), uploaded=day(5))
    server.publish(*make_wheel("ixdep", "1.0"), uploaded=day(1))
    for name in ("ixa", "ixb"):
        for where in ("primary", "alpha", "beta"):
            when = day(1) if where == "primary" else None  # extra indexes without upload times, like PyTorch's
            server.publish(WHEEL.format(name), body(name, where), index=where, uploaded=when)
    return server


def recipe(server: FakeServer, *, reqs: str = '"ixeng==1.0", "ixa==1.0", "ixb==1.0"', extra: str = "") -> str:
    return (
        '[engine]\nname = "ixeng"\npypi = "ixeng"\nbinary = "ixeng"\nverify = ["ixeng"]\n\n'
        f'[[builds]]\nversion = "1.0"\nvariant = "two"\npython = "{PY}"\nplatform = "{PLATFORM}"\n'
        f"requirements = [{reqs}]\n"
        f"indexes = [\n"
        f'  {{ name = "alpha", url = "{server.index_url("alpha")}", packages = ["ixa"] }},\n'
        f'  {{ name = "beta", url = "{server.index_url("beta")}", packages = ["ixb"] }},\n'
        f"]\n{extra}"
    )


def run_lock(path: Path, out: Path) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, ["lock", str(path), "--out", str(out), "--json"], catch_exceptions=False)
    return r.exit_code, r.stdout, r.stderr


def test_two_extra_indexes_each_serve_only_their_own_package(
    env: FakeServer, indexes: FakeServer, tmp_path: Path
) -> None:
    path = tmp_path / "ixeng.toml"
    path.write_text(recipe(indexes))
    code, stdout, stderr = run_lock(path, tmp_path / "out")
    assert code == 0, stderr
    lock = json.loads(stdout)["locks"][0]
    assert lock["lock_format"] == "pylock.toml"
    pkgs = {p["name"]: p for p in lock["packages"]}
    assert sorted(pkgs) == ["ixa", "ixb", "ixdep", "ixeng"]
    assert pkgs["ixa"]["url"] == f"{indexes.url}/files/alpha/{WHEEL.format('ixa')}"
    assert pkgs["ixa"]["sha256"] == sha(body("ixa", "alpha"))
    assert pkgs["ixb"]["url"] == f"{indexes.url}/files/beta/{WHEEL.format('ixb')}"
    assert pkgs["ixb"]["sha256"] == sha(body("ixb", "beta"))
    assert pkgs["ixeng"]["url"].startswith(f"{indexes.url}/files/primary/")
    assert [(pkgs[n]["index"], pkgs[n]["time_from"]) for n in ("ixa", "ixb", "ixeng")] == [
        ("alpha", "exemption"),
        ("beta", "exemption"),
        ("primary", "upload-time"),
    ]
    pylock = (tmp_path / "out" / "1.0-two" / "pylock.toml").read_text()
    for name, other in (("ixa", "beta"), ("ixa", "primary"), ("ixb", "alpha"), ("ixb", "primary")):
        assert sha(body(name, other)) not in pylock, f"{name} from {other}"
    data = {p["name"]: p for p in tomllib.loads(pylock)["packages"]}
    assert [w["url"] for w in data["ixa"]["wheels"]] == [pkgs["ixa"]["url"]]
    assert [w["url"] for w in data["ixb"]["wheels"]] == [pkgs["ixb"]["url"]]
    resolved = parse_recipe((tmp_path / "out" / "1.0-two" / "recipe.toml").read_text()).builds[0]
    assert [(i.name, i.packages) for i in resolved.extra_indexes] == [("alpha", ("ixa",)), ("beta", ("ixb",))]

    # The lock records, per file, the index that served it and where its time came from.
    settings = load(dict(os.environ), home=tmp_path)
    with session(settings, progress=Progress.quiet()) as s:
        r = load_recipe(path)
        plan = s.planner.plan(r, r.builds[0])
    got = {f.name: (f.index, f.time_from, f.origin) for f in plan.lock.files}
    assert got == {
        "ixa": ("alpha", "exemption", "second"),
        "ixb": ("beta", "exemption", "second"),
        "ixeng": ("primary", "upload-time", "primary"),
        "ixdep": ("primary", "upload-time", "primary"),
    }
    bundled = {p["name"]: p for p in tomllib.loads(bundle_pylock(plan.lock.files, r.builds[0].target))["packages"]}
    assert bundled["ixa"]["tool"]["lockbuild"] == {"index": "alpha", "time-from": "exemption"}
    assert bundled["ixeng"]["tool"]["lockbuild"] == {"index": "primary", "time-from": "upload-time"}
    assert "# wheels/ixb-1.0-py3-none-any.whl (from index beta; time: exemption)" in bundle_requirements(
        plan.lock.files
    )


def test_an_exemption_on_the_primary_index_is_recorded(env: FakeServer, indexes: FakeServer, tmp_path: Path) -> None:
    path = tmp_path / "ixeng.toml"
    path.write_text(recipe(indexes, extra="exclude-newer-package = { ixdep = false }\n"))
    settings = load(dict(os.environ), home=tmp_path)
    with session(settings, progress=Progress.quiet()) as s:
        r = load_recipe(path)
        plan = s.planner.plan(r, r.builds[0])
    got = {f.name: (f.index, f.time_from) for f in plan.lock.files}
    assert got["ixdep"] == ("primary", "exemption") and got["ixeng"] == ("primary", "upload-time")


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (
            'index = { url = "https://download.example/whl", packages = ["ixa"] }\n',
            "'ixa' is named on two indexes, the index key and indexes entry 'alpha'",
        ),
        (
            'indexes = [{ name = "a", url = "https://a.example/s", packages = ["ixa"] },'
            ' { name = "b", url = "https://b.example/s", packages = ["IXA"] }]\n',
            "'ixa' is named on two indexes, indexes entry 'a' and indexes entry 'b'",
        ),
    ],
    ids=["index-and-indexes", "two-indexes"],
)
def test_a_package_named_on_two_indexes_is_refused(extra: str, expected: str) -> None:
    head = (
        '[engine]\nname = "ixeng"\npypi = "ixeng"\nbinary = "ixeng"\nverify = ["ixeng"]\n\n'
        f'[[builds]]\nversion = "1.0"\nvariant = "two"\npython = "{PY}"\nplatform = "{PLATFORM}"\n'
        'requirements = ["ixeng==1.0", "ixa==1.0"]\n'
    )
    if extra.startswith("index ="):
        extra += 'indexes = [{ name = "alpha", url = "https://alpha.example/s", packages = ["ixa"] }]\n'
    with pytest.raises(RecipeError) as err:
        parse_recipe(head + extra)
    assert err.value.problems == (
        f"builds[0].indexes: {expected}; expected each package on one index only: a name on "
        "two indexes would come from whichever offers the better version (how torchtriton "
        "was taken in 2022)",
    )


def test_a_package_named_on_two_indexes_is_refused_before_anything_is_fetched(
    env: FakeServer, indexes: FakeServer, tmp_path: Path
) -> None:
    path = tmp_path / "ixeng.toml"
    text = recipe(indexes).replace('packages = ["ixb"]', 'packages = ["ixb", "ixa"]')
    path.write_text(text)
    before = len(indexes.requests)
    code, _, stderr = run_lock(path, tmp_path / "out")
    assert code == 2  # a recipe problem: a usage error
    assert "'ixa' is named on two indexes, indexes entry 'alpha' and indexes entry 'beta'" in stderr
    assert "Traceback" not in stderr
    assert len(indexes.requests) == before and not (tmp_path / "out").exists()


def test_a_package_on_an_extra_index_that_is_not_pinned_is_refused(
    env: FakeServer, indexes: FakeServer, tmp_path: Path
) -> None:
    path = tmp_path / "ixeng.toml"
    path.write_text(recipe(indexes, reqs='"ixeng==1.0", "ixa==1.0", "ixb>=1.0"'))
    code, _, stderr = run_lock(path, tmp_path / "out")
    assert code == 2  # a recipe problem: a usage error
    assert "builds[0].indexes[1].packages: 'ixb' comes from index 'beta', which publishes no upload times" in stderr
    assert "must be pinned with == in requirements, found 'ixb>=1.0'" in stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ('{ name = "primary", url = "https://a.example/s", packages = ["ixa"] }', "indexes[0].name: expected a name"),
        ('{ url = "https://a.example/s", packages = ["ixa"] }', "indexes[0].name: missing"),
        ('{ name = "a", url = "https://a.example/s", packages = ["ixa", "ixa"] }', "found 'ixa' named twice"),
        ('{ name = "a", url = "https://a.example/s", packages = ["ixb"] }', "'ixb' comes from index 'a' but is not in"),
        ('"https://a.example/s"', "indexes[0]: expected a table { name, url, packages }"),
    ],
)
def test_a_malformed_indexes_entry_is_refused(entry: str, expected: str) -> None:
    text = (
        '[engine]\nname = "ixeng"\npypi = "ixeng"\nbinary = "ixeng"\nverify = ["ixeng"]\n\n'
        f'[[builds]]\nversion = "1.0"\nvariant = "two"\npython = "{PY}"\nplatform = "{PLATFORM}"\n'
        f'requirements = ["ixeng==1.0", "ixa==1.0"]\nindexes = [{entry}]\n'
    )
    with pytest.raises(RecipeError) as err:
        parse_recipe(text)
    assert any(expected in p for p in err.value.problems), err.value.problems


def test_each_index_is_explicit_in_the_resolution_project() -> None:
    got = tomllib.loads(
        second_index_project(
            ["ixeng==1.0"],
            [SecondIndex("https://a.example/s", ("ixa",)), SecondIndex("https://b.example/s", ("ixb", "ixc"), "b")],
        )
    )
    assert got["tool"]["uv"]["index"] == [
        {"name": "lockbuild-second", "url": "https://a.example/s", "explicit": True},
        {"name": "lockbuild-extra-b", "url": "https://b.example/s", "explicit": True},
    ]
    assert got["tool"]["uv"]["sources"] == {
        "ixa": {"index": "lockbuild-second"},
        "ixb": {"index": "lockbuild-extra-b"},
        "ixc": {"index": "lockbuild-extra-b"},
    }


def test_source_requirement_lines_naming_any_extra_indexes_package_are_skipped(tmp_path: Path) -> None:
    reqs = b"ixa>=0.1\nixb\nixdep==1.0\n"
    archive = tmp_path / "src.tar.gz"
    with tarfile.open(archive, "w:gz") as tf:
        info = tarfile.TarInfo("eng-1.0/requirements.txt")
        info.size = len(reqs)
        tf.addfile(info, io.BytesIO(reqs))
    r = parse_recipe(
        '[engine]\nname = "ixeng"\npypi = "ixeng"\nbinary = "ixeng"\nverify = ["ixeng"]\n\n'
        f'[[builds]]\nversion = "1.0"\nvariant = "two"\npython = "{PY}"\nplatform = "{PLATFORM}"\n'
        'requirements = ["ixeng==1.0", "ixa==1.0", "ixb==1.0"]\n'
        f'source = {{ url = "https://x.example/eng.tar.gz", sha256 = "{"a" * 64}", top = "eng-1.0", dir = "src", '
        'requirements = "requirements.txt" }\n'
        'index = { url = "https://a.example/s", packages = ["ixa"] }\n'
        'indexes = [{ name = "b", url = "https://b.example/s", packages = ["ixb"] }]\n'
    )
    assert read_source_requirements(archive, r.builds[0]) == ("ixdep==1.0",)


def test_the_exact_pin_rule_holds_on_every_extra_index(env: FakeServer, indexes: FakeServer, tmp_path: Path) -> None:
    """An index without upload times: `==1.0` must name exactly one release there, on beta as on alpha."""
    for label in ("cu128", "cu129"):
        indexes.publish(*make_wheel("ixcuda", f"1.0+{label}"), index="beta")
    path = tmp_path / "ixeng.toml"
    text = recipe(indexes, reqs='"ixeng==1.0", "ixa==1.0", "ixb==1.0", "ixcuda==1.0"')
    path.write_text(text.replace('packages = ["ixb"]', 'packages = ["ixb", "ixcuda"]'))
    code, stdout, _ = run_lock(path, tmp_path / "out")
    assert code != 0
    message = json.loads(stdout)["error"]["message"]
    assert message.startswith("ixcuda==1.0 matches 2 releases on index 'beta' (")
    assert "1+cu128, 1+cu129" in message
    path.write_text(path.read_text().replace('"ixcuda==1.0"', '"ixcuda==1.0+cu129"'))
    code, stdout, stderr = run_lock(path, tmp_path / "out")
    assert code == 0, stdout + stderr
    pkgs = {p["name"]: p for p in json.loads(stdout)["locks"][0]["packages"]}
    assert pkgs["ixcuda"]["url"] == f"{indexes.url}/files/beta/ixcuda-1.0+cu129-py3-none-any.whl"


def test_an_extra_index_over_plain_http_is_refused_before_uv_runs(
    env: FakeServer, indexes: FakeServer, tmp_path: Path
) -> None:
    path = tmp_path / "ixeng.toml"
    path.write_text(recipe(indexes).replace(indexes.index_url("beta"), "http://mirror.example.org/simple"))
    code, _, stderr = run_lock(path, tmp_path / "out")
    assert code == 1
    assert "1.0-two: index 'beta': refusing plain http to mirror.example.org" in stderr
    assert not (tmp_path / "out").exists()


def test_a_bundle_with_an_extra_index_records_it_and_installs_its_file(
    env: FakeServer, keys: Keys, tmp_path: Path
) -> None:
    """Built, signed, installed offline: the node gets toydep from index alpha, and the bundle's lock says so."""
    import subprocess

    import zstandard

    alpha = make_wheel("toydep", "1.0", modules={"toydep/__init__.py": "where = 'alpha'\n"})
    env.publish(*alpha, index="alpha")
    path = tmp_path / "toyengine.toml"
    path.write_text(
        TOY_RECIPE.replace('requirements = ["toyengine==1.0"]', 'requirements = ["toyengine==1.0", "toydep==1.0"]')
        + f'indexes = [{{ name = "alpha", url = "{env.index_url("alpha")}", packages = ["toydep"] }}]\n'
    )
    r = CliRunner().invoke(main, ["build", str(path), "--key", str(keys.secret), "--out", str(tmp_path / "d")])
    assert r.exit_code == 0, r.stderr
    bundle = next((tmp_path / "d").glob("*.lbz"))
    with (
        bundle.open("rb") as f,
        zstandard.ZstdDecompressor().stream_reader(f) as z,
        tarfile.open(fileobj=z, mode="r|") as tf,
    ):
        members = {m.name: tf.extractfile(m).read() for m in tf if m.name.startswith("lock/")}  # type: ignore[union-attr]
    pylock = {p["name"]: p for p in tomllib.loads(members["lock/pylock.toml"].decode())["packages"]}
    assert pylock["toydep"]["tool"]["lockbuild"] == {"index": "alpha", "time-from": "exemption"}
    assert pylock["toyengine"]["tool"]["lockbuild"] == {"index": "primary", "time-from": "upload-time"}
    assert pylock["toydep"]["wheels"][0]["hashes"]["sha256"] == sha(alpha[1])
    assert "(from index alpha; time: exemption)" in members["lock/requirements.txt"].decode()

    root = tmp_path / "root"
    r = CliRunner().invoke(
        main, ["install", str(bundle), "--root", str(root), "--trust", str(keys.trust), "--gpu-check", "skip"]
    )
    assert r.exit_code == 0, r.stdout + r.stderr
    python = next(root.glob("toyengine/1.0-cpu/bin/python"))
    out = subprocess.run([str(python), "-c", "import toydep; print(toydep.where)"], capture_output=True, text=True)
    assert out.stdout.strip() == "alpha", out.stderr


def test_an_extra_index_with_upload_times_is_held_by_the_cut_off(
    env: FakeServer, indexes: FakeServer, tmp_path: Path
) -> None:
    """Where an extra index gives upload times for the pinned release, the cut-off holds it as on the primary
    index (time-from upload-time); a release uploaded after the cut-off is absent unless exclude-newer-package
    exempts it, and the lock then says exemption."""
    indexes.publish(*make_wheel("ixtimed", "1.0"), index="gamma", uploaded=day(2))
    indexes.publish(*make_wheel("ixlate", "1.0"), index="gamma", uploaded=day(30))  # after ixeng's cut-off (day 6)
    gamma = f'  {{ name = "gamma", url = "{indexes.index_url("gamma")}", packages = ["ixtimed", "ixlate"] }},\n'
    path = tmp_path / "ixeng.toml"
    text = recipe(indexes, reqs='"ixeng==1.0", "ixa==1.0", "ixb==1.0", "ixtimed==1.0", "ixlate==1.0"')
    path.write_text(text.replace('packages = ["ixb"] },\n', 'packages = ["ixb"] },\n' + gamma))
    code, stdout, _ = run_lock(path, tmp_path / "out")
    assert code != 0
    message = json.loads(stdout)["error"]["message"]
    assert "`ixlate` was filtered by `exclude-newer`" in message, message

    path.write_text(path.read_text() + "exclude-newer-package = { ixlate = false }\n")
    settings = load(dict(os.environ), home=tmp_path)
    with session(settings, progress=Progress.quiet()) as s:
        r = load_recipe(path)
        plan = s.planner.plan(r, r.builds[0])
    got = {f.name: (f.index, f.time_from) for f in plan.lock.files}
    assert got["ixtimed"] == ("gamma", "upload-time")
    assert got["ixlate"] == ("gamma", "exemption")
    assert got["ixa"] == ("alpha", "exemption")


# --- torchtriton, transitively -----------------------------------------------------------------


@pytest.fixture(scope="module")
def triton(server: FakeServer) -> FakeServer:
    """tteng (primary) needs ttorch, which the "ptx" index serves and which needs ttriton: ptx serves the
    real ttriton, and an impostor holds the name on the primary index."""
    server.publish(*make_wheel("tteng", "1.0", deps=("ttorch",)), uploaded=day(5))
    server.publish(*make_wheel("ttorch", "1.0", deps=("ttriton",)), index="ptx")
    server.publish(WHEEL.format("ttriton"), body("ttriton", "ptx"), index="ptx")
    server.publish(WHEEL.format("ttriton"), body("ttriton", "impostor"), uploaded=day(1))
    return server


def triton_recipe(
    server: FakeServer, *, reqs: str = '"tteng==1.0", "ttorch==1.0"', packages: str = '"ttorch"', extra: str = ""
) -> str:
    return (
        '[engine]\nname = "tteng"\npypi = "tteng"\nbinary = "tteng"\nverify = ["tteng"]\n\n'
        f'[[builds]]\nversion = "1.0"\nvariant = "tt"\npython = "{PY}"\nplatform = "{PLATFORM}"\n'
        f"requirements = [{reqs}]\n"
        f'index = {{ url = "{server.index_url("ptx")}", packages = [{packages}] }}\n{extra}'
    )


def test_a_dependency_that_an_extra_index_serves_is_not_taken_from_the_primary_index(
    env: FakeServer, triton: FakeServer, tmp_path: Path
) -> None:
    path = tmp_path / "tteng.toml"
    path.write_text(triton_recipe(triton))
    code, stdout, stderr = run_lock(path, tmp_path / "out")
    assert code == 1, stdout
    err = json.loads(stdout)["error"]
    assert err["type"] == "ResolveError"
    assert f"ttriton from the package index ({triton.index_url()})" in err["message"]
    assert f"the second index ({triton.index_url('ptx')}) serves ttriton too" in err["message"]
    assert "torchtriton" in err["message"]
    assert "primary-packages" in err["tip"] and "add it to the second index's packages" in err["tip"]
    assert not (tmp_path / "out").exists()
    assert sha(body("ttriton", "impostor")) not in stdout + stderr


def test_the_recipe_settles_a_name_on_two_indexes_by_naming_its_index(
    env: FakeServer, triton: FakeServer, tmp_path: Path
) -> None:
    path = tmp_path / "tteng.toml"
    # on the extra index, with its package: the genuine ttriton
    path.write_text(
        triton_recipe(triton, reqs='"tteng==1.0", "ttorch==1.0", "ttriton==1.0"', packages='"ttorch", "ttriton"')
    )
    code, stdout, stderr = run_lock(path, tmp_path / "a")
    assert code == 0, stderr
    pkgs = {p["name"]: p for p in json.loads(stdout)["locks"][0]["packages"]}
    assert pkgs["ttriton"]["sha256"] == sha(body("ttriton", "ptx"))
    # or, explicitly, from the primary index
    path.write_text(triton_recipe(triton, extra='primary-packages = ["TTriton"]\n'))
    code, stdout, stderr = run_lock(path, tmp_path / "b")
    assert code == 0, stderr
    pkgs = {p["name"]: p for p in json.loads(stdout)["locks"][0]["packages"]}
    assert pkgs["ttriton"]["sha256"] == sha(body("ttriton", "impostor"))
    assert parse_recipe(path.read_text()).builds[0].primary_packages == ("ttriton",)


def test_primary_packages_is_checked_when_the_recipe_is_read(triton: FakeServer) -> None:
    with pytest.raises(RecipeError) as exc:
        parse_recipe(triton_recipe(triton, extra='primary-packages = ["ttorch"]\n'))
    assert "builds[0].primary-packages: 'ttorch' is named both here and on the index key" in exc.value.message
    text = triton_recipe(triton).split("index = ")[0] + 'primary-packages = ["x"]\n'
    with pytest.raises(RecipeError) as exc:
        parse_recipe(text.replace('"ttorch==1.0"', ""))
    assert "expected an extra index" in exc.value.message
