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

from lockbuild.builder.direct import read_source_requirements
from lockbuild.builder.plan import choose_uv_wheel
from lockbuild.cli import main
from lockbuild.errors import RecipeError, RemoteError, ResolveError
from lockbuild.fetch.index import Index, parse_project_page
from lockbuild.limits import DEFAULT_LIMITS, Limits
from lockbuild.lock import Candidate, Pin, choose_file, parse_pylock, parse_requirements_lock
from lockbuild.recipe import Build, parse_recipe
from lockbuild.resolution.cutoff import CUT_OFF_DELAY, cut_off
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
        (
            '[[packages]]\nname = "x"\nversion = "1"\nwheels = [{ url = "https://x.example/x-1-py3-none-any.whl" }]\n',
            "the pylock entry for x==1 has no sha256",
        ),
        (
            '[[packages]]\nname = "x"\nversion = "1"\nwheels = [{ url = "https://x.example/", hashes = { sha256 = "'
            + A
            + '" } }]\n',
            "expected a plain file name",
        ),
        ('[[packages]]\nname = "x"\nversion = "1"\nmarker = "python_version >"\n', "has an invalid marker"),
    ],
)
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
    s.publish(*make_wheel("twofiles", "1.0"), uploaded=day(5) + dt.timedelta(microseconds=250_000))
    s.publish(*make_sdist("twofiles", "1.0"), uploaded=day(6) + dt.timedelta(hours=12))
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


def test_publication_is_the_first_file_upload(clock: FakeServer, client: httpx.Client) -> None:
    """A file added to an old release later never moves its publication time."""
    index = Index(clock.index_url(), client)
    assert index.publication("TwoFiles", "1.0.0").first == day(5) + dt.timedelta(microseconds=250_000)


def test_the_cut_off_is_publication_plus_24_hours_in_whole_seconds(clock: FakeServer, client: httpx.Client) -> None:
    recipe = parse_recipe(
        '[engine]\nname = "t"\npypi = "twofiles"\nbinary = "t"\nverify = ["t"]\n'
        f'[[builds]]\nversion = "1.0"\nvariant = "cpu"\npython = "{PY}"\nplatform = "{PLATFORM}"\n'
        'requirements = ["twofiles==1.0"]\n'
    )
    got = cut_off(recipe, recipe.builds[0], Index(clock.index_url(), client))
    assert dt.timedelta(hours=24) == CUT_OFF_DELAY
    assert got == day(6)
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
    assert index.publication("fromjson", "1.0").first == dt.datetime(2025, 2, 1, 10, 0, 0, 123456, tzinfo=dt.UTC)
    assert "/second/pypi/fromjson/json" in clock.requests
    assert not [r for r in clock.requests if "/pypi/fromjson/1.0" in r], "the per-version endpoint is not used"


def test_a_release_with_no_upload_times_anywhere_is_a_clear_error(clock: FakeServer, client: httpx.Client) -> None:
    index = Index(clock.index_url("second"), client, name="the second index")
    with pytest.raises(RemoteError) as info:
        index.publication("fromjson", "2.0")
    assert info.value.message == (
        "the second index publishes no upload times for fromjson==2.0; expected PEP 700 upload-time on its files."
    )
    assert info.value.tip is not None and "as-of" in info.value.tip
    with pytest.raises(RemoteError, match=r"publishes no upload times for notimes==1\.0"):
        index.publication("notimes", "1.0")


def test_a_missing_release_is_a_clear_error(clock: FakeServer, client: httpx.Client) -> None:
    index = Index(clock.index_url(), client)
    with pytest.raises(RemoteError) as info:
        index.publication("twofiles", "1.5")
    assert info.value.message == f"the package index ({clock.index_url()}) has no release twofiles==1.5."
    with pytest.raises(RemoteError, match=r"has no project 'nothing-here'"):
        index.publication("nothing-here", "1.0")


def test_an_index_page_that_is_not_pep_691_is_a_clear_error(clock: FakeServer, client: httpx.Client) -> None:
    clock.raw_pages["/primary/simple/brokenpage/"] = b'{"name": "brokenpage"}'
    with pytest.raises(RemoteError, match="is not a PEP 691 project page"):
        Index(clock.index_url(), client).files("brokenpage")


# --------------------------------------------------------------------- locking against the index
CUT = day(6)  # lkeng 1.0's first file (day 5) + 24 h
LKENG_SDIST = make_sdist("lkeng", "1.0")  # built once: a .tar.gz carries the time it was made


@pytest.fixture(scope="module")
def published(server: FakeServer) -> FakeServer:
    """Projects for these tests on the session server, under names no other test uses."""
    server.publish(*make_wheel("lkeng", "1.0", deps=("lkdep",)), uploaded=day(5))
    server.publish(*LKENG_SDIST, uploaded=day(5) + dt.timedelta(hours=12))
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
    assert sorted(p.name for p in (out / "1.0-cpu").iterdir()) == [
        "extras.txt",
        "provenance.json",
        "recipe.toml",
        "requirements.txt",
    ]
    result = json.loads(stdout)
    assert result["ok"] is True
    lock = result["locks"][0]
    assert (lock["engine"], lock["build"], lock["lock_format"]) == ("lkeng", "1.0-cpu", "requirements.txt")
    assert (lock["python"], lock["platform"]) == (PY, PLATFORM)
    assert lock["as_of"] == "2025-01-06T00:00:00Z"
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
    recipe = write(tmp_path, recipe_text(build_text(extra="as-of = 2025-01-05T06:00:00Z\n")))
    code, stdout, stderr = run_lock(recipe, tmp_path / "out")
    assert code == 0, stderr
    assert json.loads(stdout)["locks"][0]["as_of"] == "2025-01-05T06:00:00Z"
    assert packages(stdout)["lkdep"]["version"] == "1.0"
    resolved = parse_recipe((tmp_path / "out" / "1.0-cpu" / "recipe.toml").read_text())
    assert resolved.builds[0].as_of == day(5) + dt.timedelta(hours=6)


def test_the_same_recipe_locked_twice_gives_the_same_lock(
    env: FakeServer, published: FakeServer, tmp_path: Path
) -> None:
    recipe = write(tmp_path, recipe_text(build_text(), second_build(published)))
    runs = []
    for name in ("first", "second"):
        code, stdout, stderr = run_lock(recipe, tmp_path / name)
        assert code == 0, stderr
        runs.append(json.loads(stdout)["locks"])
    # The second lock reuses uv's resolution (same inputs) and gives the same lock; not the gpu build's,
    # whose lktorch comes from an index without upload times (no cut-off holds it: uv must look again).
    assert [x.pop("resolution_reused") for x in runs[0]] == [False, False]
    assert [x.pop("resolution_reused") for x in runs[1]] == [True, False]
    for x in (*runs[0], *runs[1]):  # the GPU fit: measured once a wheel is in the cache (the second run's check)
        x.pop("gpu_fit"), x.pop("gpu_fit_unread")
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

    assert sorted(p.name for p in (tmp_path / "out" / "1.0-gpu").iterdir()) == [
        "extras.txt",
        "provenance.json",
        "pylock.toml",
        "recipe.toml",
    ]
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
    assert code == 2, "a recipe with problems in its keys is a usage error"
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
    assert code == 2
    assert stderr.startswith(f"ERROR {recipe}: 3 problems in the recipe:")
    assert "engine.binary: missing" not in stderr  # a misspelt key is one problem, not two
    for key in (
        "engine.bin: unknown key; did you mean 'binary'?",
        "builds[0].requirements[0]: URLs are not allowed in requirements",
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
    assert "as of 2025-01-06T00:00:00Z" in stderr
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
    assert code == 2  # a recipe problem
    assert f"ERROR {recipe}: no build 'rocm'; this recipe has 1.0-cpu." in stderr
    assert not (tmp_path / "out").exists()


def test_locking_again_replaces_the_previous_lock(env: FakeServer, published: FakeServer, tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "1.0-cpu").mkdir(parents=True)
    (out / "1.0-cpu" / "stale.txt").write_text("old")
    code, _, stderr = run_lock(write(tmp_path, recipe_text(build_text())), out)
    assert code == 0, stderr
    assert sorted(p.name for p in (out / "1.0-cpu").iterdir()) == [
        "extras.txt",
        "provenance.json",
        "recipe.toml",
        "requirements.txt",
    ]
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
    refuses it by name (the build can allow named packages; see tests/builder/test_builder_process.py)."""
    sdist = make_tar_gz(
        {
            "lksdonly-1.0/PKG-INFO": b"Metadata-Version: 2.2\nName: lksdonly\nVersion: 1.0\n",
            "lksdonly-1.0/pyproject.toml": b'[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n',
        }
    )
    if not any(e.filename == "lksdonly-1.0.tar.gz" for e in env.projects.get(("primary", "lksdonly"), [])):
        env.publish("lksdonly-1.0.tar.gz", sdist, uploaded=day(1))
    recipe = tmp_path / "r.toml"
    recipe.write_text(
        TOY_RECIPE.replace('requirements = ["toyengine==1.0"]', 'requirements = ["toyengine==1.0", "lksdonly==1.0"]')
    )
    r = CliRunner().invoke(main, ["lock", str(recipe), "--out", str(tmp_path / "out")])
    assert r.exit_code == 1
    assert "ERROR lksdonly has no wheel for Python" in r.stderr and "only a source distribution" in r.stderr
    assert not (tmp_path / "out" / "1.0-cpu").exists()


# ================================================================ the index is untrusted
# ------------------------------------------------------------------- 11.1: a late file moves nothing
def lock_packages(recipe: Path, out: Path) -> tuple[str, dict[str, dict[str, object]], list[str]]:
    code, stdout, stderr = run_lock(recipe, out)
    assert code == 0, stderr
    lock = json.loads(stdout)["locks"][0]
    return lock["as_of"], packages(stdout), lock.get("warnings", [])


def test_a_file_added_to_an_old_release_changes_neither_the_cut_off_nor_the_lock(
    env: FakeServer, published: FakeServer, tmp_path: Path
) -> None:
    """Rebuilding next month gives the same lock: a wheel added to lklate 1.0 on day 40 (better tag for the
    node) neither moves the cut-off (lkdep 3.0 of day 30 stays out) nor enters the lock itself."""
    published.publish(*make_wheel("lklate", "1.0", deps=("lkdep",)), uploaded=day(5))
    recipe = write(tmp_path, recipe_text(build_text(requirements='["lklate==1.0"]'), pypi="lklate"))
    before = lock_packages(recipe, tmp_path / "before")
    assert before[0] == "2025-01-06T00:00:00Z" and before[2] == []
    late = make_wheel("lklate", "1.0", deps=("lkdep",), tag=f"cp{PY.replace('.', '')}-none-manylinux_2_17_x86_64")
    published.publish(*late, uploaded=day(40))
    as_of, pkgs, warnings = lock_packages(recipe, tmp_path / "after")
    assert (as_of, pkgs) == before[:2]
    assert pkgs["lkdep"]["version"] == "1.1" and pkgs["lklate"]["file"] == "lklate-1.0-py3-none-any.whl"
    r = CliRunner().invoke(main, ["lock", str(recipe), "--out", str(tmp_path / "text")], catch_exceptions=False)
    assert r.exit_code == 0
    lines = [line.split("warning: ", 1)[1] for line in r.stderr.splitlines() if "warning: lklate" in line]
    assert len(lines) == 1, r.stderr
    shown = lines[0]
    assert shown.startswith("lklate==1.0's files were uploaded over more than a day (2025-01-05T00:00:00Z to ")
    assert late[0] in shown and "only files that existed then are locked" in shown
    assert warnings == [shown]  # and the same warning is data in --json


def test_the_file_picker_treats_a_file_uploaded_after_the_cut_off_as_absent() -> None:
    """Even when the lock's hashes allow it (uv's --exclude-newer is not the only guard)."""
    early = Candidate(PURE, "https://x/p", sha(b"p"), 1, upload_time=day(5))
    late = Candidate(NATIVE, "https://x/n", sha(b"n"), 1, upload_time=day(40))
    pin = pin_for(early, late)
    assert choose_file(pin, [early, late], X86_311, origin="primary", as_of=day(6)).filename == PURE
    assert choose_file(pin, [early, late], X86_311, origin="primary").filename == NATIVE
    with pytest.raises(ResolveError, match=r"uploaded after the cut-off 2025-01-06T00:00:00Z \(pkg-1.0-cp311"):
        choose_file(pin_for(late), [late], X86_311, origin="primary", as_of=day(6))


# ------------------------------------------------------------------------------- 18.2: yanked files
def test_a_yanked_file_is_never_a_candidate() -> None:
    good = Candidate(PURE, "https://x/p", sha(b"p"), 1)
    yanked = Candidate(NATIVE, "https://x/n", sha(b"n"), 1, yanked=True, yank_reason="miscompiled")
    got = choose_file(pin_for(good, yanked), [yanked, good], X86_311, origin="primary")
    assert got.filename == PURE  # the yanked wheel has the better tag, and is still skipped


def test_a_lock_only_a_yanked_file_can_meet_is_refused_with_the_reason() -> None:
    yanked = Candidate(PURE, "https://x/p", sha(b"p"), 1, yanked=True, yank_reason="CVE-2025-0001: do not use")
    with pytest.raises(ResolveError) as info:
        choose_file(pin_for(yanked), [yanked], X86_311, origin="primary")
    assert info.value.message == (
        "pkg==1.0 can only be met by yanked files (pkg-1.0-py3-none-any.whl: CVE-2025-0001: do not use); "
        "a yanked file is never locked."
    )
    assert info.value.tip is not None and "pin-sha256" in info.value.tip
    got = choose_file(pin_for(yanked), [yanked], X86_311, origin="primary", pinned_sha256=sha(b"p"))
    assert got.filename == PURE  # the recipe pins that exact file


def test_a_yanked_file_is_refused_when_locking(env: FakeServer, published: FakeServer, tmp_path: Path) -> None:
    published.publish(*make_wheel("lkyank", "1.0"), uploaded=day(2), yanked="broken metadata")
    recipe = write(tmp_path, recipe_text(build_text(requirements='["lkeng==1.0", "lkyank==1.0"]')))
    code, stdout, stderr = run_lock(recipe, tmp_path / "out")
    assert code != 0 and not (tmp_path / "out" / "1.0-cpu").exists()
    assert "lkyank" in stdout and "broken metadata" in stdout
    digest = sha(make_wheel("lkyank", "1.0")[1])
    pinned = write(
        tmp_path,
        recipe_text(
            build_text(requirements='["lkeng==1.0", "lkyank==1.0"]', extra=f'pin-sha256 = {{ lkyank = "{digest}" }}\n')
        ),
        "pinned.toml",
    )
    code, stdout, stderr = run_lock(pinned, tmp_path / "pinned")
    assert code == 0, stderr
    assert packages(stdout)["lkyank"]["sha256"] == digest


def test_yanked_is_read_from_the_page_with_its_reason() -> None:
    page = {
        "files": [
            {"filename": "p-1.0-py3-none-any.whl", "url": "p1", "hashes": {"sha256": A}, "yanked": "bad build"},
            {"filename": "p-1.0.tar.gz", "url": "p2", "hashes": {"sha256": B}, "yanked": True},
            {"filename": "p-1.1.tar.gz", "url": "p3", "hashes": {"sha256": C}, "yanked": False},
        ]
    }
    files = parse_project_page(page, "https://i.example/simple/p/", what="reading")
    assert [(f.yanked, f.yank_reason) for f in files] == [(True, "bad build"), (True, ""), (False, "")]


# ------------------------------------------------------------------------- 18.3: the uv wheel's rules
def test_the_uv_wheel_obeys_its_releases_cut_off_and_the_yank_rule(srv: FakeServer, client: httpx.Client) -> None:
    first = make_wheel("uv", "9.9.9", tag="py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64")
    srv.publish(*first, uploaded=day(1))
    srv.publish(*make_wheel("uv", "9.9.9", tag="py3-none-manylinux_2_28_x86_64"), uploaded=day(300))  # late, better
    srv.publish(*make_wheel("uv", "9.9.9", tag="py3-none-manylinux_2_27_x86_64"), uploaded=day(1), yanked="bad")
    tool = choose_uv_wheel(Index(srv.index_url(), client), X86_311, "9.9.9")
    assert tool.path == f"tools/{first[0]}" and tool.sha256 == sha(first[1]) and tool.kind == "tool"


# ----------------------------------------------------- 18.4: an index without upload times needs one file
def test_a_second_index_pin_that_matches_several_local_versions_is_refused(
    env: FakeServer, published: FakeServer, tmp_path: Path
) -> None:
    for label in ("cu128", "cu129"):
        published.publish(*make_wheel("lkcuda", f"1.0+{label}"), index="second")
    published.publish(*make_wheel("lkcudb", "1.0+cu129"), index="second")

    def build(req: str, name: str, extra: str = "") -> str:
        index = f'index = {{ url = "{published.index_url("second")}", packages = ["{name}"] }}\n'
        return build_text(variant="gpu", requirements=f'["lkeng==1.0", "{req}"]', extra=index + extra)

    code, stdout, _ = run_lock(write(tmp_path, recipe_text(build("lkcuda==1.0", "lkcuda"))), tmp_path / "a")
    assert code != 0
    message = json.loads(stdout)["error"]["message"]
    assert message.startswith("lkcuda==1.0 matches 2 releases on the second index (")
    assert "1+cu128, 1+cu129" in message
    code, stdout, _ = run_lock(write(tmp_path, recipe_text(build("lkcudb==1.0", "lkcudb"))), tmp_path / "b")
    assert code != 0
    assert "lkcudb==1.0 matches only lkcudb 1+cu129" in json.loads(stdout)["error"]["message"]
    code, stdout, stderr = run_lock(write(tmp_path, recipe_text(build("lkcuda==1.0+cu129", "lkcuda"))), tmp_path / "c")
    assert code == 0, stdout + stderr
    assert packages(stdout)["lkcuda"]["file"] == "lkcuda-1.0+cu129-py3-none-any.whl"


def test_two_files_that_fit_from_an_index_without_times_are_ambiguous() -> None:
    pure, native = cand(PURE), cand(NATIVE)
    with pytest.raises(ResolveError, match=r"pkg==1.0 comes from an index without upload times, and 2 of its files"):
        choose_file(pin_for(pure, native), [pure, native], X86_311, origin="second", one_file=True)
    got = choose_file(
        pin_for(pure, native), [pure, native], X86_311, origin="second", one_file=True, pinned_sha256=pure.sha256
    )
    assert got.filename == PURE
    assert choose_file(pin_for(pure), [pure, native], X86_311, origin="second", one_file=True).filename == PURE


# ------------------------------------------------------------ 18.6: names that reach the terminal and disk
@pytest.mark.parametrize("name", ["pkg-1.0\x1b[2J-py3-none-any.whl", "pkg-1.0-py3-none-any\u202e.whl", "pkg\x00.whl"])
def test_an_index_file_name_with_a_control_character_is_refused(name: str) -> None:
    page = {"files": [{"filename": name, "url": "x", "hashes": {"sha256": A}}]}
    with pytest.raises(RemoteError, match=r"expected a plain file name without control characters"):
        parse_project_page(page, "https://i.example/simple/pkg/", what="reading the index's page for pkg")
    with pytest.raises(ResolveError, match="expected a plain file name"):
        choose_file(Pin("pkg", "1.0", frozenset({A})), [Candidate(name, "x", A, 1)], X86_311, origin="primary")


def test_a_chosen_file_must_be_of_the_pinned_name_and_version() -> None:
    for filename in ("other-1.0-py3-none-any.whl", "pkg-2.0-py3-none-any.whl", "pkg-2.0.tar.gz"):
        c = cand(filename)
        with pytest.raises(ResolveError, match=rf"offers '{re.escape(filename)}' for pkg==1.0, but its name says"):
            choose_file(pin_for(c), [c], X86_311, origin="primary")


def test_one_file_name_listed_with_two_digests_is_refused() -> None:
    page = {
        "files": [
            {"filename": PURE, "url": "a", "hashes": {"sha256": A}},
            {"filename": PURE, "url": "b", "hashes": {"sha256": B}},
        ]
    }
    with pytest.raises(RemoteError, match=r"lists pkg-1.0-py3-none-any.whl twice, with different digests"):
        parse_project_page(page, "https://i.example/simple/pkg/", what="reading")
    same = {"files": [page["files"][0], dict(page["files"][0])]}
    assert len(parse_project_page(same, "https://i.example/simple/pkg/", what="reading")) == 1
    # and the picker never compares two candidates of one name (it raised TypeError)
    twins = [Candidate(PURE, "a", A, 1), Candidate(PURE, "b", B, 1)]
    assert choose_file(Pin("pkg", "1.0", frozenset({A, B})), twins, X86_311, origin="primary").filename == PURE


# ---------------------------------------------------------------- 18.7: index answers that crashed
def raw_index(srv: FakeServer, project: str, body: bytes, client: httpx.Client) -> Index:
    srv.raw_pages[f"/primary/simple/{project}/"] = body
    return Index(srv.index_url(), client, name="the package index")


@pytest.mark.parametrize("when", ["0001-01-01T00:00:00+00:01", "not a time", "2025-13-01T00:00:00Z"])
def test_an_upload_time_that_cannot_be_read_is_lockbuilds_error(
    srv: FakeServer, client: httpx.Client, when: str
) -> None:
    page = {"files": [{"filename": "odd-1.0.tar.gz", "url": "x", "hashes": {"sha256": A}, "upload-time": when}]}
    index = raw_index(srv, "odd", json.dumps(page).encode(), client)
    with pytest.raises(RemoteError) as info:
        index.publication("odd", "1.0")
    assert info.value.message.startswith(f"reading the package index's page for odd: {srv.index_url()}/odd/ gives")
    assert "odd-1.0.tar.gz an upload-time lockbuild cannot read" in info.value.message


def test_a_release_time_near_year_9999_is_lockbuilds_error(srv: FakeServer, client: httpx.Client) -> None:
    page = {
        "files": [
            {"filename": "late-1.0.tar.gz", "url": "x", "hashes": {"sha256": A}, "upload-time": "9999-12-31T12:00:00Z"}
        ]
    }
    index = raw_index(srv, "late", json.dumps(page).encode(), client)
    recipe = parse_recipe(
        '[engine]\nname = "t"\npypi = "late"\nbinary = "t"\nverify = ["t"]\n'
        f'[[builds]]\nversion = "1.0"\nvariant = "cpu"\npython = "{PY}"\nplatform = "{PLATFORM}"\n'
        'requirements = ["late==1.0"]\n'
    )
    with pytest.raises(RemoteError, match=r"says late==1.0 was first uploaded at 9999-12-31T12:00:00Z; expected"):
        cut_off(recipe, recipe.builds[0], index)


def test_deeply_nested_json_is_lockbuilds_error(srv: FakeServer, client: httpx.Client) -> None:
    index = raw_index(srv, "deep", b"[" * 200_000 + b"]" * 200_000, client)
    with pytest.raises(RemoteError, match=r"the package index.* for deep: .* nested too deeply"):
        index.files("deep")


# ---------------------------------------------------------------------- 18.8: the cost of one page
def test_a_page_with_too_many_entries_is_refused(srv: FakeServer) -> None:
    entries = [{"filename": f"many-1.{i}.tar.gz", "url": "x"} for i in range(11)]
    srv.raw_pages["/primary/simple/many/"] = json.dumps({"files": entries}).encode()
    with httpx.Client(timeout=10) as c:
        index = Index(srv.index_url(), c, limits=Limits(max_index_files=10))
        with pytest.raises(RemoteError, match=r"lists 11 files; expected at most 10"):
            index.files("many")
        index = Index(srv.index_url(), c, limits=Limits(max_index_files=20, max_index_files_total=15))
        index.release("many", "1.0")
        with pytest.raises(RemoteError, match=r"has listed 22 files in this run; expected at most 15"):
            index.release("many", "2.0")


def test_only_the_releases_a_plan_asks_for_are_kept(srv: FakeServer) -> None:
    files = [{"filename": f"big-{v}.tar.gz", "url": "x", "hashes": {"sha256": f"{v:064x}"}} for v in range(1, 2001)]
    srv.raw_pages["/primary/simple/big/"] = json.dumps({"files": files}).encode()
    with httpx.Client(timeout=10) as c:
        index = Index(srv.index_url(), c)
        assert [f.filename for f in index.release("big", "7")] == ["big-7.tar.gz"]
        assert sum(len(kept) for kept in index._releases.values()) == 1


def test_the_default_limits_are_named_settings() -> None:
    assert DEFAULT_LIMITS.max_index_files == 200_000 and DEFAULT_LIMITS.max_index_files_total == 1_000_000


# --------------------------------------------------------------------------- 11.10: exact digests
def test_a_pylock_digest_with_a_trailing_newline_is_refused() -> None:
    text = f'[[packages]]\nname = "a"\nversion = "1"\nwheels = [{{ name = "a-1-py3-none-any.whl", hashes = {{ sha256 = "{A}\\n" }} }}]\n'
    with pytest.raises(ResolveError, match="has no sha256"):
        parse_pylock(text, X86_311)


# ------------------------------------------------------------------ recipe keys the lock honours
def test_exclude_newer_package_moves_one_packages_cut_off(
    env: FakeServer, published: FakeServer, tmp_path: Path
) -> None:
    """uv's per-package exemption: lkdep may be as new as 2025-02-15 (3.0, day 30), everything else keeps
    the release's cut-off; the lock's JSON records the exemption."""
    extra = 'exclude-newer-package = { lkdep = "2025-02-15T00:00:00Z" }\n'
    code, stdout, stderr = run_lock(write(tmp_path, recipe_text(build_text(extra=extra))), tmp_path / "out")
    assert code == 0, stderr
    assert packages(stdout)["lkdep"]["version"] == "3.0"
    lock = json.loads(stdout)["locks"][0]
    assert lock["as_of"] == "2025-01-06T00:00:00Z"
    assert lock["exclude_newer_package"] == {"lkdep": "2025-02-15T00:00:00Z"}
    recorded = parse_recipe((tmp_path / "out" / "1.0-cpu" / "recipe.toml").read_text())
    assert recorded.builds[0].exclude_newer_package == (("lkdep", "2025-02-15T00:00:00Z"),)


def test_a_wheel_from_a_url_is_locked_with_the_recipes_sha256(
    env: FakeServer, published: FakeServer, tmp_path: Path
) -> None:
    filename, data = make_wheel("lkurl", "1.0+g1234", deps=("lkdep",))
    url = published.add_file(f"/nightly/{filename}", data)
    reqs = '["lkeng==1.0", "lkurl==1.0+g1234"]'
    good = build_text(requirements=reqs, extra=f'wheel = {{ url = "{url}", sha256 = "{sha(data)}" }}\n')
    code, stdout, stderr = run_lock(write(tmp_path, recipe_text(good)), tmp_path / "out")
    assert code == 0, stdout + stderr
    got = packages(stdout)["lkurl"]
    assert (got["file"], got["sha256"], got["origin"], got["url"]) == (filename, sha(data), "direct", url)
    bad = build_text(requirements=reqs, extra=f'wheel = {{ url = "{url}", sha256 = "{"0" * 64}" }}\n')
    code, stdout, _ = run_lock(write(tmp_path, recipe_text(bad), "bad.toml"), tmp_path / "bad")
    assert code == 4 and not (tmp_path / "bad" / "1.0-cpu").exists()
    error = json.loads(stdout)["error"]
    assert error["type"] == "IntegrityError" and "0" * 64 in error["message"], error


def test_a_pin_sha256_for_a_package_the_lock_does_not_have_is_refused(
    env: FakeServer, published: FakeServer, tmp_path: Path
) -> None:
    extra = f'pin-sha256 = {{ lkgone = "{A}" }}\n'
    code, stdout, _ = run_lock(write(tmp_path, recipe_text(build_text(extra=extra))), tmp_path / "out")
    assert code != 0 and not (tmp_path / "out" / "1.0-cpu").exists()
    assert "pin-sha256 names lkgone, which the lock does not contain" in json.loads(stdout)["error"]["message"]


def test_reading_only_a_release_keeps_exactly_the_files_the_full_parse_would() -> None:
    """The index reads a file's version from its name's version field alone when asking for one release;
    that shortcut must keep the same files as parsing every name whole (wheels, sdists, and the rest)."""
    from lockbuild.fetch.index import file_version

    names = [
        "pkg-1.0-py3-none-any.whl",
        "pkg-1.0.0-py3-none-any.whl",
        "pkg-1-1-py3-none-any.whl",
        "pkg-1.0.tar.gz",
        "pkg-1.0.0.zip",
        "pkg-1.0rc1.tar.gz",
        "pkg-1.0.post0.tar.gz",
        "pkg-1.0.tar.bz2",
        "pkg-1.0-py2.7.egg",
        "pkg-1.0.win32.exe",
        "1.0.tar.gz",
        "-1.0.tar.gz",
        "pkg_extra-name-1.0.tar.gz",
        "pkg-1.0+local.tar.gz",
        "pkg-01.00.zip",
        "pkg-1.0.TAR.GZ",
        "pkg-1.0-cp311-cp311-manylinux_2_28_x86_64.whl",
        "pkg-x.y.tar.gz",
        "pkg-1.0-bad.whl",
        "pkg-2.0.tar.gz",
        "pkg-v1.0.tar.gz",
    ]
    page = {"files": [{"filename": n, "url": f"/f/{n}"} for n in names]}
    for want in ("1", "1rc1", "1.post0", "1+local", "2"):

        def keep(v: str | None, want: str = want) -> bool:
            return v == want

        got = {f.filename for f in parse_project_page(page, "https://x/simple/pkg/", what="t", keep=keep)}
        assert got == {n for n in names if keep(file_version(n))}, want
