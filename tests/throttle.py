"""A throttling reverse proxy on 127.0.0.1, in front of a real registry: what a busy registry, a mirror
under load, or a rate-limiting load balancer answers.

``Throttle(upstream, rule)`` forwards every request to ``upstream`` (``127.0.0.1:PORT``), keeping the
client's Host header so the registry's upload locations point back at the proxy, unless ``rule``
refuses it: ``rule(method, path, n)`` (``n``: how many times this method and path were asked before)
returns ``(status, headers)`` to answer instead (with distribution's JSON error body), ``(CUT, {})`` to
forward the answer's headers and only half its body, then close the connection, or None to forward. ``refused`` lists what was refused; bodies stream through in 1 MiB pieces. The bench's
``fanout`` scenario uses it too.
"""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

Refusal = tuple[int, dict[str, str]]
CUT = 0  # a "status" of the rule: forward, then break the body off halfway
Rule = Callable[[str, str, int], Refusal | None]
_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection"}
_CODES = {
    429: ("TOOMANYREQUESTS", "too many requests"),
    502: ("UNAVAILABLE", "bad gateway"),
    503: ("UNAVAILABLE", "service unavailable"),
    504: ("UNAVAILABLE", "gateway timeout"),
}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Throttle

    def log_message(self, *args: object) -> None:
        pass

    def handle(self) -> None:
        try:
            super().handle()
        except ConnectionError:  # a client closed its kept-alive connection: nothing to report
            self.close_connection = True

    def _any(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        refusal = self.server.judge(self.command, self.path, self.headers.get("Range"))
        if refusal is not None and refusal[0] == CUT:
            self._forward(body, cut=True)
            return
        if refusal is not None:
            status, headers = refusal
            code, message = _CODES.get(status, ("DENIED", "refused"))
            data = json.dumps({"errors": [{"code": code, "message": message}]}).encode()
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
            return
        self._forward(body)

    def _forward(self, body: bytes, *, cut: bool = False) -> None:
        host, port = self.server.upstream.rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=60)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
            conn.request(
                self.command,
                self.path,
                body=body if body or self.command in ("PUT", "POST", "PATCH") else None,
                headers=headers,
            )
            r = conn.getresponse()
            self.send_response(r.status)
            for k, v in r.getheaders():
                if k.lower() not in _HOP and k.lower() != "content-length":
                    self.send_header(k, v)
            length = r.getheader("Content-Length")
            if self.command == "HEAD" or r.status in (204, 304) or length is None:
                data = b"" if self.command == "HEAD" else r.read()
                self.send_header("Content-Length", length if self.command == "HEAD" and length else str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            self.send_header("Content-Length", length)
            self.end_headers()
            if cut:
                self.wfile.write(r.read(int(length) // 2))
                self.wfile.flush()
                self.close_connection = True
                return
            while piece := r.read(1 << 20):
                self.wfile.write(piece)
        except OSError:
            self.close_connection = True
        finally:
            conn.close()

    do_GET = do_HEAD = do_PUT = do_POST = do_PATCH = do_DELETE = _any


class Throttle(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # many nodes connect at once (socketserver's default backlog is 5)

    def __init__(self, upstream: str, rule: Rule) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.upstream = upstream
        self.rule = rule
        self.host = f"127.0.0.1:{self.server_address[1]}"
        self.refused: list[tuple[str, str, int]] = []
        self.forwarded: list[tuple[str, str, str | None]] = []  # method, path, Range
        self._seen: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def ref(self, repo: str, tag: str) -> str:
        return f"oci://{self.host}/{repo}:{tag}"

    def judge(self, method: str, path: str, range_: str | None = None) -> Refusal | None:
        with self._lock:
            n = self._seen.get((method, path), 0)
            self._seen[(method, path)] = n + 1
            refusal = self.rule(method, path, n)
            if refusal is None or refusal[0] == CUT:
                self.forwarded.append((method, path, range_))
            else:
                self.refused.append((method, path, refusal[0]))
            return refusal

    def close(self) -> None:
        self.shutdown()
        self.server_close()
