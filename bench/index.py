"""A static package index on 127.0.0.1 for the benchmark: PEP 691 JSON (or PEP 503 HTML) project pages
with PEP 700 upload times and PEP 658 metadata, and the files themselves sent with sendfile(2).

It counts the file bytes it sends, so a run can show that a warm rebuild downloaded nothing. One
server process per workload; every client (lockbuild, uv, pip, curl) talks to the same one.
"""

from __future__ import annotations

import html
import json
import os
import threading
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

from bench.workload import WheelFile

UPLOAD_TIME = "2025-01-01T00:00:00.000000Z"
JSON_TYPE = "application/vnd.pypi.simple.v1+json"


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that hangs up early (pip, curl on error) is not the benchmark's business


class StaticIndex:
    def __init__(self, files_dir: Path, files: Sequence[WheelFile], *, pep658: bool = True) -> None:
        self.files_dir = files_dir
        self.pep658 = pep658  # False: pages list no METADATA files (as some mirrors and private indexes)
        self.by_project: dict[str, list[WheelFile]] = {}
        for f in files:
            self.by_project.setdefault(f.project, []).append(f)
        self.sizes = {f.filename: f.size for f in files}
        self.names = set(self.sizes)
        self._lock = threading.Lock()
        self.bytes_sent = 0
        self.file_gets = 0
        self.httpd = _Server(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="bench-index", daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    @property
    def index_url(self) -> str:
        return f"{self.url}/simple"

    def file_url(self, filename: str) -> str:
        return f"{self.url}/files/{filename}"

    def counters(self) -> tuple[int, int]:
        with self._lock:
            return self.file_gets, self.bytes_sent

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def _count(self, gets: int, sent: int) -> None:
        with self._lock:
            self.file_gets += gets
            self.bytes_sent += sent

    # pages -------------------------------------------------------------------------------------
    def page_json(self, project: str) -> bytes:
        files = [
            {
                "filename": f.filename,
                "url": f"/files/{f.filename}",
                "hashes": {"sha256": f.sha256},
                "size": f.size,
                "upload-time": UPLOAD_TIME,
                **(
                    {
                        "core-metadata": {"sha256": f.metadata_sha256},
                        "data-dist-info-metadata": {"sha256": f.metadata_sha256},
                    }
                    if self.pep658
                    else {}
                ),
            }
            for f in self.by_project[project]
        ]
        versions = sorted({f.version for f in self.by_project[project]})
        doc = {"meta": {"api-version": "1.1"}, "name": project, "versions": versions, "files": files}
        return json.dumps(doc).encode()

    def page_html(self, project: str) -> bytes:
        links = "".join(
            f'<a href="/files/{html.escape(f.filename)}#sha256={f.sha256}"'
            + (
                f' data-core-metadata="sha256={f.metadata_sha256}" data-dist-info-metadata="sha256={f.metadata_sha256}"'
                if self.pep658
                else ""
            )
            + f">{html.escape(f.filename)}</a><br>\n"
            for f in self.by_project[project]
        )
        return f"<!DOCTYPE html><html><body>\n{links}</body></html>\n".encode()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        index = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # TCP_NODELAY, as production servers set: without it, Nagle holds a response's body until the
            # client acknowledges its headers, and delayed ACKs make that 40 ms per request.
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: object) -> None:
                pass

            def _send(self, code: int, body: bytes, ctype: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def do_HEAD(self) -> None:
                self.do_GET()

            def do_GET(self) -> None:
                parts = [p for p in unquote(urlsplit(self.path).path).split("/") if p]
                if len(parts) == 2 and parts[0] == "simple":
                    project = parts[1]
                    if project not in index.by_project:
                        self._send(404, b"not found", "text/plain")
                    elif JSON_TYPE in self.headers.get("Accept", ""):
                        self._send(200, index.page_json(project), JSON_TYPE)
                    else:
                        self._send(200, index.page_html(project), "text/html")
                    return
                if len(parts) == 2 and parts[0] == "files":
                    name = parts[1]
                    base = name.removesuffix(".metadata")
                    if base in index.names:
                        self._file(index.files_dir / name, count=name == base)
                        return
                self._send(404, b"not found", "text/plain")

            def _file(self, path: Path, *, count: bool) -> None:
                with path.open("rb") as f:
                    size = os.fstat(f.fileno()).st_size
                    start, end = 0, size
                    rng = self.headers.get("Range", "")
                    if rng.startswith("bytes="):
                        lo, _, hi = rng[6:].partition("-")
                        if lo:
                            start, end = int(lo), min(size, int(hi) + 1) if hi else size
                        else:
                            start = max(0, size - int(hi))
                        self.send_response(206)
                        self.send_header("Content-Range", f"bytes {start}-{end - 1}/{size}")
                    else:
                        self.send_response(200)
                    self.send_header("Content-Type", "application/octet-stream")
                    self.send_header("Content-Length", str(end - start))
                    self.send_header("Accept-Ranges", "bytes")
                    self.end_headers()
                    if self.command == "HEAD":
                        return
                    sent = 0
                    try:
                        while start + sent < end:
                            n = os.sendfile(self.connection.fileno(), f.fileno(), start + sent, end - start - sent)
                            if n == 0:
                                break
                            sent += n
                    except (BrokenPipeError, ConnectionResetError):
                        self.close_connection = True
                    if count:
                        index._count(1, sent)

        return Handler
