"""Engine files beyond the lock: a source archive pinned by sha256, a GitHub release wheel and release
assets checked against the digests GitHub publishes, carried in the bundle and unpacked on install."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import ENGINE_MODULE, PLATFORM, PY, Keys, day
from servers import FakeServer, make_tar_gz, make_wheel

from lockbuild.cli import main

SOURCE = make_tar_gz(
    {
        "srcengine-2.0/requirements.txt": b"# runtime needs\ntoydep>=1.0\n",
        "srcengine-2.0/srcengine/model.py": b"WEIGHTS = 'tiny'\n",
    }
)


def zip_of(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in files.items():
            z.writestr(zipfile.ZipInfo(name, (2020, 1, 1, 0, 0, 0)), data)
    return buf.getvalue()


@pytest.fixture(scope="module")
def published(server: FakeServer) -> dict[str, str]:
    wheel_name, wheel = make_wheel(
        "relengine",
        "2.0",
        modules={"relengine/__init__.py": ENGINE_MODULE.format(version="2.0").replace("toyengine", "relengine")},
        scripts={"relengine": "relengine:main"},
        tag="py3-none-any",
    )
    # The release's engine on PyPI sets the cut-off; the wheel itself comes from the GitHub release.
    server.publish(*make_wheel("relengine", "2.0"), uploaded=day(5))
    server.add_release("acme/relengine", "v2.0", {wheel_name.replace("relengine-", "relengine-", 1): wheel})
    server.add_release(
        "acme/relengine",
        "bin-2.0",
        {"tools-linux.zip": zip_of({"bin/helper": b"#!/bin/sh\necho helper\n"}), "notes.txt": b"release notes\n"},
    )
    server.add_release("acme/relengine", "nodigest", {"tools-linux.zip": b"x"}, digests={"tools-linux.zip": None})
    url = server.add_file("/src/srcengine-2.0.tar.gz", SOURCE)
    return {"source_url": url, "source_sha": hashlib.sha256(SOURCE).hexdigest()}


def recipe(published: dict[str, str], *, assets_tag: str = "bin-2.0") -> str:
    return f'''
[engine]
name = "relengine"
pypi = "relengine"
repo = "acme/relengine"
binary = "relengine"
verify = ["relengine", "--version"]

[[builds]]
version = "2.0"
variant = "cpu"
python = "{PY}"
platform = "{PLATFORM}"
requirements = ["relengine==2.0"]
source = {{ url = "{published["source_url"]}", sha256 = "{published["source_sha"]}", top = "srcengine-2.0", dir = "src", requirements = "requirements.txt" }}
wheel = {{ repo = "acme/relengine", tag = "v2.0", prefix = "relengine-", suffix = "-py3-none-any.whl", project = "relengine" }}
assets = {{ tag = "{assets_tag}", dir = "share/relengine", files = ["tools-linux.zip", "notes.txt"] }}
'''


def cli(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return r.exit_code, r.stdout, r.stderr


def test_source_wheel_and_assets_round_trip(env, published, keys: Keys, tmp_path: Path) -> None:
    path = tmp_path / "relengine.toml"
    path.write_text(recipe(published))
    code, stdout, stderr = cli("build", str(path), "--key", str(keys.secret), "--out", str(tmp_path / "d"), "--json")
    assert code == 0, stderr
    bundle = Path(json.loads(stdout)["bundles"][0]["bundle"])
    files = {f["path"]: f for f in json.loads(cli("inspect", str(bundle), "--json")[1])["files"]}
    assert files["source/srcengine-2.0.tar.gz"]["sha256"] == published["source_sha"]
    assert files["assets/tools-linux.zip"]["kind"] == "asset"
    assert files["wheels/relengine-2.0-py3-none-any.whl"]["origin"].endswith(
        "/gh/acme/relengine/releases/download/v2.0/relengine-2.0-py3-none-any.whl"
    )
    assert "wheels/toydep-1.0-py3-none-any.whl" in files  # from the source archive's requirements file

    root = tmp_path / "engines"
    code, _, stderr = cli("install", str(bundle), "--root", str(root), "--trust", str(keys.trust))
    assert code == 0, stderr
    env_dir = root / "relengine" / "2.0-cpu"
    assert (env_dir / "src" / "srcengine" / "model.py").read_text() == "WEIGHTS = 'tiny'\n"
    assert (env_dir / "share" / "relengine" / "bin" / "helper").exists()
    assert (env_dir / "share" / "relengine" / "notes.txt").read_text() == "release notes\n"
    out = subprocess.run([str(env_dir / "bin" / "relengine"), "--version"], capture_output=True, text=True)
    assert out.stdout.strip() == "relengine 2.0"


def test_source_archive_with_the_wrong_digest_is_refused(env, published, keys: Keys, tmp_path: Path) -> None:
    path = tmp_path / "relengine.toml"
    path.write_text(recipe(published).replace(published["source_sha"], "0" * 64))
    out = tmp_path / "d"
    code, _, stderr = cli("build", str(path), "--key", str(keys.secret), "--out", str(out))
    assert code == 4 and "sha256 mismatch" in stderr
    assert not out.exists() or list(out.iterdir()) == []


def test_asset_without_a_published_digest_is_refused(env, published, keys: Keys, tmp_path: Path) -> None:
    path = tmp_path / "relengine.toml"
    path.write_text(
        recipe(published, assets_tag="nodigest").replace('"tools-linux.zip", "notes.txt"', '"tools-linux.zip"')
    )
    out = tmp_path / "d"
    code, _, stderr = cli("build", str(path), "--key", str(keys.secret), "--out", str(out))
    assert code == 4 and "publishes no digest" in stderr
    assert not out.exists() or list(out.iterdir()) == []
