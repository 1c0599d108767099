"""push --jobs against a real registry (Debian's docker-registry): blobs go up several at a time, each
only once the one extraction has held it to the signed manifest, and the tag is written last, so a push
that is refused half way leaves no tag naming a build whose blobs are not all there."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from conftest import Keys, make_keys
from registrykit import RealRegistry, binary
from sitekit import cli, files_for, make_bundle

pytestmark = pytest.mark.skipif(binary() is None, reason="docker-registry is not installed (scripts/test does)")
ACCEPT = {"Accept": "application/vnd.oci.image.manifest.v1+json"}


@pytest.fixture(scope="module")
def reg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealRegistry]:
    r = RealRegistry(tmp_path_factory.mktemp("registry"))
    yield r
    r.close()


@pytest.fixture(scope="module")
def signer(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    return make_keys(tmp_path_factory.mktemp("keys"))


def _store(tmp_path: Path, signer: Keys, count: int) -> Path:
    files = files_for("3.0") + [
        (f"wheels/w{i}-1.0-py3-none-any.whl", bytes([i]) * (5000 + i), "wheel") for i in range(count)
    ]
    bundle = make_bundle(tmp_path / "b", [signer.secret], version="3.0", files=files)
    store = tmp_path / "store"
    assert cli("import", bundle, "--trust", signer.trust, "--store", store).exit_code == 0
    return store


def test_push_with_jobs_uploads_every_blob_once_and_pull_checks_them(
    tmp_path: Path, reg: RealRegistry, signer: Keys
) -> None:
    store = _store(tmp_path, signer, 12)
    target = reg.ref("jobs/toyengine", "3.0-cpu")
    reg.mark()
    r = cli("push", "toyengine/3.0-cpu", "--store", store, target, "--trust", signer.trust, "--jobs", "5", "--json")
    assert r.exit_code == 0, r.output
    done = json.loads(r.stdout)
    assert done["uploaded"] == done["blobs"] >= 12
    puts = [q for q in reg.requests() if q.method == "PUT" and "/blobs/uploads/" in q.path]
    assert len(puts) == done["blobs"] + 1 and all(q.status == 201 for q in puts)  # the members and the config
    r = cli("pull", target, "--store", tmp_path / "pulled", "--trust", signer.trust, "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["fetched"] == done["blobs"], r.output
    again = cli("push", "toyengine/3.0-cpu", "--store", store, target, "--trust", signer.trust, "--json")
    assert again.exit_code == 0 and json.loads(again.stdout)["uploaded"] == 0


def test_a_push_refused_half_way_writes_no_tag(tmp_path: Path, reg: RealRegistry, signer: Keys) -> None:
    store = _store(tmp_path, signer, 12)
    blob = sorted((store / "blobs" / "sha256").iterdir(), key=lambda p: -p.stat().st_size)[0]
    data = bytearray(blob.read_bytes())
    data[-1] ^= 1
    blob.chmod(0o644)
    blob.write_bytes(bytes(data))
    target = reg.ref("halfway/toyengine", "3.0-cpu")
    r = cli("push", "toyengine/3.0-cpu", "--store", store, target, "--trust", signer.trust, "--jobs", "4")
    assert r.exit_code == 4 and "has sha256" in r.output, r.output
    base = f"http://{reg.host}/v2/halfway/toyengine"
    assert httpx.head(f"{base}/blobs/sha256:{blob.name}").status_code == 404  # never uploaded
    assert httpx.get(f"{base}/manifests/3.0-cpu", headers=ACCEPT).status_code == 404  # and no tag names the build
