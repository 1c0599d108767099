"""Hashed locks, resolved as the index stood at the cut-off: the lock model, the index client, uv, the CLI."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner
from conftest import PLATFORM, PY, TOY_RECIPE, day
from servers import FakeServer, make_sdist, make_tar_gz, make_wheel

from lockbuild.builder.index import Index
from lockbuild.builder.plan import CUT_OFF_DELAY, cut_off, read_source_requirements
from lockbuild.cli import main
from lockbuild.errors import RecipeError, RemoteError, ResolveError
from lockbuild.lock import Candidate, Pin, choose_file, parse_pylock, parse_requirements_lock
from lockbuild.recipe import Build, parse_recipe
from lockbuild.target import Target

A, B, C = "a" * 64, "b" * 64, "c" * 64


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ------------------------------------------------------------------------------------ parsing locks
UV_LOCK = f"""\
anyio==4.6.0 \\
    --hash=sha256:{A} \\
    --hash=sha256:{B.upper()}
    # via httpx
httpx[http2]==0.27.2 ; python_version >= '3.8' \\
    --hash=sha256:{C}
    # via -r requirements.in

engine @ https://github.example/o/r/releases/download/v1/engine-1.0-py3-none-any.whl#sha256={A} \\
    --hash=sha256:{A}
"""


def test_a_uv_lock_is_read_into_pins() -> None:
    pins = parse_requirements_lock(UV_LOCK)
    assert pins == (
        Pin("anyio", "4.6.0", frozenset({A, B})),
        Pin("httpx", "0.27.2", frozenset({C})),
        Pin(
            "engine", "", frozenset({A}), "https://github.example/o/r/releases/download/v1/engine-1.0-py3-none-any.whl"
        ),
    )


def test_an_empty_lock_has_no_pins() -> None:
    assert parse_requirements_lock("# nothing to install\n\n") == ()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("anyio==4.6.0\n", "the lock pins 'anyio==4.6.0' without a hash; expected every entry to carry --hash"),
        ("anyio==4.6.0 --hash=sha256:abc\n", "malformed sha256 in 'anyio==4.6.0 --hash=sha256:abc'; expected 64 hex"),
        (f"anyio==4.6.0 --hash=sha256:{'g' * 64}\n", "malformed sha256"),
        (f"anyio>=4 --hash=sha256:{A}\n", "not pinned with == : 'anyio>=4'; expected NAME==VERSION"),
        (f"anyio==4.* --hash=sha256:{A}\n", "not pinned with =="),
        (f"anyio===4.6 --hash=sha256:{A}\n", "not pinned with =="),
        (f"anyio --hash=sha256:{A}\n", "not pinned with =="),
        (f"anyio==4.6.0 --hash=sha256:{A}\nAnyIO==4.6.0 --hash=sha256:{B}\n", "names anyio more than once"),
        (f"--index-url https://evil.example/simple\nanyio==4.6.0 --hash=sha256:{A}\n", "option lockbuild does not"),
        (f"--extra-index-url=https://evil.example/simple anyio==4.6.0 --hash=sha256:{A}\n", "'--extra-index-url="),
        (f"-e ./src --hash=sha256:{A}\n", "an option lockbuild does not allow: '-e'"),
        (f"-r other.txt\nanyio==4.6.0 --hash=sha256:{A}\n", "an option lockbuild does not allow: '-r'"),
        (f"anyio==4.6.0 --no-binary --hash=sha256:{A}\n", "'--no-binary'"),
    ],
)
def test_a_lock_that_breaks_a_rule_is_a_resolve_error(text: str, expected: str) -> None:
    with pytest.raises(ResolveError) as info:
        parse_requirements_lock(text)
    assert expected in info.value.message


PYLOCK = f"""\
lock-version = "1.0"
created-by = "uv"
requires-python = ">=3.11"

[[packages]]
name = "Torch"
version = "2.8.0"
wheels = [
  {{ url = "https://second.example/whl/torch-2.8.0-cp311-cp311-manylinux_2_28_x86_64.whl", \
hashes = {{ sha256 = "{A}" }} }},
  {{ name = "torch-2.8.0-cp311-cp311-manylinux_2_28_aarch64.whl", hashes = {{ sha256 = "{B}" }} }},
]

[[packages]]
name = "pywin"
version = "1"
marker = "sys_platform == 'win32'"
wheels = [{{ url = "https://x.example/pywin-1-py3-none-any.whl", hashes = {{ sha256 = "{C}" }} }}]

[[packages]]
name = "numpy"
version = "2.1"
sdist = {{ url = "https://x.example/numpy-2.1.tar.gz", hashes = {{ sha256 = "{C.upper()}" }} }}
"""


def test_a_pylock_is_read_for_the_target() -> None:
    pins = parse_pylock(PYLOCK, Target.of("3.11", "x86_64-manylinux_2_28"))
    assert pins == (Pin("torch", "2.8.0", frozenset({A, B})), Pin("numpy", "2.1", frozenset({C})))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("lock-version = ", "uw wrote"),
        ('lock-version = "1.0"\n', "has no [[packages]]"),
        ('[[packages]]\nname = "x"\nversion = "1"\n', "names no wheel, sdist or archive with a hash"),
        ('[[packages]]\nname = "x"\nversion = "1"\nwheels = [{ url = "https://x.example/x-1-py3-none-any.whl" }]\n',
         "the pylock entry for x==1 has no sha256"),
        ('[[packages]]\nname = "x"\nversion = "1"\nwheels = [{ url = "https://x.example/", hashes = { sha256 = "'
         + A + '" } }]\n', "expected a plain file name"),
        ('[[packages]]\nname = "x"\nversion = "1"\nmarker = "python_version >"\n', "has an invalid marker"),
    ],
)  # fmt: skip
def test_a_pylock_that_breaks_a_rule_is_a_resolve_error(text: str, expected: str) -> None:
    with pytest.raises(ResolveError) as info:
        parse_pylock(text, Target.of("3.11", "x86_64-manylinux_2_28"))
    assert expected.replace("uw", "uv") in info.value.message


# ---------------------------------------------------------------------------------- choosing files
X86_311 = Target.of("3.11", "x86_64-manylinux_2_28")
NATIVE = "pkg-1.0-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"
PURE = "pkg-1.0-py3-none-any.whl"
TOO_NEW = "pkg-1.0-cp311-cp311-manylinux_2_34_x86_64.whl"
SDIST = "pkg-1.0.tar.gz"


def cand(filename: str, digest: str | None = None) -> Candidate:
    digest = digest if digest is not None else sha(filename.encode())
    return Candidate(filename, f"https://files.example/{filename}", digest or None, 123)


def pin_for(*candidates: Candidate) -> Pin:
    return Pin("pkg", "1.0", frozenset(c.sha256 for c in candidates if c.sha256))


def test_the_best_wheel_for_the_node_is_chosen_whatever_the_order() -> None:
    files = [cand(PURE), cand(NATIVE), cand(TOO_NEW), cand(SDIST)]
    for order in (files, files[::-1]):
        chosen = choose_file(pin_for(*files), order, X86_311, origin="primary")
        assert chosen.filename == NATIVE
        assert (chosen.url, chosen.sha256, chosen.size) == (
            f"https://files.example/{NATIVE}",
            sha(NATIVE.encode()),
            123,
        )
        assert (chosen.name, chosen.version, chosen.origin, chosen.kind) == ("pkg", "1.0", "primary", "wheel")
        assert chosen.bundle_path == f"wheels/{NATIVE}"


def test_a_wheel_for_a_newer_glibc_is_not_taken_when_a_pure_one_fits() -> None:
    files = [cand(TOO_NEW), cand(PURE)]
    assert choose_file(pin_for(*files), files, X86_311, origin="second").filename == PURE


def test_the_sdist_is_the_fallback_when_no_wheel_fits() -> None:
    files = [cand(TOO_NEW), cand("pkg-1.0-cp312-cp312-manylinux_2_17_x86_64.whl"), cand(SDIST)]
    chosen = choose_file(pin_for(*files), files, X86_311, origin="primary")
    assert (chosen.filename, chosen.kind, chosen.bundle_path) == (SDIST, "sdist", f"sdists/{SDIST}")


def test_only_files_with_the_locked_hashes_count() -> None:
    locked = [cand(PURE)]
    offered = [cand(NATIVE), cand(PURE), cand("pkg-1.0-cp311-abi3-manylinux_2_28_x86_64.whl", digest="")]
    assert choose_file(pin_for(*locked), offered, X86_311, origin="primary").filename == PURE


def test_nothing_that_fits_is_a_resolve_error_naming_the_target() -> None:
    files = [cand(TOO_NEW), cand("pkg-1.0-cp311-cp311-manylinux_2_17_aarch64.whl")]
    with pytest.raises(ResolveError) as info:
        choose_file(pin_for(*files), files, X86_311, origin="primary")
    assert info.value.message.startswith("no file of pkg==1.0 fits Python 3.11 on x86_64-manylinux_2_28")
    assert "offers 2 file(s) with the locked hashes" in info.value.message


def test_a_hash_the_index_does_not_offer_is_an_error() -> None:
    with pytest.raises(ResolveError, match="offers 0 file"):
        choose_file(Pin("pkg", "1.0", frozenset({A})), [cand(PURE)], X86_311, origin="primary")


def test_a_file_name_that_could_escape_the_bundle_is_refused() -> None:
    evil = Candidate("../../pkg-1.0.tar.gz", "https://files.example/x", A, 1)
    with pytest.raises(ResolveError, match="expected a plain file name"):
        choose_file(Pin("pkg", "1.0", frozenset({A})), [evil], X86_311, origin="primary")


# ------------------------------------------------------------------------------ the index's clock
@pytest.fixture(scope="module")
def clock() -> Iterator[FakeServer]:
    """A private index: ``twofiles`` 1.0 (wheel day 5, sdist day 6 12:00), and JSON-API-only times."""
    s = FakeServer()
    s.publish(*make_wheel("twofiles", "1.0"), uploaded=day(5))
    s.publish(*make_sdist("twofiles", "1.0"), uploaded=day(6) + dt.timedelta(hours=12, microseconds=250_000))
    s.publish(*make_wheel("twofiles", "2.0"), uploaded=day(40))
    # the second index has no upload-time; the JSON API knows some of it
    s.publish(*make_wheel("fromjson", "1.0"), index="second")
    s.publish(*make_wheel("fromjson", "1.0", tag="cp311-cp311-manylinux_2_17_x86_64"), index="second")
    s.publish(*make_wheel("fromjson", "2.0"), index="second")
    s.publish(*make_wheel("notimes", "1.0"), index="second")
    s.json_api["fromjson"] = {
        "info": {"name": "fromjson"},
        "releases": {
            "1.0.0": [
                {"filename": "fromjson-1.0-py3-none-any.whl", "upload_time_iso_8601": "2025-02-01T10:00:00.123456Z"},
                {"filename": "fromjson-1.0-cp311.whl", "upload_time": "2025-02-03T08:30:00"},
                "not a file",
            ],
            "2.0": [{"filename": "fromjson-2.0-py3-none-any.whl"}],
        },
    }
    yield s
    s.close()


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=10) as c:
        yield c


def test_publication_is_the_last_file_upload(clock: FakeServer, client: httpx.Client) -> None:
    index = Index(clock.index_url(), client)
    assert index.publication_time("TwoFiles", "1.0.0") == day(6) + dt.timedelta(hours=12, microseconds=250_000)


def test_the_cut_off_is_publication_plus_24_hours_in_whole_seconds(clock: FakeServer, client: httpx.Client) -> None:
    recipe = parse_recipe(
        '[engine]\nname = "t"\npypi = "twofiles"\nbinary = "t"\nverify = ["t"]\n'
        f'[[builds]]\nversion = "1.0"\nvariant = "cpu"\npython = "{PY}"\nplatform = "{PLATFORM}"\n'
        'requirements = ["twofiles==1.0"]\n'
    )
    got = cut_off(recipe, recipe.builds[0], Index(clock.index_url(), client))
    assert dt.timedelta(hours=24) == CUT_OFF_DELAY
    assert got == day(7) + dt.timedelta(hours=12)
    assert got.tzinfo == dt.UTC


def test_an_as_of_overrides_the_index(clock: FakeServer, client: httpx.Client) -> None:
    recipe = parse_recipe(
        '[engine]\nname = "t"\npypi = "no-such-project"\nbinary = "t"\nverify = ["t"]\n'
        f'[[builds]]\nversion = "1.0"\nvariant = "cpu"\npython = "{PY}"\nplatform = "{PLATFORM}"\n'
        'requirements = ["twofiles==1.0"]\nas-of = 2025-03-01T10:00:00.9+02:00\n'
    )
    got = cut_off(recipe, recipe.builds[0], Index(clock.index_url(), client))
    assert got == dt.datetime(2025, 3, 1, 8, 0, 0, tzinfo=dt.UTC)


def test_without_upload_times_the_json_api_releases_map_is_read(clock: FakeServer, client: httpx.Client) -> None:
    index = Index(clock.index_url("second"), client)
    assert index.publication_time("fromjson", "1.0") == dt.datetime(2025, 2, 3, 8, 30, tzinfo=dt.UTC)
    assert "/second/pypi/fromjson/json" in clock.requests
    assert not [r for r in clock.requests if "/pypi/fromjson/1.0" in r], "the per-version endpoint is not used"


def test_a_release_with_no_upload_times_anywhere_is_a_clear_error(clock: FakeServer, client: httpx.Client) -> None:
    index = Index(clock.index_url("second"), client, name="the second index")
    with pytest.raises(RemoteError) as info:
        index.publication_time("fromjson", "2.0")
    assert info.value.message == (
        "the second index publishes no upload times for fromjson==2.0; expected PEP 700 upload-time on its files."
    )
    assert info.value.tip is not None and "as-of" in info.value.tip
    with pytest.raises(RemoteError, match=r"publishes no upload times for notimes==1\.0"):
        index.publication_time("notimes", "1.0")


def test_a_missing_release_is_a_clear_error(clock: FakeServer, client: httpx.Client) -> None:
    index = Index(clock.index_url(), client)
    with pytest.raises(RemoteError) as info:
        index.publication_time("twofiles", "1.5")
    assert info.value.message == f"the package index ({clock.index_url()}) has no release twofiles==1.5."
    with pytest.raises(RemoteError, match=r"has no project 'nothing-here'"):
        index.publication_time("nothing-here", "1.0")


def test_an_index_page_that_is_not_pep_691_is_a_clear_error(clock: FakeServer, client: httpx.Client) -> None:
    clock.raw_pages["/primary/simple/brokenpage/"] = b'{"name": "brokenpage"}'
    with pytest.raises(RemoteError, match="is not a PEP 691 project page"):
        Index(clock.index_url(), client).files("brokenpage")


# --------------------------------------------------------------------- locking against the index
CUT = day(7) + dt.timedelta(hours=12)  # lkeng 1.0's last file (day 6, 12:00) + 24 h
LKENG_SDIST = make_sdist("lkeng", "1.0")  # built once: a .tar.gz carries the time it was made


@pytest.fixture(scope="module")
def published(server: FakeServer) -> FakeServer:
    """Projects for these tests on the session server, under names no other test uses."""
    server.publish(*make_wheel("lkeng", "1.0", deps=("lkdep",)), uploaded=day(5))
    server.publish(*LKENG_SDIST, uploaded=day(6) + dt.timedelta(hours=12))
    server.publish(*make_wheel("lkdep", "1.0"), uploaded=day(1))
    server.publish(*make_wheel("lkdep", "1.1"), uploaded=CUT - dt.timedelta(seconds=1))
    server.publish(*make_wheel("lkdep", "2.0"), uploaded=CUT)  # "before the cut-off" is strict
    server.publish(*make_wheel("lkdep", "3.0"), uploaded=day(30))
    # lkgpu needs lktorch, which the build takes from the second index only
    server.publish(*make_wheel("lkgpu", "1.0", deps=("lktorch>=1.0", "lkdep")), uploaded=day(2))
    server.publish(*make_wheel("lktorch", "1.0", modules={"lktorch/__init__.py": "primary = True\n"}), uploaded=day(1))
    server.publish(*make_wheel("lktorch", "3.0"), uploaded=day(1))
    server.publish(*make_wheel("lktorch", "1.0"), index="second")
    server.publish(*make_wheel("lktorch", "2.0"), index="second")
    return server


def recipe_text(*builds: str, pypi: str = "lkeng") -> str:
    head = f'# lock tests\n[engine]\nname = "lkeng"\npypi = "{pypi}"\nbinary = "lkeng"\nverify = ["lkeng"]\n'
    return head + "".join(builds)


def build_text(
    version: str = "1.0", variant: str = "cpu", requirements: str = '["lkeng==1.0"]', extra: str = ""
) -> str:
    return (
        f'\n[[builds]]\nversion = "{version}"\nvariant = "{variant}"\npython = "{PY}"\nplatform = "{PLATFORM}"\n'
        f"requirements = {requirements}\n{extra}"
    )


def second_build(published: FakeServer, torch: str = "lktorch==1.0") -> str:
    return build_text(
        variant="gpu",
        requirements=f'["lkgpu==1.0", "{torch}"]',
        extra=f'index = {{ url = "{published.index_url("second")}", packages = ["lktorch"] }}\n',
    )


def run_lock(recipe: Path, out: Path, *args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, ["lock", str(recipe), "--out", str(out), "--json", *args], catch_exceptions=False)
    return r.exit_code, r.stdout, r.stderr


def write(tmp_path: Path, text: str, name: str = "lkeng.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def packages(stdout: str, build: int = 0) -> dict[str, dict[str, object]]:
    return {p["name"]: p for p in json.loads(stdout)["locks"][build]["packages"]}


def test_lock_writes_the_lock_and_the_resolved_recipe(env: FakeServer, published: FakeServer, tmp_path: Path) -> None:
    recipe = write(tmp_path, recipe_text(build_text()))
    out = tmp_path / "locks"
    code, stdout, stderr = run_lock(recipe, out)
    assert code == 0, stderr
    assert sorted(p.name for p in out.iterdir()) == ["1.0-cpu"]
    assert sorted(p.name for p in (out / "1.0-cpu").iterdir()) == ["recipe.toml", "requirements.txt"]
    result = json.loads(stdout)
    assert result["ok"] is True
    lock = result["locks"][0]
    assert (lock["engine"], lock["build"], lock["lock_format"]) == ("lkeng", "1.0-cpu", "requirements.txt")
    assert (lock["python"], lock["platform"]) == (PY, PLATFORM)
    assert lock["as_of"] == "2025-01-07T12:00:00Z"
    pkgs = packages(stdout)
    assert sorted(pkgs) == ["lkdep", "lkeng"]
    assert pkgs["lkeng"]["file"] == "lkeng-1.0-py3-none-any.whl"  # the wheel, not the sdist
    assert pkgs["lkeng"]["sha256"] == sha(make_wheel("lkeng", "1.0", deps=("lkdep",))[1])
    assert pkgs["lkeng"]["url"] == f"{published.url}/files/primary/lkeng-1.0-py3-none-any.whl"
    assert pkgs["lkeng"]["origin"] == "primary"

    text = (out / "1.0-cpu" / "requirements.txt").read_text()
    pins = {p.name: p for p in parse_requirements_lock(text)}
    assert pins["lkeng"].hashes == {
        sha(make_wheel("lkeng", "1.0", deps=("lkdep",))[1]),
        sha(LKENG_SDIST[1]),
    }
    resolved = parse_recipe((out / "1.0-cpu" / "recipe.toml").read_text())
    assert resolved.builds[0].as_of == CUT
    assert "# lock tests" in (out / "1.0-cpu" / "recipe.toml").read_text()


def test_a_dependency_released_after_the_cut_off_never_enters_the_lock(
    env: FakeServer, published: FakeServer, tmp_path: Path
) -> None:
    code, stdout, stderr = run_lock(write(tmp_path, recipe_text(build_text())), tmp_path / "out")
    assert code == 0, stderr
    pkgs = packages(stdout)
    assert pkgs["lkdep"]["version"] == "1.1"  # uploaded one second before the cut-off
    text = (tmp_path / "out" / "1.0-cpu" / "requirements.txt").read_text()
    assert "lkdep==1.1" in text
    for newer in ("2.0", "3.0"):
        assert f"lkdep=={newer}" not in text
        assert sha(make_wheel("lkdep", newer)[1]) not in text


def test_as_of_moves_the_cut_off(env: FakeServer, published: FakeServer, tmp_path: Path) -> None:
    recipe = write(tmp_path, recipe_text(build_text(extra="as-of = 2025-01-07T00:00:00Z\n")))
    code, stdout, stderr = run_lock(recipe, tmp_path / "out")
    assert code == 0, stderr
    assert json.loads(stdout)["locks"][0]["as_of"] == "2025-01-07T00:00:00Z"
    assert packages(stdout)["lkdep"]["version"] == "1.0"
    resolved = parse_recipe((tmp_path / "out" / "1.0-cpu" / "recipe.toml").read_text())
    assert resolved.builds[0].as_of == day(7)


def test_the_same_recipe_locked_twice_gives_the_same_lock(
    env: FakeServer, published: FakeServer, tmp_path: Path
) -> None:
    recipe = write(tmp_path, recipe_text(build_text(), second_build(published)))
    runs = []
    for name in ("first", "second"):
        code, stdout, stderr = run_lock(recipe, tmp_path / name)
        assert code == 0, stderr
        runs.append(json.loads(stdout)["locks"])
    assert runs[0] == runs[1]
    for build, lock in (("1.0-cpu", "requirements.txt"), ("1.0-gpu", "pylock.toml")):
        first = (tmp_path / "first" / build / lock).read_bytes()
        assert first == (tmp_path / "second" / build / lock).read_bytes()
        assert (tmp_path / "first" / build / "recipe.toml").read_bytes() == (
            tmp_path / "second" / build / "recipe.toml"
        ).read_bytes()


def test_a_package_on_both_indexes_comes_from_the_second_only(
    env: FakeServer, published: FakeServer, tmp_path: Path
) -> None:
    recipe = write(tmp_path, recipe_text(second_build(published), pypi="lkgpu"))
    code, stdout, stderr = run_lock(recipe, tmp_path / "out")
    assert code == 0, stderr
    lock = json.loads(stdout)["locks"][0]
    assert lock["lock_format"] == "pylock.toml"
    assert lock["as_of"] == "2025-01-03T00:00:00Z"
    pkgs = packages(stdout)
    assert sorted(pkgs) == ["lkdep", "lkgpu", "lktorch"]
    torch = pkgs["lktorch"]
    assert (torch["version"], torch["origin"]) == ("1.0", "second")
    assert torch["url"] == f"{published.url}/files/second/lktorch-1.0-py3-none-any.whl"
    assert torch["sha256"] == sha(make_wheel("lktorch", "1.0")[1])
    assert pkgs["lkgpu"]["origin"] == "primary" and pkgs["lkdep"]["origin"] == "primary"
    assert pkgs["lkdep"]["version"] == "1.0"  # the cut-off still holds for the primary index

    assert sorted(p.name for p in (tmp_path / "out" / "1.0-gpu").iterdir()) == ["pylock.toml", "recipe.toml"]
    pylock = (tmp_path / "out" / "1.0-gpu" / "pylock.toml").read_text()
    primary_torch = make_wheel("lktorch", "1.0", modules={"lktorch/__init__.py": "primary = True\n"})[1]
    assert sha(primary_torch) not in pylock
    assert "/files/primary/lktorch" not in pylock
    data = tomllib.loads(pylock)
    entry = next(p for p in data["packages"] if p["name"] == "lktorch")
    assert [w["url"] for w in entry["wheels"]] == [torch["url"]]


def test_an_unpinned_second_index_package_is_refused_and_nothing_is_written(
    env: FakeServer, published: FakeServer, tmp_path: Path
) -> None:
    recipe = write(tmp_path, recipe_text(second_build(published, torch="lktorch>=1.0"), pypi="lkgpu"))
    out = tmp_path / "out"
    code, _, stderr = run_lock(recipe, out)
    assert code == 1
    assert stderr.startswith(f"ERROR {recipe}: 1 problem in the recipe:")
    assert "'lktorch' comes from the second index, which publishes no upload times" in stderr
    assert "must be pinned with == in requirements, found 'lktorch>=1.0'" in stderr
    assert "Traceback" not in stderr
    assert not out.exists()


def test_a_missing_release_fails_clearly_and_writes_nothing(
    env: FakeServer, published: FakeServer, tmp_path: Path
) -> None:
    recipe = write(tmp_path, recipe_text(build_text(), build_text(version="9.9")))
    out = tmp_path / "out"
    code, stdout, stderr = run_lock(recipe, out)
    assert code == 1
    assert f"ERROR the package index ({published.index_url()}) has no release lkeng==9.9." in stderr
    assert "TIP " in stderr
    assert "Traceback" not in stderr
    assert json.loads(stdout)["error"]["type"] == "RemoteError"
    assert not out.exists(), "the build that did lock is not written either"


def test_a_recipe_with_three_mistakes_fails_with_all_three_and_writes_nothing(
    env: FakeServer, published: FakeServer, tmp_path: Path
) -> None:
    text = recipe_text(build_text(requirements='["lkeng @ https://x.example/lkeng.whl"]', extra="free-gb = -1\n"))
    recipe = write(tmp_path, text.replace('binary = "lkeng"', 'bin = "lkeng"'))
    out = tmp_path / "out"
    code, _, stderr = run_lock(recipe, out)
    assert code == 1
    assert stderr.startswith(f"ERROR {recipe}: 4 problems in the recipe:")
    for key in (
        "engine.bin: unknown key; did you mean 'binary'?",
        "engine.binary: missing",
        "builds[0].requirements[0]: a direct URL",
        "builds[0].free-gb: expected between 1 and 99999",
    ):
        assert f"  - {key}" in stderr
    assert not out.exists()


def test_a_requirement_uv_cannot_meet_shows_uvs_reason(env: FakeServer, published: FakeServer, tmp_path: Path) -> None:
    recipe = write(tmp_path, recipe_text(build_text(requirements='["lkeng==1.0", "lkdep>=3"]')))
    out = tmp_path / "out"
    code, _, stderr = run_lock(recipe, out)
    assert code == 1
    assert stderr.startswith(f"ERROR uv could not resolve the requirements for Python {PY} on {PLATFORM}")
    assert "as of 2025-01-07T12:00:00Z" in stderr
    assert "lkdep" in stderr and "exclude-newer" in stderr  # uv's own reason, in a few lines
    assert len(stderr.splitlines()) < 20
    assert not out.exists()


def test_build_selects_one_build(env: FakeServer, published: FakeServer, tmp_path: Path) -> None:
    recipe = write(
        tmp_path, recipe_text(build_text(), build_text(variant="old", extra="as-of = 2025-01-07T00:00:00Z\n"))
    )
    for spec, expected in (("old", "1.0-old"), ("1.0-cpu", "1.0-cpu")):
        out = tmp_path / spec
        code, stdout, stderr = run_lock(recipe, out, "--build", spec)
        assert code == 0, stderr
        assert [p.name for p in out.iterdir()] == [expected]
        assert [lock["build"] for lock in json.loads(stdout)["locks"]] == [expected]
        resolved = parse_recipe((out / expected / "recipe.toml").read_text())
        assert [b.id for b in resolved.builds] == [expected]


def test_an_unknown_build_is_refused(env: FakeServer, published: FakeServer, tmp_path: Path) -> None:
    recipe = write(tmp_path, recipe_text(build_text()))
    code, _, stderr = run_lock(recipe, tmp_path / "out", "--build", "rocm")
    assert code == 1
    assert f"ERROR {recipe}: no build 'rocm'; this recipe has 1.0-cpu." in stderr
    assert not (tmp_path / "out").exists()


def test_locking_again_replaces_the_previous_lock(env: FakeServer, published: FakeServer, tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "1.0-cpu").mkdir(parents=True)
    (out / "1.0-cpu" / "stale.txt").write_text("old")
    code, _, stderr = run_lock(write(tmp_path, recipe_text(build_text())), out)
    assert code == 0, stderr
    assert sorted(p.name for p in (out / "1.0-cpu").iterdir()) == ["recipe.toml", "requirements.txt"]
    assert [p.name for p in out.iterdir()] == ["1.0-cpu"]


# ------------------------------------------------------------------ the engine's requirements file
def source_build(requirements: str | None = "requirements.txt", top: str = "eng-1.0") -> Build:
    extra = f', requirements = "{requirements}"' if requirements else ""
    text = recipe_text(
        build_text(
            requirements='["lkeng==1.0", "torch==2.8.0"]',
            extra=f'source = {{ url = "https://x.example/eng.tar.gz", sha256 = "{A}", top = "{top}", '
            f'dir = "src"{extra} }}\n'
            'index = { url = "https://second.example/whl", packages = ["torch"] }\n',
        )
    )
    return parse_recipe(text).builds[0]


def test_the_source_archive_requirements_join_under_the_rules(tmp_path: Path) -> None:
    archive = tmp_path / "eng.tar.gz"
    archive.write_bytes(make_tar_gz({"eng-1.0/requirements.txt": b"# deps\nnumpy>=1.26\ntorch==2.8.0\n\nregex\n"}))
    assert read_source_requirements(archive, source_build()) == ("numpy>=1.26", "regex")
    assert read_source_requirements(archive, source_build(requirements=None)) == ()


def test_source_archive_lines_that_reach_elsewhere_are_refused(tmp_path: Path) -> None:
    archive = tmp_path / "eng.tar.gz"
    archive.write_bytes(make_tar_gz({"eng-1.0/requirements.txt": b"numpy\n--extra-index-url https://evil.example\n"}))
    with pytest.raises(RecipeError) as info:
        read_source_requirements(archive, source_build())
    assert info.value.message.startswith("https://x.example/eng.tar.gz (1.0-cpu): the engine's requirements file")
    assert info.value.problems == (
        "line 2: options such as '--extra-index-url' are not allowed: '--extra-index-url https://evil.example'",
    )


@pytest.mark.parametrize(
    ("members", "top", "expected"),
    [
        ({"other-1.0/requirements.txt": b"numpy\n"}, "eng-1.0", "expected a top directory 'eng-1.0'"),
        ({"eng-1.0/setup.py": b""}, "eng-1.0", "the source archive has no eng-1.0/requirements.txt"),
        ({"eng-1.0/requirements.txt": b"caf\xe9\n"}, "eng-1.0", "cannot read the source archive"),
    ],
)
def test_a_source_archive_without_what_the_recipe_names_is_refused(
    tmp_path: Path, members: dict[str, bytes], top: str, expected: str
) -> None:
    archive = tmp_path / "eng.tar.gz"
    archive.write_bytes(make_tar_gz(members))
    with pytest.raises(RecipeError, match=re.escape(expected)):
        read_source_requirements(archive, source_build(top=top))


def test_a_source_archive_that_is_not_a_tar_is_refused(tmp_path: Path) -> None:
    archive = tmp_path / "eng.tar.gz"
    archive.write_bytes(b"not a tar at all")
    with pytest.raises(RecipeError, match="cannot read the source archive as a tar"):
        read_source_requirements(archive, source_build())


def test_a_package_with_only_an_sdist_is_refused_by_name(env: FakeServer, tmp_path: Path) -> None:
    """An sdist-only dependency would make uv run its build backend (index code) on the builder: the lock
    refuses it by name (the build can allow named packages; see tests/test_builder_process.py)."""
    sdist = make_tar_gz({
        "lksdonly-1.0/PKG-INFO": b"Metadata-Version: 2.2\nName: lksdonly\nVersion: 1.0\n",
        "lksdonly-1.0/pyproject.toml": b'[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n',
    })
    if not any(e.filename == "lksdonly-1.0.tar.gz" for e in env.projects.get(("primary", "lksdonly"), [])):
        env.publish("lksdonly-1.0.tar.gz", sdist, uploaded=day(1))
    recipe = tmp_path / "r.toml"
    recipe.write_text(TOY_RECIPE.replace('requirements = ["toyengine==1.0"]', 'requirements = ["toyengine==1.0", "lksdonly==1.0"]'))
    r = CliRunner().invoke(main, ["lock", str(recipe), "--out", str(tmp_path / "out")])
    assert r.exit_code == 1
    assert "ERROR lksdonly has no wheel for Python" in r.stderr and "only a source distribution" in r.stderr
    assert not (tmp_path / "out" / "1.0-cpu").exists()
