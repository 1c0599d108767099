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
from registrykit import RealRegistry, binary
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


def _ranged(h: object, blob: bytes) -> None:
    """A good registry's answer: the blob, or from the byte a ``Range: bytes=N-`` asks (206)."""
    from test_registry_transport import _Handler

    assert isinstance(h, _Handler)
    asked = h.headers.get("Range", "")
    if asked.startswith("bytes="):
        start = int(asked.removeprefix("bytes=").rstrip("-"))
        h.answer(206, blob[start:], {"Content-Range": f"bytes {start}-{len(blob) - 1}/{len(blob)}"})
    else:
        h.answer(200, blob)


def _bad_mirror_leaves_half(art: Served, signer: Keys, store: Path, longest: str) -> None:
    """A pull from a bad mirror: half of ``longest`` in wrong bytes, the connection cut, then nothing."""

    def members(h: object) -> None:
        from test_registry_transport import _Handler

        assert isinstance(h, _Handler)
        digest = h.path.rsplit("/", 1)[1]
        if digest != longest:
            h.answer(200, art.blobs[digest])
        elif h.headers.get("Range"):
            h.answer(404, b'{"errors": [{"code": "BLOB_UNKNOWN", "message": "gone"}]}')
        else:
            size = len(art.blobs[digest])
            h.wfile.write(f"HTTP/1.1 200 OK\r\nContent-Length: {size}\r\n\r\n".encode() + b"\xee" * (size // 2))
            h.wfile.flush()
            h.close_connection = True

    with fake(serving(art, members=members)) as bad:
        r = cli("pull", bad.ref("site/x", "1.0-cpu"), "--store", store, "--trust", signer.trust)
    assert r.exit_code != 0, r.output
    partial = store / "tmp" / f"{longest.removeprefix('sha256:')}.partial"
    assert partial.read_bytes() == b"\xee" * (len(art.blobs[longest]) // 2)  # kept, to resume


@needs_registry
def test_a_partial_blob_a_bad_mirror_left_is_fetched_again_from_byte_0_once(
    tmp_path: Path, served: tuple[Served, Keys], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The next pull, from a good registry, resumes the wrong half, finds the whole wrong, discards it and
    asks once from byte 0: it succeeds, where it used to fail once with "damaged ... push again"."""
    art, signer = served
    longest = max((x["digest"] for x in json.loads(art.manifest)["layers"]), key=lambda d: len(art.blobs[d]))
    monkeypatch.setattr(oci, "DEFAULT_TRANSPORT", FAST)
    store = tmp_path / "store"
    _bad_mirror_leaves_half(art, signer, store, longest)
    with fake(serving(art, members=lambda h: _ranged(h, art.blobs[h.path.rsplit("/", 1)[1]]))) as good:  # type: ignore[attr-defined]
        r = cli("pull", good.ref("site/x", "1.0-cpu"), "--store", store, "--trust", signer.trust, "--json")
        asked = [s.headers.get("range") for s in good.seen if s.path.endswith(longest)]
    assert r.exit_code == 0, r.output
    assert asked == [f"bytes={len(art.blobs[longest]) // 2}-", None]  # resumed, then once from byte 0
    assert (store / "blobs" / "sha256" / longest.removeprefix("sha256:")).read_bytes() == art.blobs[longest]
    assert cli("store", "verify", "--store", store).exit_code == 0


@needs_registry
def test_a_registry_whose_blob_is_wrong_from_byte_0_is_still_refused_as_damaged(
    tmp_path: Path, served: tuple[Served, Keys], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fresh start is asked once: a registry that serves wrong bytes from byte 0 is blamed, as before."""
    art, signer = served
    longest = max((x["digest"] for x in json.loads(art.manifest)["layers"]), key=lambda d: len(art.blobs[d]))
    monkeypatch.setattr(oci, "DEFAULT_TRANSPORT", FAST)
    store = tmp_path / "store"
    _bad_mirror_leaves_half(art, signer, store, longest)
    wrong = b"\xee" * len(art.blobs[longest])

    def members(h: object) -> None:
        digest = h.path.rsplit("/", 1)[1]  # type: ignore[attr-defined]
        _ranged(h, wrong if digest == longest else art.blobs[digest])

    with fake(serving(art, members=members)) as evil:
        r = cli("pull", evil.ref("site/x", "1.0-cpu"), "--store", store, "--trust", signer.trust)
        asked = [s.headers.get("range") for s in evil.seen if s.path.endswith(longest)]
    assert r.exit_code == 4, r.output
    assert "is damaged" in r.output and "Push the build to the registry again" in r.output
    assert asked == [f"bytes={len(art.blobs[longest]) // 2}-", None]  # once from byte 0, no more
    assert not (store / "tmp" / f"{longest.removeprefix('sha256:')}.partial").exists()
