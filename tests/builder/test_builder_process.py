"""The builder's process and transport: what index code can reach while locking,
where credentials go, plain http, terminal escapes, and the cache's owner."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import json
import os
from pathlib import Path

import httpx
import pytest
import zstandard
from click.testing import CliRunner
from conftest import TOY_RECIPE, Keys, day
from servers import FakeServer, make_tar_gz

from lockbuild.cli import main
from lockbuild.errors import FetchError, RemoteError, ResolveError
from lockbuild.fetch.cache import Cache
from lockbuild.fetch.http import get_json, make_client
from lockbuild.progress import Progress
from lockbuild.recipe import load_recipe
from lockbuild.resolution.resolve import compile_lock
from lockbuild.settings import Settings, load
from lockbuild.text import for_terminal
from lockbuild.wire.urls import InsecureTransportError

SECRETS = {
    "LOCKBUILD_KEY_PASSWORD": "pw-SECRET-0a1b",
    "GITHUB_TOKEN": "ghp_SECRET0a1b2c3d",
    "LOCKBUILD_INDEX_TOKEN": "idx-SECRET-9z8y",
    "AWS_SECRET_ACCESS_KEY": "aws-SECRET-7x6w",
}

BACKEND = """
import json, os
def _dump():
    data = json.dumps(dict(os.environ))
    try:
        with open({out!r}, "w") as f:
            f.write(data)
    except OSError:  # in the sandbox no host path is there: it reports over the network
        pass
    if {port!r}:
        import socket
        s = socket.create_connection(("127.0.0.1", {port!r}), timeout=5)
        s.sendall(data.encode())
        s.close()
def get_requires_for_build_wheel(config_settings=None):
    _dump()
    return []
def prepare_metadata_for_build_wheel(d, config_settings=None):
    _dump()
    di = os.path.join(d, "{name}-1.0.dist-info")
    os.makedirs(di)
    with open(os.path.join(di, "METADATA"), "w") as f:
        f.write("Metadata-Version: 2.1\\nName: {name}\\nVersion: 1.0\\n")
    return "{name}-1.0.dist-info"
def build_wheel(d, config_settings=None, metadata_directory=None):
    _dump()
    raise RuntimeError("not built here")
"""


def hostile_sdist(name: str, out: Path, port: int = 0) -> bytes:
    """An sdist whose PEP 517 backend writes its whole environment to ``out`` when uv runs it (and sends it
    to 127.0.0.1:``port``, the one way out of the lock-time sandbox, which keeps the network for the index)."""
    return make_tar_gz(
        {
            f"{name}-1.0/PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n".encode(),
            f"{name}-1.0/pyproject.toml": b'[build-system]\nrequires = []\nbuild-backend = "backend"\n'
            b'backend-path = ["."]\n',
            f"{name}-1.0/backend.py": BACKEND.format(out=str(out), name=name, port=port).encode(),
        }
    )


def recipe_with(tmp_path: Path, *requirements: str) -> Path:
    reqs = ", ".join(f'"{r}"' for r in ("toyengine==1.0", *requirements))
    p = tmp_path / "r.toml"
    p.write_text(TOY_RECIPE.replace('requirements = ["toyengine==1.0"]', f"requirements = [{reqs}]"))
    return p


# 18.1: index code and the builder's secrets -------------------------------------------------------------
def test_locking_never_runs_an_sdists_build_backend(
    env: FakeServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = tmp_path / "backend-env.json"
    env.publish("lkhostile-1.0.tar.gz", hostile_sdist("lkhostile", seen), uploaded=day(1))
    for k, v in SECRETS.items():
        monkeypatch.setenv(k, v)
    r = CliRunner().invoke(main, ["lock", str(recipe_with(tmp_path, "lkhostile==1.0")), "--out", str(tmp_path / "o")])
    assert r.exit_code == ResolveError.exit_code
    assert "ERROR lkhostile has no wheel" in r.stderr and "build backend" in r.stderr
    assert not seen.exists()  # the backend never ran


def test_a_backend_allowed_to_run_sees_no_secret(env: FakeServer, tmp_path: Path) -> None:
    import socket
    import threading

    seen = tmp_path / "backend-env.json"
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(60)
    reports: list[bytes] = []

    def collect() -> None:
        with contextlib.suppress(OSError):
            conn, _ = listener.accept()
            with conn:
                reports.append(b"".join(iter(lambda: conn.recv(1 << 16), b"")))

    reader = threading.Thread(target=collect, daemon=True)
    reader.start()
    env.publish("lkallowed-1.0.tar.gz", hostile_sdist("lkallowed", seen, listener.getsockname()[1]), uploaded=day(1))
    environ = {**SECRETS, "PATH": os.environ["PATH"], "HOME": str(tmp_path), "LOCKBUILD_INDEX_URL": env.index_url()}
    settings = load(environ, home=tmp_path)
    target = load_recipe(recipe_with(tmp_path)).builds[0].target
    (tmp_path / "w").mkdir()
    got = compile_lock(
        ["lkallowed==1.0"],
        target,
        day(10),
        index_url=settings.index_url,
        workdir=tmp_path / "w",
        cache_dir=tmp_path / "uv-cache",
        inherit=dict(settings.child_environ),
        credentials=settings.index_credentials,
        sdists_allowed=("lkallowed",),
    )
    assert "lkallowed==1.0" in got.text
    reader.join(timeout=30)
    listener.close()
    # uv was given the sdist's metadata (for a version lockbuild has not read, "no dependencies": see
    # tests/sdist/test_sdist_metadata.py), so it ran no backend, which would have reported over uv's network.
    assert not seen.exists() and reports in ([], [b""])


def test_the_passphrase_leaves_the_environment_and_a_missing_key_stops_the_build_before_the_lock(
    env: FakeServer, keys: Keys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOCKBUILD_KEY_PASSWORD", "pw-SECRET-0a1b")
    missing_key = tmp_path / "absent.key"
    bad = recipe_with(tmp_path, "lknosuchpackage==1.0")
    r = CliRunner().invoke(main, ["build", str(bad), "--key", str(missing_key), "--out", str(tmp_path / "d")])
    # the key is checked (in the signing process) before anything is locked: the lock's error never comes
    assert r.exit_code == 3
    assert "absent.key" in r.stderr and "lknosuchpackage" not in r.stderr
    assert "LOCKBUILD_KEY_PASSWORD" not in os.environ


# 11.4: credentials never leave the process ---------------------------------------------------------------
def _unzstd(path: Path) -> bytes:
    with path.open("rb") as f, zstandard.ZstdDecompressor().stream_reader(f) as r:
        return r.read()


@pytest.mark.slow  # over 5 s
def test_index_credentials_reach_only_the_index_and_no_record(
    env: FakeServer, keys: Keys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "s3cr3t-IDX-4242"
    host = env.url.removeprefix("http://")
    monkeypatch.setenv("LOCKBUILD_INDEX_URL", f"http://lbuser:{secret}@{host}/primary/simple")
    monkeypatch.setenv("GITHUB_TOKEN", SECRETS["GITHUB_TOKEN"])
    before = len(env.request_headers)
    recipe = recipe_with(tmp_path)
    basic = "Basic " + base64.b64encode(f"lbuser:{secret}".encode()).decode()
    monkeypatch.setattr(env, "require_auth", basic)  # the index answers 401 without them (uv included)
    r = CliRunner().invoke(
        main, ["build", str(recipe), "--key", str(keys.secret), "--out", str(tmp_path / "d"), "--json"]
    )
    assert r.exit_code == 0, r.stderr
    bundle = Path(json.loads(r.stdout)["bundles"][0]["bundle"])
    r2 = CliRunner().invoke(main, ["fetch", str(recipe), "--out", str(tmp_path / "f"), "--json"])
    assert r2.exit_code == 0, r2.stderr
    r3 = CliRunner().invoke(main, ["lock", str(recipe_with(tmp_path, "lkabsent==9")), "--out", str(tmp_path / "x")])
    assert r3.exit_code == 1
    unpacked = _unzstd(bundle)
    recorded = [r.stdout, r.stderr, r2.stdout, r2.stderr, r3.stdout, r3.stderr, unpacked.decode("latin-1")]
    recorded += [p.read_text(errors="replace") for p in (tmp_path / "f").rglob("*") if p.is_file()]
    for text in recorded:
        assert secret not in text and "lbuser" not in text and SECRETS["GITHUB_TOKEN"] not in text
    assert b"sbom.cdx.json" in unpacked and f"{env.url}/files/primary/".encode() in unpacked  # origins, clean
    sent = env.request_headers[before:]
    ours = [(p, h) for p, h in sent if h.get("user-agent", "").startswith("lockbuild/")]
    assert (
        ours
        and [p for p, h in ours if h.get("authorization") != basic and p.startswith(("/primary/", "/files/"))] == []
    )
    assert not any(h.get("authorization") == basic for p, h in ours if p.startswith(("/api/", "/gh/")))
    uv = [h for p, h in sent if h.get("user-agent", "").startswith("uv/")]
    assert any(h.get("authorization") == basic for h in uv)  # uv had them too (a netrc, not its argv)


def test_settings_take_credentials_out_of_the_url(tmp_path: Path) -> None:
    s = load({"LOCKBUILD_INDEX_URL": "https://me:p%40ss@pypi.example.org/simple/"}, home=tmp_path)
    assert s.index_url == "https://pypi.example.org/simple"
    assert s.index_credentials is not None and s.index_credentials.password == "p@ss"
    assert "p@ss" not in repr(s) and "p%40ss" not in repr(s)
    assert s.auth_for("https://pypi.example.org/files/x.whl") == s.index_credentials.authorization()
    assert s.auth_for("https://files.example.org/x.whl") is None  # another host gets nothing
    t = load({"LOCKBUILD_INDEX_URL": "https://pypi.example.org/simple", "LOCKBUILD_INDEX_TOKEN": "tok"}, home=tmp_path)
    assert t.index_credentials is not None and (t.index_credentials.username, t.index_credentials.password) == (
        "__token__",
        "tok",
    )
    (tmp_path / ".netrc").write_text("machine pypi.example.org login bob password fromnetrc\n")
    (tmp_path / ".netrc").chmod(0o600)
    n = load({"LOCKBUILD_INDEX_URL": "https://pypi.example.org/simple"}, home=tmp_path)
    assert n.index_credentials is not None and n.index_credentials.password == "fromnetrc"


# 11.6: plain http -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["LOCKBUILD_INDEX_URL", "LOCKBUILD_GITHUB_API", "LOCKBUILD_GITHUB_DOWNLOAD"])
def test_plain_http_off_loopback_is_refused(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(name, "http://mirror.example.org/simple")
    r = CliRunner().invoke(main, ["lock", str(recipe_with(tmp_path)), "--out", str(tmp_path / "o")])
    assert r.exit_code == 1
    assert f"ERROR {name}: refusing plain http to mirror.example.org" in r.stderr
    assert "--allow-insecure-http" in r.stderr


def test_the_insecure_opt_in_warns_and_sends_no_credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCKBUILD_INDEX_URL", "http://u:pw@mirror.example.org/simple")
    bad = tmp_path / "bad.toml"
    bad.write_text("not toml [")
    r = CliRunner().invoke(main, ["lock", str(bad), "--out", str(tmp_path / "o"), "--allow-insecure-http"])
    assert "warning: INSECURE: LOCKBUILD_INDEX_URL is plain http to mirror.example.org" in r.stderr
    assert "pw" not in r.stderr.replace("plain http", "")
    s = load(
        {
            "LOCKBUILD_INDEX_URL": "http://u:pw@mirror.example.org/simple",
            "GITHUB_TOKEN": "ghp_x",
            "LOCKBUILD_GITHUB_API": "http://api.example.org",
        },
        home=tmp_path,
        allow_insecure_http=True,
    )
    assert s.auth_for("http://mirror.example.org/simple/x/") is None
    assert s.auth_for("http://api.example.org/repos/o/r/releases/tags/v1") is None


def _mock_client(settings: Settings, seen: list[httpx.Request]) -> httpx.Client:
    client = make_client(settings=settings)
    client._transport = httpx.MockTransport(lambda req: seen.append(req) or httpx.Response(200, json={}))
    return client


def test_the_token_is_never_sent_over_plain_http(tmp_path: Path) -> None:
    s = Settings(
        "https://pypi.example.org/simple",
        "http://api.example.org",
        "https://downloads.example.org",
        tmp_path,
        github_token="ghp_x",
        allow_insecure_http=True,
    )
    seen: list[httpx.Request] = []
    with _mock_client(s, seen) as c:
        c.get("http://api.example.org/repos/o/r/releases/tags/v1", headers={"Authorization": "Bearer planted"})
        c.get("https://downloads.example.org/o/r/releases/download/v1/a.tgz")
    assert "authorization" not in seen[0].headers  # not the token, nor a header a caller put there
    assert seen[1].headers["authorization"] == "Bearer ghp_x"  # over https, the token


def test_a_redirect_to_plain_http_off_loopback_is_refused(srv: FakeServer) -> None:
    srv.redirects["/gh/o/r/a.tgz"] = "http://192.0.2.1/a.tgz"
    with make_client() as c:
        c.follow_redirects = True
        with pytest.raises(InsecureTransportError, match=r"refusing plain http to 192\.0\.2\.1"):
            c.get(f"{srv.url}/gh/o/r/a.tgz")
        srv.redirects["/simple/x/"] = "http://192.0.2.1/simple/x/"
        with pytest.raises(RemoteError):
            get_json(c, f"{srv.url}/simple/x/", what="reading")


def test_the_token_is_dropped_on_a_redirect_to_another_host(tmp_path: Path) -> None:
    github, storage = FakeServer(), FakeServer()
    try:
        storage.add_file("/objects/a", b"asset bytes")
        github.redirects["/gh/o/r/releases/download/v1/a.tgz"] = f"{storage.url}/objects/a"
        s = Settings(github.index_url(), github.github_api, github.github_download, tmp_path, github_token="ghp_x")
        with make_client(settings=s) as c:
            c.follow_redirects = True
            assert c.get(f"{github.github_download}/o/r/releases/download/v1/a.tgz").content == b"asset bytes"
        assert [h["authorization"] for _, h in github.request_headers] == ["Bearer ghp_x"]
        assert not any("authorization" in h for _, h in storage.request_headers)
    finally:
        github.close()
        storage.close()


# 18.5: terminal escapes ---------------------------------------------------------------------------------
HOSTILE = "index says \x1b[32mverified\x1b[0m\x1b]0;pwned\x07 \r\u202eesrever\x9b2J"


def test_an_error_with_escape_sequences_prints_escaped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import lockbuild.recipe

    def hostile(_path: Path) -> None:
        raise RemoteError(HOSTILE + " at https://u:pw@idx.example/simple", tip="\x1b[2Jcleared")

    monkeypatch.setattr(lockbuild.recipe, "load_recipe", hostile)
    r = CliRunner().invoke(main, ["lock", str(tmp_path / "r.toml"), "--out", str(tmp_path / "o")])
    assert r.exit_code == 1
    assert not any(c in r.stderr for c in "\x1b\x07\r\u202e\x9b")
    assert "ERROR index says \\x1b[32mverified\\x1b[0m\\x1b]0;pwned\\x07 \\x0d\\u202eesrever\\x9b2J" in r.stderr
    assert "TIP \\x1b[2Jcleared" in r.stderr and "u:pw@" not in r.stderr and "https://***@idx.example" in r.stderr
    r = CliRunner().invoke(main, ["lock", str(tmp_path / "r.toml"), "--out", str(tmp_path / "o"), "--json"])
    assert "\x1b" not in r.stdout and "u:pw@" not in r.stdout
    assert json.loads(r.stdout)["error"]["message"].startswith("index says \x1b[32m")  # escaped by JSON, not lost


def test_progress_lines_are_escaped() -> None:
    out = io.StringIO()
    Progress(out).phase(HOSTILE)
    assert not any(c in out.getvalue() for c in "\x1b\x07\r\u202e\x9b")
    assert for_terminal("tab\tand\nnewline stay; bell \x07 does not") == "tab\tand\nnewline stay; bell \\x07 does not"


# the cache ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("attack", ["group-writable", "symlink"])
def test_a_cache_another_user_could_write_is_refused(
    attack: str, env: FakeServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = tmp_path / "real-cache"
    real.mkdir()
    cache = tmp_path / "cache"
    if attack == "group-writable":
        real.rename(cache)
        cache.chmod(0o775)
    else:
        cache.symlink_to(real)
    monkeypatch.setenv("LOCKBUILD_CACHE_DIR", str(cache))
    r = CliRunner().invoke(main, ["lock", str(recipe_with(tmp_path)), "--out", str(tmp_path / "o")])
    assert r.exit_code == FetchError.exit_code
    why = "is writable by group or others" if attack == "group-writable" else "is a symbolic link"
    assert f"ERROR the cache directory {cache} {why}" in r.stderr
    (tmp_path / "cache-uv").mkdir(mode=0o700)
    (tmp_path / "cache-uv" / "uv").mkdir(mode=0o777)
    (tmp_path / "cache-uv" / "uv").chmod(0o777)
    with pytest.raises(FetchError, match="uv is writable by group or others"):
        Cache(tmp_path / "cache-uv").check_owner()


def test_a_symlink_planted_as_a_cache_entry_is_not_followed(tmp_path: Path) -> None:
    data = b"the real bytes"
    digest = hashlib.sha256(data).hexdigest()
    cache = Cache(tmp_path / "c")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_bytes(data)  # right content: only the symlink is wrong
    cache.path(digest).parent.mkdir(parents=True)
    cache.path(digest).symlink_to(elsewhere)
    assert cache.lookup(digest, len(data)) is None
    assert not cache.path(digest).is_symlink() and elsewhere.read_bytes() == data


def test_the_source_archive_read_is_the_one_hashed(
    env: FakeServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    good = make_tar_gz({"lksrc-1.0/requirements.txt": b"toydep>=1.0\n"})
    swapped = make_tar_gz({"other/requirements.txt": b"lkswapped\n"})
    digest = hashlib.sha256(good).hexdigest()
    url = env.add_file("/src/lksrc-1.0.tar.gz", good)
    recipe = recipe_with(tmp_path)
    recipe.write_text(
        recipe.read_text() + f'source = {{ url = "{url}", sha256 = "{digest}", top = "lksrc-1.0", dir = "src", '
        'requirements = "requirements.txt" }\n'
    )
    r = CliRunner().invoke(main, ["lock", str(recipe), "--out", str(tmp_path / "o")])
    assert r.exit_code == 0, r.stderr  # the archive is now in the cache
    original = Cache.open_entry

    def swap_after_hashing(self: Cache, sha256: str, size: int | None, **kw):  # type: ignore[no-untyped-def]
        f = original(self, sha256, size, **kw)
        if f is not None and sha256 == digest:  # another process replaces the entry right after the check
            planted = tmp_path / "planted"
            planted.write_bytes(swapped)
            os.replace(planted, self.path(sha256))
        return f

    monkeypatch.setattr(Cache, "open_entry", swap_after_hashing)
    r = CliRunner().invoke(main, ["lock", str(recipe), "--out", str(tmp_path / "o"), "--json"])
    assert r.exit_code == 0, r.stderr
    names = {p["name"] for p in json.loads(r.stdout)["locks"][0]["packages"]}
    assert "toydep" in names


# credentials and plain http in what the recipe and the index name ------------------------------------------
def test_a_recipe_url_with_credentials_is_refused_without_showing_them(tmp_path: Path) -> None:
    recipe = recipe_with(tmp_path)
    recipe.write_text(
        recipe.read_text()
        + 'source = { url = "https://me:tok-SECRET-55@src.example/e.tar.gz", sha256 = "'
        + "0" * 64
        + '", top = "e", dir = "src" }\n'
    )
    for extra in ([], ["--json"]):
        r = CliRunner().invoke(main, ["lock", str(recipe), "--out", str(tmp_path / "o"), *extra])
        assert r.exit_code == 2  # a recipe problem: a usage error
        assert "builds[0].source.url: expected an http(s) URL" in r.stdout + r.stderr  # refused by the recipe
        assert "tok-SECRET-55" not in r.stdout + r.stderr


def test_a_second_index_over_plain_http_is_refused_before_uv_runs(env: FakeServer, tmp_path: Path) -> None:
    recipe = recipe_with(tmp_path, "toydep==1.0")
    recipe.write_text(
        recipe.read_text() + 'index = { url = "http://mirror.example.org/simple", packages = ["toydep"] }\n'
    )
    r = CliRunner().invoke(main, ["lock", str(recipe), "--out", str(tmp_path / "o")])
    assert r.exit_code == 1
    assert "ERROR 1.0-cpu: the second index: refusing plain http to mirror.example.org" in r.stderr


def test_an_index_file_url_with_credentials_is_recorded_without_them() -> None:
    from lockbuild.fetch.index import parse_project_page

    page = {
        "files": [
            {
                "filename": "lkx-1.0-py3-none-any.whl",
                "url": "https://u:p-SECRET@files.example/lkx.whl",
                "hashes": {"sha256": "0" * 64},
            }
        ]
    }
    (f,) = parse_project_page(page, "https://idx.example/simple/lkx/", what="reading")
    assert f.url == "https://files.example/lkx.whl"


# settings and warnings ------------------------------------------------------------------------------------------
def test_no_library_module_reads_the_environment() -> None:
    """Flags and environment are read once, in the CLI, into settings; the library receives them."""
    import ast

    import lockbuild

    root = Path(lockbuild.__file__).parent
    readers = []
    for path in sorted(root.rglob("*.py")):
        site_cli = path.parent.name == "site" and path.name.startswith("cli")  # site/cli*.py
        if (
            path.name in ("cli.py", "commands/clikit.py") or path.parent.name == "commands" or site_cli
        ):  # the command line
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Attribute)
                and node.attr in ("environ", "environb", "getenv", "putenv", "unsetenv")
                and isinstance(node.value, ast.Name)
                and node.value.id == "os"
            ):
                readers.append(f"{path.relative_to(root)}:{node.lineno}")
    assert readers == []


def test_warnings_are_data_in_json_and_lines_in_text(env: FakeServer, tmp_path: Path) -> None:
    sdist = make_tar_gz(
        {
            "lkstatic-1.0/PKG-INFO": b"Metadata-Version: 2.2\nName: lkstatic\nVersion: 1.0\n",
            "lkstatic-1.0/pyproject.toml": b"[build-system]\nrequires = []\n",  # no build dependency to lock
        }
    )
    if not env.projects.get(("primary", "lkstatic")):
        env.publish("lkstatic-1.0.tar.gz", sdist, uploaded=day(1))
    recipe = recipe_with(tmp_path, "lkstatic==1.0")
    recipe.write_text(recipe.read_text() + 'build-on-node = ["lkstatic"]\n')
    r = CliRunner().invoke(main, ["lock", str(recipe), "--out", str(tmp_path / "o"), "--json"])
    assert r.exit_code == 0, r.stderr
    (lock,) = json.loads(r.stdout)["locks"]
    assert {p["name"]: p["file"] for p in lock["packages"]}["lkstatic"] == "lkstatic-1.0.tar.gz"
    assert any("come as sdists (lkstatic-1.0.tar.gz)" in w for w in lock["warnings"])
    r = CliRunner().invoke(main, ["lock", str(recipe), "--out", str(tmp_path / "o")])
    assert r.exit_code == 0 and "warning: 1 package(s) have no wheel" in r.stderr
