"""How a blob goes up (registry/api.py::Registry.upload_blob), against a small registry on 127.0.0.1 that
keeps what it is sent and checks each digest as a real one does: one monolithic PUT where the registry
takes it, the same bytes in PATCH chunks where it (or a proxy in front of it) refuses a body that large."""

from __future__ import annotations

import hashlib
import io
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest

import lockbuild.registry.api as oci
from lockbuild.registry.api import Registry, RegistryError, parse_ref


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Limited

    def log_message(self, *args: object) -> None:
        pass

    def _answer(self, status: int, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def do_POST(self) -> None:
        self._body()
        session = uuid.uuid4().hex
        self.server.sessions[session] = bytearray()
        self._answer(202, {"Location": f"/v2/site/x/blobs/uploads/{session}?_state=s"})

    def do_PATCH(self) -> None:
        body = self._body()
        self.server.requests.append(("PATCH", len(body)))
        if len(body) > self.server.limit:
            self._answer(413)
            return
        url = urlsplit(self.path)
        self.server.sessions[url.path.rsplit("/", 1)[1]] += body
        self._answer(202, {"Location": self.path})

    def do_PUT(self) -> None:
        body = self._body()
        self.server.requests.append(("PUT", len(body)))
        if len(body) > self.server.limit:
            self._answer(413)
            return
        url = urlsplit(self.path)
        data = bytes(self.server.sessions.pop(url.path.rsplit("/", 1)[1]) + body)
        digest = parse_qs(url.query)["digest"][0]
        if digest != "sha256:" + hashlib.sha256(data).hexdigest():
            self._answer(400)
            return
        self.server.blobs[digest] = data
        self._answer(201)


class Limited(ThreadingHTTPServer):
    """A registry that refuses (413) any request body over ``limit`` bytes, as a proxy in front of one may."""

    daemon_threads = True

    def __init__(self, limit: int) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.limit = limit
        self.sessions: dict[str, bytearray] = {}
        self.blobs: dict[str, bytes] = {}
        self.requests: list[tuple[str, int]] = []
        threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()


@contextmanager
def limited(limit: int) -> Iterator[tuple[Limited, Registry]]:
    server = Limited(limit)
    try:
        with Registry(parse_ref(f"oci://127.0.0.1:{server.server_address[1]}/site/x:1")) as reg:
            yield server, reg
    finally:
        server.shutdown()
        server.server_close()


DATA = bytes(range(256)) * 1200  # 300 KiB
DIGEST = "sha256:" + hashlib.sha256(DATA).hexdigest()


def test_a_blob_goes_up_in_one_put_where_the_registry_takes_it() -> None:
    with limited(1 << 30) as (server, reg):
        reg.upload_blob(DIGEST, io.BytesIO(DATA), len(DATA))
    assert server.blobs == {DIGEST: DATA}
    assert server.requests == [("PUT", len(DATA))]


def test_a_registry_that_refuses_a_large_body_gets_the_same_bytes_in_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(oci, "CHUNK_FALLBACK", 64 << 10)
    with limited(100 << 10) as (server, reg):
        sent: list[int] = []
        reg.upload_blob(DIGEST, io.BytesIO(DATA), len(DATA), progress=sent.append)
    assert server.blobs == {DIGEST: DATA}  # whole, and its digest checked by the registry
    assert server.requests[0] == ("PUT", len(DATA))  # refused (413) ...
    patches = [n for method, n in server.requests[1:] if method == "PATCH"]
    assert patches and max(patches) <= 64 << 10 and sum(patches) == len(DATA)  # ... then sent again in chunks
    assert server.requests[-1] == ("PUT", 0)


def test_a_large_blob_refused_in_its_chunks_is_sent_again_in_smaller_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(oci, "CHUNK_UPLOAD", 128 << 10)
    monkeypatch.setattr(oci, "CHUNK_FALLBACK", 32 << 10)
    with limited(100 << 10) as (server, reg):
        reg.upload_blob(DIGEST, io.BytesIO(DATA), len(DATA))
    assert server.blobs == {DIGEST: DATA}
    assert ("PATCH", 128 << 10) in server.requests and ("PATCH", 32 << 10) in server.requests


def test_a_registry_that_refuses_even_small_chunks_says_what_to_raise(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(oci, "CHUNK_FALLBACK", 64 << 10)
    with limited(10 << 10) as (server, reg), pytest.raises(RegistryError, match="too large") as err:
        reg.upload_blob(DIGEST, io.BytesIO(DATA), len(DATA))
    assert "client_max_body_size" in err.value.tip
    assert server.blobs == {}
