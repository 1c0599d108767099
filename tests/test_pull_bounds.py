"""A registry that serves a blob longer than the signed manifest says: the pull stops reading at the
signed size, whatever the registry keeps sending, and refuses the blob as longer than signed."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from conftest import Keys, make_keys
from registry import RealRegistry, binary
from sitekit import cli, make_bundle
from test_registry_transport import FAST, Served, fake, serving

import lockbuild.registry.api as oci
from lockbuild.registry.api import OCI_MANIFEST

needs_registry = pytest.mark.skipif(binary() is None, reason="docker-registry is not installed (scripts/test does)")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, Keys]]:
    if binary() is None:
        pytest.skip("docker-registry is not installed")
    signer = make_keys(tmp_path_factory.mktemp("pull-bounds-keys"))
    bundle = make_bundle(tmp_path_factory.mktemp("pull-bounds-bundle"), [signer.secret], version="1.0")
    reg = RealRegistry(tmp_path_factory.mktemp("pull-bounds-registry"))
    try:
        assert cli("push", bundle, reg.ref("site/served", "1.0-cpu"), "--trust", signer.trust).exit_code == 0
        base = f"http://{reg.host}/v2/site/served"
        manifest = httpx.get(f"{base}/manifests/1.0-cpu", headers={"Accept": OCI_MANIFEST}).content
        doc = json.loads(manifest)
        out = Served(manifest)
        for d in [doc["config"]["digest"], *(x["digest"] for x in doc["layers"])]:
            out.blobs[d] = httpx.get(f"{base}/blobs/{d}").content
    finally:
        reg.close()
    yield out, signer


@needs_registry
def test_a_blob_served_longer_than_signed_is_cut_off_and_refused(
    tmp_path: Path, served: tuple[Served, Keys], monkeypatch: pytest.MonkeyPatch
) -> None:
    art, signer = served
    layers = [x["digest"] for x in json.loads(art.manifest)["layers"]]
    longest = max(layers, key=lambda d: len(art.blobs[d]))

    def members(h: object) -> None:
        from test_registry_transport import _Handler

        assert isinstance(h, _Handler)
        digest = h.path.rsplit("/", 1)[1]
        if digest != longest:
            h.answer(200, art.blobs[digest])
            return
        # the signed bytes, then more for as long as the client reads (no length: to the connection's end)
        h.wfile.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + art.blobs[digest])
        h.close_connection = True
        while True:
            h.wfile.write(b"x" * 65536)
            h.wfile.flush()
            time.sleep(0.01)

    monkeypatch.setattr(oci, "DEFAULT_TRANSPORT", FAST)
    store = tmp_path / "store"
    with fake(serving(art, members=members)) as server:
        t0 = time.monotonic()
        r = cli("pull", server.ref("site/x", "1.0-cpu"), "--store", store, "--trust", signer.trust)
        took = time.monotonic() - t0
    assert r.exit_code == 4, r.output
    assert f"({longest}) is longer than the signed {len(art.blobs[longest])} bytes; refused" in r.output
    assert took < 1.8, took  # cut off at the signed size, not read on until the blob's deadline
    assert not (store / "builds").exists() or list((store / "builds").iterdir()) == []
    # no partial of the longer blob is kept (another blob's, stopped mid-way by this failure, may stay to resume)
    assert f"{longest.removeprefix('sha256:')}.partial" not in [p.name for p in (store / "tmp").iterdir()]
