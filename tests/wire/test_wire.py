"""What every HTTP client accepts (``lockbuild/wire/rules.py``, ``wire/urls.py::redirect_problem``): bodies as stored,
never decoded (a zstd or gzip answer is refused unread, and no bound counts decoded bytes), and redirects to
https only (or to plain http on this machine from plain http on this machine). The JSON client, downloads
(through httpx and through libcurl) and the registry's connection are each tried against servers on 127.0.0.1.
"""

from __future__ import annotations

import ast
import gzip
import hashlib
import ssl
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import zstandard
from conftest import REPO_ROOT
from servers import FakeServer
from test_registry_transport import FAST, _Handler, fake, registry

from lockbuild.errors import FetchError, RemoteError
from lockbuild.fetch.cache import Cache
from lockbuild.fetch.fetcher import Fetcher, Wanted
from lockbuild.fetch.http import get_json, make_client
from lockbuild.registry.api import Registry, RegistryError, parse_ref
from lockbuild.wire.urls import InsecureTransportError, redirect_problem

PACKAGE = REPO_ROOT / "lockbuild"
BOMB_SIZE = 256 << 20


def zstd_bomb() -> bytes:
    """256 MiB of zeros as one zstd frame (a few KiB)."""
    zeros = b"\0" * (1 << 20)
    out = zstandard.ZstdCompressor(level=19).compressobj()
    parts = [out.compress(zeros) for _ in range(BOMB_SIZE >> 20)]
    return b"".join(parts) + out.flush()


@pytest.fixture(scope="module")
def bomb() -> bytes:
    data = zstd_bomb()
    assert len(data) < 64 << 10
    return data


@pytest.fixture
def server() -> Iterator[FakeServer]:
    s = FakeServer()
    yield s
    s.close()


# -- bodies as stored ------------------------------------------------------------------------------------


def test_a_zstd_bomb_from_the_hub_or_the_index_is_refused_unread_and_memory_stays_flat(
    server: FakeServer, bomb: bytes
) -> None:
    url = server.add_file("/api/models/o/m/revision/x", bomb, headers={"Content-Encoding": "zstd"})
    tracemalloc.start()
    try:
        with make_client() as client, pytest.raises(RemoteError) as err:
            get_json(client, url, what="asking the Hub")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "Content-Encoding 'zstd'" in err.value.message and "refused unread" in err.value.message
    assert err.value.tip is not None and "Accept-Encoding: identity" in err.value.tip
    assert peak < 16 << 20, f"peak {peak >> 20} MiB while refusing an 8 KiB answer"
    assert server.request_headers[-1][1]["accept-encoding"] == "identity"


def test_every_json_request_asks_for_the_body_as_stored_even_from_a_plain_client(server: FakeServer) -> None:
    url = server.add_file("/doc.json", b"{}")
    with httpx.Client() as client:  # not make_client's: get_json asks for identity itself
        assert get_json(client, url, what="reading") == ({}, url)
    assert server.request_headers[-1][1]["accept-encoding"] == "identity"


@pytest.mark.parametrize("transfer", ["curl", "httpx"])
def test_a_download_answered_with_gzip_is_refused_and_nothing_is_kept(
    server: FakeServer, tmp_path: Path, transfer: str
) -> None:
    data = b"x" * 100_000
    packed = gzip.compress(data)
    url = server.add_file("/files/a.tgz", packed, headers={"Content-Encoding": "gzip"})
    cache = Cache(tmp_path / "cache")
    with make_client() as client, pytest.raises(FetchError) as err:
        client.follow_redirects = True
        fetcher = Fetcher(cache, client, sleep=lambda _: None, transfer=transfer)  # type: ignore[arg-type]
        fetcher.fetch_all([Wanted(url, hashlib.sha256(data).hexdigest(), len(data), "a.tgz")])
    assert "Content-Encoding 'gzip'" in err.value.message, err.value.message
    assert err.value.tip is not None and "identity" in err.value.tip
    assert server.request_headers[-1][1]["accept-encoding"] == "identity"
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]


def test_the_registry_refuses_an_answer_with_a_content_encoding(bomb: bytes) -> None:
    def script(h: _Handler) -> None:
        h.answer(200, bomb, {"Content-Encoding": "zstd", "Content-Type": "application/vnd.oci.image.manifest.v1+json"})

    with fake(script) as server, registry(server) as reg, pytest.raises(RegistryError) as err:
        reg.get_manifest("1")
    assert "Content-Encoding 'zstd'" in err.value.message and server.host in err.value.message
    assert server.seen[0].headers["accept-encoding"] == "identity"


def _calls(path: Path) -> Iterator[tuple[str, ast.Call]]:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            yield node.func.attr, node


def test_no_client_reads_a_decoded_body_and_every_client_asks_for_identity() -> None:
    """Bodies are read as received (``iter_raw``), never decoded (``iter_bytes``, ``iter_text``, ``.json()``,
    ``.text``), and each ``httpx.Client`` lockbuild makes sends ``wire.RAW_BODY`` by default."""
    decoded = {"iter_bytes", "iter_text", "iter_lines", "json", "aread", "aiter_bytes"}
    clients = 0
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text()
        if "httpx" not in text:
            continue
        for name, call in _calls(path):
            assert name not in decoded or (name == "json" and "resp" not in ast.unparse(call.func)), (
                f"{path.relative_to(PACKAGE)} reads a decoded body: {ast.unparse(call)}"
            )
            if name == "Client" and ast.unparse(call.func) == "httpx.Client":
                clients += 1
                headers = next((k.value for k in call.keywords if k.arg == "headers"), None)
                assert headers is not None and "RAW_BODY" in ast.unparse(headers), (
                    f"{path.relative_to(PACKAGE)} makes a client that does not ask for the body as stored"
                )
        assert ".text\n" not in text and "resp.content" not in text
    assert clients == 2  # fetch/http.py::make_client and registry/client.py::Connection


# -- redirects -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "target", "allowed"),
    [
        ("https://hub.invalid/o/m/resolve/x/a", "https://cdn-lfs.invalid/a", True),
        ("https://hub.invalid/o/m/resolve/x/a", "http://127.0.0.1:8080/admin", False),
        ("https://hub.invalid/a", "http://localhost/admin", False),
        ("https://hub.invalid/a", "http://cdn.example/a", False),
        ("https://127.0.0.1:4443/a", "http://127.0.0.1:8080/a", False),  # an https origin, even on loopback
        ("http://127.0.0.1:9000/a", "http://127.0.0.1:9001/a", True),  # a test's fake Hub and its CDN
        ("http://index.corp/a", "http://127.0.0.1/a", False),  # plain http elsewhere, sent to this machine
        ("http://index.corp/a", "http://files.corp/a", True),  # under the opt-in, the transport rule decides
        ("http://127.0.0.1/a", "https://cdn.example/a", True),
    ],
)
def test_the_redirect_rule(source: str, target: str, allowed: bool) -> None:
    assert (redirect_problem(source, target) is None) is allowed


@pytest.fixture
def https_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[FakeServer, str]]:
    """A FakeServer behind TLS on 127.0.0.1 (its CA trusted through SSL_CERT_FILE), and its https base URL."""
    from test_sdist_metadata import make_ca_and_server_cert

    ca, cert, key = make_ca_and_server_cert(tmp_path)
    srv = FakeServer()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    srv.httpd.socket = ctx.wrap_socket(srv.httpd.socket, server_side=True)
    monkeypatch.setenv("SSL_CERT_FILE", str(ca))
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    yield srv, f"https://127.0.0.1:{srv.httpd.server_address[1]}"
    srv.close()


@pytest.mark.parametrize("transfer", ["curl", "httpx"])
def test_a_download_from_https_redirected_to_plain_http_on_this_machine_is_refused_before_it_is_sent(
    https_server: tuple[FakeServer, str], server: FakeServer, tmp_path: Path, transfer: str
) -> None:
    origin, base = https_server
    data = b"model weights" * 1000
    local = server.add_file("/admin/secret", data)
    origin.redirects["/o/m/resolve/x/w.safetensors"] = local
    with make_client() as client, pytest.raises(InsecureTransportError) as err:
        client.follow_redirects = True
        fetcher = Fetcher(Cache(tmp_path / "c"), client, sleep=lambda _: None, transfer=transfer)  # type: ignore[arg-type]
        fetcher.fetch_all(
            [Wanted(f"{base}/o/m/resolve/x/w.safetensors", hashlib.sha256(data).hexdigest(), len(data), "w")]
        )
    assert "from https to plain http" in err.value.message and "127.0.0.1" in err.value.message
    assert origin.requests == ["/o/m/resolve/x/w.safetensors"]  # the origin was asked (over TLS) ...
    assert server.requests == []  # ... and this machine's plain http service never was


def test_the_json_client_refuses_the_same_redirect(https_server: tuple[FakeServer, str], server: FakeServer) -> None:
    origin, base = https_server
    origin.redirects["/api/models/o/m"] = f"{server.url}/api/models/o/m"
    with make_client() as client, pytest.raises(InsecureTransportError, match="from https to plain http"):
        get_json(client, f"{base}/api/models/o/m", what="asking the Hub")
    assert server.requests == []


def test_a_registry_over_https_cannot_send_the_client_to_plain_http_on_this_machine(tmp_path: Path) -> None:
    from test_sdist_metadata import make_ca_and_server_cert

    ca, cert, key = make_ca_and_server_cert(tmp_path)
    with fake(lambda h: h.answer(200, b"{}")) as local:

        def script(h: _Handler) -> None:
            h.answer(307, b"", {"Location": f"http://{local.host}/v2/site/x/manifests/1"})

        with fake(script) as tls:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(cert, key)
            tls.socket = ctx.wrap_socket(tls.socket, server_side=True)
            reg = Registry(parse_ref(tls.ref()), ca_file=ca, transport=FAST)
            with reg, pytest.raises(RegistryError, match="from https to plain http"):
                reg.get_manifest("1")
            assert [s.path for s in tls.seen] == ["/v2/site/x/manifests/1"]
        assert local.seen == []
