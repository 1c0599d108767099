"""lockbuild store index: a static package index of a store's wheels and sdists that stock pip and uv install
from inside the air gap, with the original index's upload times, signed and byte-identical on every export,
swapped into place whole, and refused where another user could change it."""

from __future__ import annotations

import dataclasses
import hashlib
import html.parser
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote, urljoin

import pytest
from conftest import TOY_RECIPE, Keys, day, make_keys
from hostile import UV_MEMBER
from servers import FakeServer, make_sdist, make_wheel
from sitekit import cli, make_bundle, sha

from lockbuild.bundle.manifest import Member
from lockbuild.bundle.manifestparse import parse_manifest
from lockbuild.errors import IntegrityError
from lockbuild.proc.uvtool import uv_binary
from lockbuild.site import export
from lockbuild.site.storage import Store

UV = (UV_MEMBER, b"PK uv wheel bytes", "tool")  # the bundled uv: never listed in the index
minisign = shutil.which("minisign")
needs_minisign = pytest.mark.skipif(minisign is None, reason="the minisign binary is not installed")


@dataclasses.dataclass(frozen=True)
class Built:
    store: Path
    bundle: Path
    as_of: str
    keys: Keys


@pytest.fixture(scope="module")
def built(server: FakeServer, keys: Keys, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Built]:
    """The toy engine built by `lockbuild build` from the local index (upload times day 1 and day 5), imported."""
    base = tmp_path_factory.mktemp("index-build")
    recipe = base / "toyengine.toml"
    recipe.write_text(TOY_RECIPE)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LOCKBUILD_INDEX_URL", server.index_url())
        mp.setenv("LOCKBUILD_GITHUB_API", server.github_api)
        mp.setenv("LOCKBUILD_GITHUB_DOWNLOAD", server.github_download)
        mp.setenv("LOCKBUILD_CACHE_DIR", str(base / "cache"))
        r = cli("build", recipe, "--key", keys.secret, "--out", base / "dist", "--json")
        assert r.exit_code == 0, r.output
        bundle = Path(json.loads(r.stdout)["bundles"][0]["bundle"])
        store = base / "store"
        r = cli("import", bundle, "--trust", keys.trust, "--store", store)
        assert r.exit_code == 0, r.output
    with Store(store) as s:
        as_of = s.build("toyengine/1.0-cpu").manifest.as_of
    yield Built(store, bundle, as_of.strftime("%Y-%m-%dT%H:%M:%SZ"), keys)


def index(store: Path, out: Path, *extra: str | Path) -> dict[str, object]:
    r = cli("store", "index", "--store", store, "--out", out, *extra, "--json")
    assert r.exit_code == 0, r.output
    return dict(json.loads(r.stdout))


class Anchors(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.anchors: list[dict[str, str | None]] = []
        self.meta: list[dict[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.anchors.append(dict(attrs))
        elif tag == "meta":
            self.meta.append(dict(attrs))


def parse_page(path: Path) -> Anchors:
    p = Anchors()
    p.feed(path.read_text())
    assert {"name": "pypi:repository-version", "content": "1.1"} in p.meta
    return p


def resolve(out: Path, page: Path, href: str) -> Path:
    """Where a relative href of ``page`` lands, as a client resolves it; it must stay inside ``out``."""
    assert "://" not in href and not href.startswith("/"), href
    url = urljoin(page.parent.as_uri() + "/", href.partition("#")[0])
    target = Path(unquote(url.removeprefix("file://"))).resolve()
    assert target.is_relative_to(out.resolve()), href
    return target


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def blob(store: Path, digest: str) -> bytes:
    return (store / "blobs" / "sha256" / digest).read_bytes()


# --- what the export holds -----------------------------------------------------------------------


def test_the_index_lists_every_wheel_with_the_original_upload_times(built: Built, tmp_path: Path) -> None:
    out = tmp_path / "pypi"
    before = time.time()
    done = index(built.store, out)
    assert done["builds"] == ["toyengine/1.0-cpu"] and done["without_upload_time"] == []
    with Store(built.store) as s:
        manifest = s.build("toyengine/1.0-cpu").manifest
    # the lock's upload times reach the signed manifest
    assert dict(manifest.upload_times) == {
        "wheels/toydep-1.0-py3-none-any.whl": "2025-01-01T00:00:00Z",
        "wheels/toyengine-1.0-py3-none-any.whl": "2025-01-05T00:00:00Z",
    }
    root = parse_page(out / "simple" / "index.html")
    assert sorted(a["href"] or "" for a in root.anchors) == ["toydep/", "toyengine/"]  # the bundled uv is not listed
    assert json.loads((out / "simple" / "index.json").read_text())["projects"] == [
        {"name": "toydep"},
        {"name": "toyengine"},
    ]
    members = {m.path.rpartition("/")[2]: m for m in manifest.members}
    for project, filename, uploaded in (
        ("toydep", "toydep-1.0-py3-none-any.whl", day(1)),
        ("toyengine", "toyengine-1.0-py3-none-any.whl", day(5)),
    ):
        page = out / "simple" / project / "index.html"
        (a,) = parse_page(page).anchors
        m = members[filename]
        href = a["href"] or ""
        assert href.endswith(f"#sha256={m.sha256}")
        file = resolve(out, page, href)
        assert file.read_bytes() == blob(built.store, m.sha256)
        metadata = file.with_name(file.name + ".metadata").read_bytes()
        assert metadata.startswith(b"Metadata-Version: ") and f"Name: {project}".encode() in metadata
        assert a["data-core-metadata"] == a["data-dist-info-metadata"] == f"sha256={sha(metadata)}"
        assert a["data-size"] == str(m.size)
        # the index's time, not the export's
        assert a["data-upload-time"] == uploaded.strftime("%Y-%m-%dT%H:%M:%SZ")
        assert uploaded.timestamp() < before
        doc = json.loads((page.parent / "index.json").read_text())
        assert doc["meta"] == {"api-version": "1.1"} and doc["name"] == project and doc["versions"] == ["1.0"]
        (f,) = doc["files"]
        assert f["filename"] == filename and f["hashes"] == {"sha256": m.sha256} and f["size"] == m.size
        assert f["upload-time"] == a["data-upload-time"]
        assert f["core-metadata"] == {"sha256": sha(metadata)}
        assert resolve(out, page, f["url"]) == file


def test_requires_python_is_carried_escaped(tmp_path: Path) -> None:
    keys = make_keys(tmp_path / "k")
    name, data = make_wheel("pyonly", "2.0")
    data = _with_requires_python(data, ">=3.9,<4")
    files = [("recipe.toml", b"[engine]\n", "recipe"), UV, (f"wheels/{name}", data, "wheel")]
    store = tmp_path / "store"
    bundle = make_bundle(tmp_path / "b", [keys.secret], files=files)
    assert cli("import", bundle, "--trust", keys.trust, "--store", store).exit_code == 0
    out = tmp_path / "pypi"
    index(store, out)
    text = (out / "simple" / "pyonly" / "index.html").read_text()
    assert 'data-requires-python="&gt;=3.9,&lt;4"' in text
    (f,) = json.loads((out / "simple" / "pyonly" / "index.json").read_text())["files"]
    assert f["requires-python"] == ">=3.9,<4"


def _with_requires_python(wheel: bytes, spec: str) -> bytes:
    import io
    import zipfile

    src = zipfile.ZipFile(io.BytesIO(wheel))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for info in src.infolist():
            data = src.read(info)
            if info.filename.endswith("/METADATA"):
                data += f"Requires-Python: {spec}\n".encode()
            z.writestr(info, data)
    return buf.getvalue()


def test_a_file_without_an_upload_time_is_listed_without_one_and_said(tmp_path: Path) -> None:
    keys = make_keys(tmp_path / "k")
    wname, wdata = make_wheel("torchish", "2.0", tag="cp311-cp311-linux_x86_64")
    sname, sdata = make_sdist("plainsdist", "1.0")
    files = [
        ("recipe.toml", b"[engine]\n", "recipe"),
        UV,
        (f"wheels/{wname}", wdata, "wheel"),
        (f"sdists/{sname}", sdata, "sdist"),
    ]
    store = tmp_path / "store"
    bundle = make_bundle(tmp_path / "b", [keys.secret], files=files)
    assert cli("import", bundle, "--trust", keys.trust, "--store", store).exit_code == 0
    out = tmp_path / "pypi"
    done = index(store, out)
    assert done["without_upload_time"] == [sname, wname]
    r = cli("store", "index", "--store", store, "--out", out)
    assert r.exit_code == 0 and "NOTE 2 file(s) have no upload time" in r.stderr and wname in r.stderr
    (a,) = parse_page(out / "simple" / "torchish" / "index.html").anchors
    assert "data-upload-time" not in a
    (f,) = json.loads((out / "simple" / "torchish" / "index.json").read_text())["files"]
    assert "upload-time" not in f
    (s,) = json.loads((out / "simple" / "plainsdist" / "index.json").read_text())["files"]
    assert s["filename"] == sname and "core-metadata" not in s  # an sdist: no METADATA beside it
    assert resolve(out, out / "simple" / "plainsdist" / "index.html", s["url"]).read_bytes() == sdata


def test_build_names_only_those_builds(tmp_path: Path) -> None:
    keys = make_keys(tmp_path / "k")
    store = tmp_path / "store"
    for version in ("1.0", "1.1"):
        name, data = make_wheel("toyengine", version)
        bundle = make_bundle(
            tmp_path / "b",
            [keys.secret],
            version=version,
            files=[("recipe.toml", f"# {version}\n".encode(), "recipe"), UV, (f"wheels/{name}", data, "wheel")],
        )
        assert cli("import", bundle, "--trust", keys.trust, "--store", store).exit_code == 0
    out = tmp_path / "pypi"
    assert index(store, out, "--build", "toyengine/1.1-cpu")["builds"] == ["toyengine/1.1-cpu"]
    assert json.loads((out / "simple" / "toyengine" / "index.json").read_text())["versions"] == ["1.1"]
    assert index(store, out)["files"] == 2
    assert json.loads((out / "simple" / "toyengine" / "index.json").read_text())["versions"] == ["1.0", "1.1"]
    r = cli("store", "index", "--store", store, "--out", out, "--build", "toyengine/9-cpu")
    assert r.exit_code != 0 and "holds no toyengine/9-cpu" in r.output


def test_one_file_name_with_two_contents_is_refused(tmp_path: Path) -> None:
    keys = make_keys(tmp_path / "k")
    store = tmp_path / "store"
    name, data = make_wheel("shared", "1.0")
    for version, wheel in (("1.0", data), ("1.1", data + b"\0")):
        bundle = make_bundle(
            tmp_path / "b",
            [keys.secret],
            version=version,
            files=[("recipe.toml", f"# {version}\n".encode(), "recipe"), UV, (f"wheels/{name}", wheel, "wheel")],
        )
        assert cli("import", bundle, "--trust", keys.trust, "--store", store).exit_code == 0
    out = tmp_path / "pypi"
    r = cli("store", "index", "--store", store, "--out", out)
    assert r.exit_code != 0 and f"both list {name}, with different contents" in r.output
    assert not out.exists() and [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    assert index(store, out, "--build", "toyengine/1.1-cpu")["files"] == 1


def test_copied_when_a_link_cannot_stand_in(built: Built, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "linked"
    assert index(built.store, out)["linked"] == 2  # on one file system the files are hard-linked from the store
    with Store(built.store) as s:
        m = s.build("toyengine/1.0-cpu").manifest.member("wheels/toydep-1.0-py3-none-any.whl")
    assert (out / "files" / "toydep-1.0-py3-none-any.whl").stat().st_ino == (
        built.store / "blobs" / "sha256" / m.sha256
    ).stat().st_ino
    monkeypatch.setattr(export.fsio, "link_under", lambda *a, **k: None)
    assert index(built.store, tmp_path / "copied")["linked"] == 0
    assert tree(tmp_path / "copied") == tree(out)


# --- uv and pip ----------------------------------------------------------------------------------


def _offline(argv: list[str]) -> list[str]:
    """No network at all where this user may make a network namespace (root); otherwise only offline."""
    return ["unshare", "-n", *argv] if os.geteuid() == 0 and shutil.which("unshare") else argv


def test_uv_installs_from_the_file_index_with_exclude_newer(built: Built, tmp_path: Path) -> None:
    out = tmp_path / "pypi"
    index(built.store, out)
    uv = str(uv_binary())
    venv = tmp_path / "venv"
    env = {"PATH": os.defpath, "HOME": str(tmp_path), "UV_NO_CONFIG": "1", "UV_CACHE_DIR": str(tmp_path / "uvc")}
    subprocess.run(
        _offline([uv, "venv", "-q", "--python", sys.executable, str(venv)]), env=env, check=True, timeout=120
    )
    ran = subprocess.run(
        _offline(
            [
                uv,
                "pip",
                "install",
                "--no-cache",
                "--python",
                str(venv / "bin" / "python"),
                "--index-url",
                (out / "simple").as_uri(),
                "--exclude-newer",
                built.as_of,
                "toyengine==1.0",
            ]
        ),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr
    assert (
        subprocess.run(
            [venv / "bin" / "toyengine", "--version"], capture_output=True, text=True, check=True
        ).stdout.strip()
        == "toyengine 1.0"
    )
    # uv reads the upload times: a cut-off before toyengine's upload leaves nothing to install
    early = subprocess.run(
        _offline(
            [
                uv,
                "pip",
                "install",
                "--no-cache",
                "--python",
                str(venv / "bin" / "python"),
                "--reinstall",
                "--index-url",
                (out / "simple").as_uri(),
                "--exclude-newer",
                "2025-01-03T00:00:00Z",
                "toyengine==1.0",
            ]
        ),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert early.returncode != 0 and "exclude-newer" in early.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_pip_installs_over_http_and_reads_the_metadata_files(built: Built, tmp_path: Path) -> None:
    out = tmp_path / "pypi"
    index(built.store, out)
    port = _free_port()
    log = tmp_path / "http.log"
    with log.open("wb") as logf:
        server = subprocess.Popen(
            [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", "--directory", str(out), str(port)],
            stdout=logf,
            stderr=subprocess.STDOUT,
        )
    try:
        for _ in range(100):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        env = {
            "PATH": os.defpath,
            "HOME": str(tmp_path),
            "PIP_CONFIG_FILE": os.devnull,
            "PIP_NO_INPUT": "1",
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        }
        ran = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--no-cache-dir",
                "--target",
                str(tmp_path / "t"),
                "--index-url",
                f"http://127.0.0.1:{port}/simple",
                "toyengine==1.0",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert (tmp_path / "t" / "toyengine" / "__init__.py").is_file() and (tmp_path / "t" / "toydep").is_dir()
    served = log.read_text()
    assert "GET /files/toyengine-1.0-py3-none-any.whl.metadata" in served, served
    assert re.search(r'"GET /files/toydep-1.0-py3-none-any.whl HTTP/1.[01]" 200', served), served


# --- signed and reproducible ---------------------------------------------------------------------


@needs_minisign
def test_a_signed_export_is_byte_identical_again_and_stock_tools_check_it(built: Built, tmp_path: Path) -> None:
    out = tmp_path / "pypi"
    first = index(built.store, out, "--key", built.keys.secret)
    assert first["signer"]
    once = tree(out)
    index(built.store, out, "--key", built.keys.secret)  # over the first: replaced whole
    assert tree(out) == once
    assert [p.name for p in tmp_path.iterdir()] == ["pypi"]  # no staging left beside it
    index(built.store, tmp_path / "plain")
    plain = tree(tmp_path / "plain")
    assert {k: v for k, v in once.items() if not k.startswith("SHA256SUMS")} == plain
    listed = (out / "SHA256SUMS").read_text().splitlines()
    assert sorted(line.split("  ", 1)[1] for line in listed) == sorted(plain)
    assert b"trusted comment: lockbuild package index SHA256SUMS" in once["SHA256SUMS.minisig"]
    ok = subprocess.run(
        [minisign, "-Vm", str(out / "SHA256SUMS"), "-p", str(built.keys.public)], capture_output=True, text=True
    )
    assert ok.returncode == 0, ok.stderr
    assert subprocess.run(["sha256sum", "--strict", "-c", "SHA256SUMS"], cwd=out, capture_output=True).returncode == 0
    # a changed file: sha256sum refuses it; a changed listing: minisign refuses that
    page = out / "simple" / "toydep" / "index.html"
    page.write_bytes(page.read_bytes().replace(b"toydep-1.0", b"toydep-6.6"))
    bad = subprocess.run(["sha256sum", "--strict", "-c", "SHA256SUMS"], cwd=out, capture_output=True, text=True)
    assert bad.returncode != 0 and "simple/toydep/index.html: FAILED" in bad.stdout
    sums = out / "SHA256SUMS"
    sums.write_text(sums.read_text().replace(sha(once["simple/toydep/index.html"]), sha(page.read_bytes())))
    refused = subprocess.run([minisign, "-Vm", str(sums), "-p", str(built.keys.public)], capture_output=True)
    assert refused.returncode != 0


# --- where it writes -----------------------------------------------------------------------------


def test_an_out_others_can_write_is_refused(built: Built, tmp_path: Path) -> None:
    out = tmp_path / "pypi"
    out.mkdir()
    out.chmod(0o777)
    r = cli("store", "index", "--store", built.store, "--out", out)
    assert r.exit_code != 0 and f"refused --out {out}" in r.output and "writable by its group or by others" in r.output
    assert list(out.iterdir()) == [] and [p.name for p in tmp_path.iterdir()] == ["pypi"]
    out.chmod(0o755)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # not sticky: another user could rename --out away and put theirs in its place
    r = cli("store", "index", "--store", built.store, "--out", shared / "pypi")
    assert r.exit_code != 0 and f"refused --out {shared / 'pypi'}: the directory {shared} above it" in r.output
    assert list(shared.iterdir()) == []


def test_a_planted_link_is_never_followed(built: Built, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("keep")
    out = tmp_path / "pypi"
    out.symlink_to(victim)
    r = cli("store", "index", "--store", built.store, "--out", out)
    assert r.exit_code != 0 and "is a symbolic link" in r.output
    out.unlink()
    index(built.store, out)
    for name in ("simple", "files"):  # a link inside an old index: replaced, never written through
        shutil.rmtree(out / name)
        (out / name).symlink_to(victim)
    index(built.store, out)
    assert [p.name for p in victim.iterdir()] == ["keep"] and (victim / "keep").read_text() == "keep"
    assert not (out / "simple").is_symlink() and (out / "simple" / "toydep" / "index.html").is_file()


def test_a_damaged_blob_is_refused_and_the_old_index_stays(built: Built, tmp_path: Path) -> None:
    out = tmp_path / "pypi"
    index(built.store, out)
    before = tree(out)
    store = tmp_path / "store"
    shutil.copytree(built.store, store)
    with Store(store) as s:
        m = s.build("toyengine/1.0-cpu").manifest.member("wheels/toydep-1.0-py3-none-any.whl")
    damaged = store / "blobs" / "sha256" / m.sha256
    damaged.chmod(0o644)
    damaged.write_bytes(damaged.read_bytes()[:-1] + b"X")
    r = cli("store", "index", "--store", store, "--out", out)
    assert r.exit_code == IntegrityError.exit_code and "its signed manifest says" in r.output
    assert tree(out) == before and sorted(p.name for p in tmp_path.iterdir()) == ["pypi", "store"]


# --- the manifest's record -----------------------------------------------------------------------


def test_the_manifest_carries_upload_times_readers_before_it_pass_over(tmp_path: Path) -> None:
    from hostile import manifest

    members = (
        Member("recipe.toml", 1, sha(b"r"), "recipe"),
        Member(UV_MEMBER, 1, sha(b"u"), "tool"),
        Member("wheels/a-1-py3-none-any.whl", 1, sha(b"a"), "wheel"),
    )
    m = manifest(members, upload_times=(("wheels/a-1-py3-none-any.whl", "2025-01-01T00:00:00Z"),))
    raw = m.to_toml()
    assert b'upload-time = "2025-01-01T00:00:00Z"' in raw
    assert parse_manifest(raw).upload_times == m.upload_times
    assert parse_manifest(manifest(members).to_toml()).upload_times == ()
    for bad in (b'upload-time = "2025-01-01"', b'upload-time = "2025-01-01T01:00:00+01:00"', b"upload-time = 5"):
        with pytest.raises(IntegrityError, match="upload-time"):
            parse_manifest(raw.replace(b'upload-time = "2025-01-01T00:00:00Z"', bad))
    on_recipe = raw.replace(b'kind = "recipe"', b'kind = "recipe"\nupload-time = "2025-01-01T00:00:00Z"', 1)
    with pytest.raises(IntegrityError, match="only wheels and sdists"):
        parse_manifest(on_recipe)
    assert hashlib.sha256(raw).hexdigest() != hashlib.sha256(manifest(members).to_toml()).hexdigest()


def test_the_site_wing_never_holds_a_secret_key() -> None:
    """The index is signed by the signing process only (trust/sign.py::sign_in_fresh_process): no module of
    the site wing reads a secret key or signs with one itself."""
    import ast

    import lockbuild

    site = Path(lockbuild.__file__).parent / "site"
    forbidden = {"read_secret_key", "SecretKey", "sign_prehashed", "sign_statement", "sign_bundle", "signproc"}
    found = {}
    for path in sorted(site.glob("*.py")):
        nodes = list(ast.walk(ast.parse(path.read_text())))
        names = {n.id for n in nodes if isinstance(n, ast.Name)} | {
            n.attr for n in nodes if isinstance(n, ast.Attribute)
        }
        names |= {
            a.name.rpartition(".")[2] for n in nodes if isinstance(n, ast.ImportFrom | ast.Import) for a in n.names
        }
        if hits := sorted(names & forbidden):
            found[path.name] = hits
    assert found == {}, "sign through lockbuild.trust.sign.sign_in_fresh_process"
    assert "sign_in_fresh_process" in (site / "export.py").read_text()
