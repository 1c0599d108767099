"""Release files from a fake GitHub: taken only with the digest the release publishes; the token never shown."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner
from conftest import TOY_RECIPE
from servers import FakeServer

from lockbuild.cli import main
from lockbuild.errors import FetchError, IntegrityError, LockbuildError, RecipeError, RemoteError
from lockbuild.fetch.cache import Cache
from lockbuild.fetch.fetcher import Fetcher
from lockbuild.fetch.github import ReleaseAsset, pick_wheel, release_assets
from lockbuild.fetch.http import make_client
from lockbuild.settings import Settings

TOKEN = "ghp_secret0123456789abcdefghijklmnopqrstu"
DATA = b"engine binaries " * 4096
OTHER = b"something else"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def gh(srv: FakeServer, monkeypatch: pytest.MonkeyPatch) -> FakeServer:
    monkeypatch.setenv("LOCKBUILD_GITHUB_API", srv.github_api)
    monkeypatch.setenv("LOCKBUILD_GITHUB_DOWNLOAD", srv.github_download)
    return srv


def bases(s: FakeServer) -> dict[str, str]:
    return {"api": s.github_api, "download": s.github_download}


@pytest.fixture
def github_token() -> str | None:
    return None  # a test parametrizes it to have the clients carry a token


@pytest.fixture
def settings(gh: FakeServer, tmp_path: Path, github_token: str | None) -> Settings:
    return Settings(gh.index_url(), gh.github_api, gh.github_download, tmp_path / "cache", github_token=github_token)


@pytest.fixture
def api(settings: Settings) -> Iterator[httpx.Client]:
    with make_client(settings=settings) as c:
        yield c


@pytest.fixture
def fetcher(tmp_path: Path, settings: Settings) -> Iterator[Fetcher]:
    with make_client(settings=settings) as c:
        c.follow_redirects = True
        yield Fetcher(Cache(tmp_path / "cache"), c, sleep=lambda s: None)


def cached(f: Fetcher) -> list[Path]:
    return [p for p in f.cache.root.rglob("*") if p.is_file()] if f.cache.root.exists() else []


def test_asset_with_its_published_digest_is_fetched(gh: FakeServer, api: httpx.Client, fetcher: Fetcher) -> None:
    gh.add_release("o/engine", "v1.2", {"engine-linux.tar.gz": DATA})
    asset = release_assets(api, "o/engine", "v1.2", **bases(gh))["engine-linux.tar.gz"]
    assert asset.url == f"{gh.github_download}/o/engine/releases/download/v1.2/engine-linux.tar.gz"
    assert asset.sha256() == sha(DATA) and asset.size == len(DATA)
    (got,) = fetcher.fetch_all([asset.wanted()]).files
    assert got.path.read_bytes() == DATA


def test_asset_without_a_published_digest_is_refused(gh: FakeServer, api: httpx.Client, fetcher: Fetcher) -> None:
    gh.add_release("o/engine", "v1.2", {"engine-linux.tar.gz": DATA}, digests={"engine-linux.tar.gz": None})
    asset = release_assets(api, "o/engine", "v1.2", **bases(gh))["engine-linux.tar.gz"]
    with pytest.raises(IntegrityError, match=r"o/engine v1.2: GitHub publishes no digest for engine-linux.tar.gz"):
        asset.wanted()
    assert gh.files["/gh/o/engine/releases/download/v1.2/engine-linux.tar.gz"].hits == 0  # never downloaded
    assert cached(fetcher) == []


def test_asset_with_a_wrong_digest_is_refused(gh: FakeServer, api: httpx.Client, fetcher: Fetcher) -> None:
    gh.add_release(
        "o/engine", "v1.2", {"engine-linux.tar.gz": DATA}, digests={"engine-linux.tar.gz": f"sha256:{sha(OTHER)}"}
    )
    asset = release_assets(api, "o/engine", "v1.2", **bases(gh))["engine-linux.tar.gz"]
    with pytest.raises(IntegrityError) as err:
        fetcher.fetch_all([asset.wanted()])
    assert f"expected {sha(OTHER)}, found {sha(DATA)}" in err.value.message
    assert cached(fetcher) == []


@pytest.mark.parametrize(
    "digest",
    [
        "sha256:xyz",
        f"md5:{hashlib.md5(DATA).hexdigest()}",
        f"SHA256:{sha(DATA)}",
        f"sha256:{sha(DATA).upper()}",
        f"sha256:{sha(DATA)}\n",
        f"sha256:{sha(DATA)[:-1]}",
        f" sha256:{sha(DATA)}",
        "",
    ],
)
def test_malformed_digest_is_refused(gh: FakeServer, api: httpx.Client, digest: str) -> None:
    gh.add_release("o/engine", "v1", {"a.tgz": DATA}, digests={"a.tgz": digest})
    asset = release_assets(api, "o/engine", "v1", **bases(gh))["a.tgz"]
    with pytest.raises(IntegrityError, match=r"the digest published for a.tgz is malformed: expected 'sha256:' and 64"):
        asset.sha256()


def test_missing_release_is_a_clear_error(gh: FakeServer, api: httpx.Client) -> None:
    with pytest.raises(RemoteError, match=r"^GitHub has no release v9 in o/engine\.$"):
        release_assets(api, "o/engine", "v9", **bases(gh))


@pytest.mark.parametrize("name", ["../../evil.whl", "dir/x.whl", "a b.whl", "..", "evil\u202elhw.exe", "a\u200b.whl"])
def test_asset_name_that_is_not_a_plain_file_name_is_refused(gh: FakeServer, api: httpx.Client, name: str) -> None:
    gh.add_release("o/engine", "v1", {name: DATA})
    with pytest.raises(RemoteError, match=r"expected a plain file name"):
        release_assets(api, "o/engine", "v1", **bases(gh))


@pytest.mark.parametrize(
    ("repo", "tag"), [("o/engine", "../../../../other/repo/releases/tags/v1"), ("o/engine", "v1?x"), ("../o", "v1")]
)
def test_a_tag_or_repo_that_leaves_the_release_url_is_refused_before_asking(
    gh: FakeServer, api: httpx.Client, repo: str, tag: str
) -> None:
    with pytest.raises(RecipeError, match="expected a GitHub OWNER/NAME and a release tag that is a Git ref name"):
        release_assets(api, repo, tag, **bases(gh))
    assert not [r for r in gh.requests if r.startswith("/api/")]


def _assets(*names: str) -> dict[str, ReleaseAsset]:
    return {n: ReleaseAsset("o/engine", "v1", n, 1, f"sha256:{'0' * 64}") for n in names}


def test_pick_wheel_takes_the_one_match() -> None:
    assets = _assets("engine-1.0-cp312-linux_x86_64.whl", "engine-1.0-cp312-linux_aarch64.whl", "notes.txt")
    got = pick_wheel(assets, "engine-", "-linux_x86_64.whl", repo="o/engine", tag="v1")
    assert got.name == "engine-1.0-cp312-linux_x86_64.whl"


def test_pick_wheel_with_no_match_is_a_clear_error() -> None:
    assets = _assets("engine-1.0-cp312-linux_aarch64.whl", "notes.txt")
    with pytest.raises(RemoteError) as err:
        pick_wheel(assets, "engine-", "-linux_x86_64.whl", repo="o/engine", tag="v1")
    assert err.value.message == (
        "o/engine v1: expected exactly one asset named engine-…-linux_x86_64.whl, found 0 "
        "(none; the release has engine-1.0-cp312-linux_aarch64.whl, notes.txt)."
    )


def test_pick_wheel_with_two_matches_is_a_clear_error() -> None:
    assets = _assets("engine-1.0-cp312-linux_x86_64.whl", "engine-1.0-cp313-linux_x86_64.whl")
    with pytest.raises(RemoteError) as err:
        pick_wheel(assets, "engine-", "-linux_x86_64.whl", repo="o/engine", tag="v1")
    assert "found 2 (engine-1.0-cp312-linux_x86_64.whl, engine-1.0-cp313-linux_x86_64.whl)" in err.value.message


# the token ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("github_token", [TOKEN])
def test_token_is_sent_as_bearer_to_the_api_and_downloads(gh: FakeServer, api: httpx.Client, fetcher: Fetcher) -> None:
    gh.add_release("o/engine", "v1", {"a.tgz": DATA})
    asset = release_assets(api, "o/engine", "v1", **bases(gh))["a.tgz"]
    fetcher.fetch_all([asset.wanted()])
    seen = dict(gh.request_headers)
    assert seen["/api/repos/o/engine/releases/tags/v1"]["authorization"] == f"Bearer {TOKEN}"
    assert seen["/api/repos/o/engine/releases/tags/v1"]["accept"] == "application/vnd.github+json"
    assert seen["/gh/o/engine/releases/download/v1/a.tgz"]["authorization"] == f"Bearer {TOKEN}"


def test_no_token_no_authorization(gh: FakeServer, api: httpx.Client, fetcher: Fetcher) -> None:
    gh.add_release("o/engine", "v1", {"a.tgz": DATA})
    fetcher.fetch_all([release_assets(api, "o/engine", "v1", **bases(gh))["a.tgz"].wanted()])
    assert gh.request_headers and not any("authorization" in h for _, h in gh.request_headers)


def _shown(exc: LockbuildError) -> str:
    return f"{exc} {exc.message} {exc.tip} {exc!r} {exc.args}"


@pytest.mark.parametrize("github_token", [TOKEN])
def test_token_never_appears_in_errors(gh: FakeServer, api: httpx.Client, fetcher: Fetcher) -> None:
    gh.add_release("o/engine", "v1", {"a.tgz": DATA, "b.tgz": DATA + b"!"}, digests={"b.tgz": f"sha256:{sha(OTHER)}"})
    assets = release_assets(api, "o/engine", "v1", **bases(gh))
    errors: list[LockbuildError] = []
    with pytest.raises(RemoteError) as missing:
        release_assets(api, "o/engine", "v404", **bases(gh))
    errors.append(missing.value)
    with pytest.raises(IntegrityError) as wrong:
        fetcher.fetch_all([assets["b.tgz"].wanted()])
    errors.append(wrong.value)
    del gh.files["/gh/o/engine/releases/download/v1/a.tgz"]
    with pytest.raises(FetchError) as gone:
        fetcher.fetch_all([assets["a.tgz"].wanted()])
    errors.append(gone.value)
    with pytest.raises(RemoteError) as down:
        release_assets(api, "o/engine", "v1", api="http://127.0.0.1:9/api", download=gh.github_download)
    errors.append(down.value)
    assert "HTTP 404" in gone.value.message and "cannot reach" in down.value.message
    for exc in errors:
        assert TOKEN not in _shown(exc)
        assert "ghp_" not in _shown(exc)


# through the command -----------------------------------------------------------------------------
ASSET_RECIPE = TOY_RECIPE.replace('pypi = "toyengine"\n', 'pypi = "toyengine"\nrepo = "lbtest/toyengine"\n') + (
    'assets = { tag = "TAG", dir = "engine", files = ["toyengine-linux.tar.gz"] }\n'
)


def _fetch(recipe: Path, out: Path) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, ["fetch", str(recipe), "--out", str(out), "--json"], catch_exceptions=False)
    return r.exit_code, r.stdout, r.stderr


def test_fetch_command_brings_release_assets(env: FakeServer, tmp_path: Path) -> None:
    env.add_release("lbtest/toyengine", "v1-good", {"toyengine-linux.tar.gz": DATA})
    recipe = tmp_path / "toy.toml"
    recipe.write_text(ASSET_RECIPE.replace("TAG", "v1-good"))
    code, stdout, stderr = _fetch(recipe, tmp_path / "out")
    assert code == 0, stderr
    assert (tmp_path / "out" / "1.0-cpu" / "assets" / "toyengine-linux.tar.gz").read_bytes() == DATA
    (fetched,) = json.loads(stdout)["fetches"]
    assert {
        "path": "assets/toyengine-linux.tar.gz",
        "kind": "asset",
        "sha256": sha(DATA),
        "url": f"{env.github_download}/lbtest/toyengine/releases/download/v1-good/toyengine-linux.tar.gz",
    } in fetched["extras"]


@pytest.mark.parametrize("digest", [None, f"sha256:{sha(OTHER)}"], ids=["no-digest", "wrong-digest"])
def test_fetch_command_refuses_unverifiable_assets(
    env: FakeServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, digest: str | None
) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    tag = f"v1-{'none' if digest is None else 'wrong'}"
    env.add_release(
        "lbtest/toyengine", tag, {"toyengine-linux.tar.gz": DATA}, digests={"toyengine-linux.tar.gz": digest}
    )
    recipe = tmp_path / "toy.toml"
    recipe.write_text(ASSET_RECIPE.replace("TAG", tag))
    code, stdout, stderr = _fetch(recipe, tmp_path / "out")
    assert code == IntegrityError.exit_code
    error = json.loads(stdout)["error"]
    assert error["type"] == "IntegrityError"
    expected = "publishes no digest" if digest is None else f"expected {sha(OTHER)}, found {sha(DATA)}"
    assert expected in error["message"]
    assert TOKEN not in stdout + stderr
    assert not (tmp_path / "out" / "1.0-cpu").exists()
