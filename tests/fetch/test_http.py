"""Bounded JSON answers from the index and the release API: anything unusable is a RemoteError."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler

import httpx
import pytest
from servers import FakeServer, QuietHTTPServer, Served

from lockbuild.errors import RemoteError
from lockbuild.fetch.http import MAX_JSON_BYTES, get_json, make_client

MiB = 1 << 20


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with make_client() as c:
        yield c


def test_valid_json_is_read(srv: FakeServer, client: httpx.Client) -> None:
    srv.raw_pages["/doc"] = b'{"files": [1, 2]}'
    assert get_json(client, f"{srv.url}/doc", what="reading") == ({"files": [1, 2]}, f"{srv.url}/doc")


def test_same_host_redirect_is_followed(srv: FakeServer, client: httpx.Client) -> None:
    srv.raw_pages["/new"] = b"[]"
    srv.redirects["/old"] = "/new"
    assert get_json(client, f"{srv.url}/old", what="reading") == ([], f"{srv.url}/new")


@pytest.mark.parametrize("body", [b"<html>not json</html>", b'{"a": ', b"\xff\xfe{}"])
def test_invalid_json_is_refused(srv: FakeServer, client: httpx.Client, body: bytes) -> None:
    srv.raw_pages["/doc"] = body
    with pytest.raises(RemoteError, match=rf"^reading the index: {srv.url}/doc did not answer valid JSON"):
        get_json(client, f"{srv.url}/doc", what="reading the index")


def test_redirect_to_another_host_is_refused(srv: FakeServer, client: httpx.Client) -> None:
    other = FakeServer()
    try:
        other.raw_pages["/doc"] = b"{}"
        srv.redirects["/doc"] = f"{other.url}/doc"
        with pytest.raises(RemoteError, match=r"redirected to another host \(127\.0\.0\.1:\d+\)") as err:
            get_json(client, f"{srv.url}/doc", what="reading")
        assert err.value.tip is not None and "LOCKBUILD_INDEX_URL" in err.value.tip
        assert other.requests == []  # never asked
    finally:
        other.close()


def test_a_redirect_no_parser_can_read_is_the_servers_error(srv: FakeServer, client: httpx.Client) -> None:
    srv.redirects["/doc"] = "http://[127.0.0.1/doc"
    with pytest.raises(RemoteError, match=r"which is not a readable URL") as err:
        get_json(client, f"{srv.url}/doc", what="reading")
    assert err.value.tip is not None and "malformed" in err.value.tip


def test_redirect_loop_is_refused(srv: FakeServer, client: httpx.Client) -> None:
    srv.redirects["/a"] = "/b"
    srv.redirects["/b"] = "/a"
    with pytest.raises(RemoteError, match=r"redirected more than 5 times"):
        get_json(client, f"{srv.url}/a", what="reading")


def test_oversized_body_is_refused_before_reading_it(srv: FakeServer, client: httpx.Client) -> None:
    sent = [0]

    def endless() -> Iterator[bytes]:
        while True:
            sent[0] += MiB
            yield b" " * MiB

    srv.files["/huge.json"] = Served(endless, 1 << 40)
    with pytest.raises(RemoteError, match=rf"sent more than {MAX_JSON_BYTES} bytes; expected a JSON document"):
        get_json(client, f"{srv.url}/huge.json", what="reading")
    assert sent[0] < MAX_JSON_BYTES


def test_body_over_a_small_limit_is_refused(srv: FakeServer, client: httpx.Client) -> None:
    srv.raw_pages["/doc"] = b"[" + b"0," * 1000 + b"0]"
    with pytest.raises(RemoteError, match=r"sent more than 1000 bytes"):
        get_json(client, f"{srv.url}/doc", what="reading", limit=1000)


class _Unannounced(BaseHTTPRequestHandler):
    """A JSON-looking body with no Content-Length that never ends (or, with ``total``, ends after that many
    bytes, closing the connection)."""

    sent = 0
    total: int | None = None

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.close_connection = True
        total = type(self).total
        try:
            self.wfile.write(b"[")
            while total is None or type(self).sent + (64 << 10) < total:
                self.wfile.write(b"0," * (32 << 10))
                type(self).sent += 64 << 10
            if total is not None:
                self.wfile.write(b"0]")
        except OSError:
            return


def test_a_finite_body_without_a_length_longer_than_the_limit_is_refused() -> None:
    """Two MiB of valid JSON with no Content-Length, against a one-MiB limit: refused, not parsed."""
    _Unannounced.sent, _Unannounced.total = 0, 2 * MiB
    httpd = QuietHTTPServer(("127.0.0.1", 0), _Unannounced)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        with make_client() as c, pytest.raises(RemoteError, match=r"sent more than 1048576 bytes"):
            get_json(c, f"http://127.0.0.1:{httpd.server_address[1]}/x", what="reading", limit=MiB)
    finally:
        _Unannounced.total = None
        httpd.shutdown()
        httpd.server_close()


def test_endless_body_without_a_length_is_refused() -> None:
    _Unannounced.sent = 0
    httpd = QuietHTTPServer(("127.0.0.1", 0), _Unannounced)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        with make_client() as c, pytest.raises(RemoteError, match=r"sent more than 1048576 bytes"):
            get_json(c, f"http://127.0.0.1:{httpd.server_address[1]}/x", what="reading", limit=MiB)
        assert _Unannounced.sent < 64 * MiB
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_not_found_uses_the_callers_message(srv: FakeServer, client: httpx.Client) -> None:
    with pytest.raises(RemoteError, match=r"^no such project$"):
        get_json(client, f"{srv.url}/nothing", what="reading", not_found="no such project")
    with pytest.raises(RemoteError, match=r"answered HTTP 404; expected 200"):
        get_json(client, f"{srv.url}/nothing", what="reading")


def test_server_error_and_unreachable_host_are_remote_errors(srv: FakeServer, client: httpx.Client) -> None:
    srv.add_file("/busy", b"x", fail_first=1)
    with pytest.raises(RemoteError, match=r"answered HTTP 500; expected 200"):
        get_json(client, f"{srv.url}/busy", what="reading")
    with pytest.raises(RemoteError, match=r"^reading: cannot reach http://127.0.0.1:9/x: ConnectError"):
        get_json(client, "http://127.0.0.1:9/x", what="reading")


@pytest.mark.parametrize("url", ["127.0.0.1:9/simple", "ftp://127.0.0.1/x", "http://[::1/x"])
def test_malformed_address_is_a_remote_error(client: httpx.Client, url: str) -> None:
    with pytest.raises(RemoteError, match=r"cannot reach"):
        get_json(client, url, what="reading")


def test_a_connection_reset_once_is_asked_again_and_twice_is_an_error() -> None:
    """A kept-alive connection the server closes as it is reused resets the GET: asked once more, on a
    new connection; a server that resets every time is a RemoteError naming it, never a hang."""
    import socket
    import struct
    import threading

    import httpx as _httpx

    from lockbuild.errors import RemoteError
    from lockbuild.fetch.http import get_json

    def serve(resets: int) -> tuple[str, threading.Thread]:
        lsock = socket.socket()
        lsock.bind(("127.0.0.1", 0))
        lsock.listen(8)

        def run() -> None:
            for n in range(3):
                conn, _ = lsock.accept()
                conn.recv(65536)
                if n < resets:
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    conn.close()  # RST
                    continue
                body = b'{"ok": 1}'
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                    + str(len(body)).encode()
                    + b"\r\nConnection: close\r\n\r\n"
                    + body
                )
                conn.close()
                break
            lsock.close()

        t = threading.Thread(target=run, daemon=True)
        t.start()
        return f"http://127.0.0.1:{lsock.getsockname()[1]}/x.json", t

    url, t = serve(resets=1)
    with _httpx.Client(timeout=5) as client:
        data, _ = get_json(client, url, what="the test answer")
    assert data == {"ok": 1}
    t.join(5)
    url, t = serve(resets=3)
    with _httpx.Client(timeout=5) as client, pytest.raises(RemoteError, match="cannot reach"):
        get_json(client, url, what="the test answer")
