"""Local servers for the tests, on 127.0.0.1: a PEP 691/700 index, a second index without upload
times (like PyTorch's), a fake of GitHub's release API that publishes asset digests, and, for the
indexes named in ``pep740``, a fake of PyPI's integrity API (PEP 740 provenance).

Files are registered with optional faults so tests can drop connections, corrupt bytes, answer
500 first, ignore Range, or send endless bodies.
"""

from __future__ import annotations

import base64
import csv
import datetime as dt
import gzip
import hashlib
import io
import json
import sys
import tarfile
import threading
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

from packaging.utils import canonicalize_name


class QuietHTTPServer(ThreadingHTTPServer):
    """A test server that stays silent when a client hangs up early (tests do that on purpose)."""

    request_queue_size = 128  # lockbuild opens many connections at once; socketserver's default is 5

    def handle_error(self, request: object, client_address: object) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionResetError, BrokenPipeError, ConnectionAbortedError, TimeoutError)):
            return
        super().handle_error(request, client_address)  # type: ignore[arg-type]


@dataclass
class Served:
    data: bytes | Callable[[], Iterator[bytes]]
    size: int
    drop_after: int | None = None  # close the connection after this many body bytes, once
    fail_first: int = 0  # answer 500 this many times first
    ignore_range: bool = False
    corrupt_at: int | None = None  # flip one byte at this offset
    hits: int = 0
    ranges: list[str] = field(default_factory=list)


@dataclass
class IndexEntry:
    filename: str
    sha256: str
    size: int
    upload_time: dt.datetime | None
    yanked: bool | str = False  # PEP 592: true, or the reason


class FakeServer:
    """One HTTP server holding several indexes (by prefix), file bodies and release metadata."""

    def __init__(self) -> None:
        self.files: dict[str, Served] = {}
        self.projects: dict[tuple[str, str], list[IndexEntry]] = {}
        self.releases: dict[tuple[str, str], list[dict[str, object]]] = {}
        self.json_api: dict[str, object] = {}
        self.redirects: dict[str, str] = {}
        self.raw_pages: dict[str, bytes] = {}
        self.requests: list[str] = []
        self.request_headers: list[tuple[str, dict[str, str]]] = []  # (path, headers with lower-case names)
        self.require_auth: str | None = None  # when set, a GET without this Authorization gets a 401 challenge
        # PEP 740: indexes whose pages carry a "provenance" key on every file (null unless registered here);
        # (index, filename) -> the integrity API's answer (None: the URL answers 404)
        self.pep740: set[str] = set()
        self.provenance: dict[tuple[str, str], bytes | None] = {}
        self.httpd = QuietHTTPServer(("127.0.0.1", 0), self._handler())
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def reset(self) -> None:
        """Forget every registered file, page, release and request (for a server shared by a module)."""
        for registry in (self.files, self.projects, self.releases, self.json_api, self.redirects, self.raw_pages,
                         self.provenance):
            registry.clear()
        self.pep740.clear()
        self.requests.clear()
        self.request_headers.clear()
        self.require_auth = None

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    # registration -------------------------------------------------------------------------
    def add_file(self, path: str, data: bytes, **faults: object) -> str:
        self.files[path] = Served(data, len(data), **faults)  # type: ignore[arg-type]
        return f"{self.url}{path}"

    def publish(
        self,
        filename: str,
        data: bytes,
        *,
        index: str = "primary",
        uploaded: dt.datetime | None = None,
        yanked: bool | str = False,
        **faults: object,
    ) -> str:
        """Put a distribution file on an index ("primary" has upload times; any other, like PyTorch's, has them
        only when ``uploaded`` is given)."""
        name = canonicalize_name(filename.split("-", 1)[0].replace("_", "-"))
        path = f"/files/{index}/{filename}"
        self.add_file(path, data, **faults)
        when = (uploaded or dt.datetime(2025, 1, 1, tzinfo=dt.UTC)) if index == "primary" else uploaded
        self.projects.setdefault((index, name), []).append(
            IndexEntry(filename, hashlib.sha256(data).hexdigest(), len(data), when, yanked)
        )
        return f"{self.url}{path}"

    def index_url(self, index: str = "primary") -> str:
        return f"{self.url}/{index}/simple"

    def add_release(self, repo: str, tag: str, assets: dict[str, bytes], *, digests: dict[str, str | None] | None = None) -> None:
        """A GitHub release; each asset's digest is its sha256 unless ``digests`` says otherwise."""
        listing: list[dict[str, object]] = []
        for name, data in assets.items():
            self.add_file(f"/gh/{repo}/releases/download/{tag}/{name}", data)
            digest: str | None = "sha256:" + hashlib.sha256(data).hexdigest()
            if digests is not None and name in digests:
                digest = digests[name]
            entry: dict[str, object] = {"name": name, "size": len(data), "browser_download_url": "unused"}
            if digest is not None:
                entry["digest"] = digest
            listing.append(entry)
        self.releases[(repo, tag)] = listing

    @property
    def github_api(self) -> str:
        return f"{self.url}/api"

    @property
    def github_download(self) -> str:
        return f"{self.url}/gh"

    # serving ------------------------------------------------------------------------------
    def _project_page(self, index: str, name: str) -> bytes | None:
        entries = self.projects.get((index, canonicalize_name(name)))
        if entries is None:
            return None
        files = []
        for e in entries:
            f: dict[str, object] = {
                "filename": e.filename,
                "url": f"/files/{index}/{e.filename}",
                "hashes": {"sha256": e.sha256},
                "size": e.size,
            }
            if e.upload_time is not None:
                f["upload-time"] = e.upload_time.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            if e.yanked is not False:
                f["yanked"] = e.yanked
            if index in self.pep740:
                version = e.filename.split("-")[1]
                known = (index, e.filename) in self.provenance
                f["provenance"] = f"/{index}/integrity/{canonicalize_name(name)}/{version}/{e.filename}/provenance" if known else None
            files.append(f)
        doc = {"meta": {"api-version": "1.1"}, "name": canonicalize_name(name), "files": files}
        return json.dumps(doc).encode()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body in two writes must not wait for an ACK

            def log_message(self, format: str, *args: object) -> None:
                pass

            def _send(self, code: int, body: bytes, ctype: str = "application/octet-stream") -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_HEAD(self) -> None:
                path = unquote(urlsplit(self.path).path)
                served = server.files.get(path)
                if served is None:
                    self._send(404, b"", "text/plain")
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(served.size))
                self.send_header("Accept-Ranges", "bytes")
                self.end_headers()

            def do_GET(self) -> None:
                path = unquote(urlsplit(self.path).path)
                server.requests.append(path)
                server.request_headers.append((path, {k.lower(): v for k, v in self.headers.items()}))
                if server.require_auth is not None and self.headers.get("Authorization") != server.require_auth:
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", 'Basic realm="index"')
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if path in server.redirects:
                    self.send_response(302)
                    self.send_header("Location", server.redirects[path])
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if path in server.raw_pages:
                    self._send(200, server.raw_pages[path], "application/vnd.pypi.simple.v1+json")
                    return
                parts = [p for p in path.split("/") if p]
                if len(parts) == 3 and parts[1] == "simple":
                    page = server._project_page(parts[0], parts[2])
                    if page is None:
                        self._send(404, b"not found", "text/plain")
                    else:
                        self._send(200, page, "application/vnd.pypi.simple.v1+json")
                    return
                if len(parts) == 6 and parts[1] == "integrity" and parts[5] == "provenance":
                    answer = server.provenance.get((parts[0], parts[4]))
                    if answer is None:
                        self._send(404, b'{"message": "Not Found"}', "application/json")
                    else:
                        self._send(200, answer, "application/vnd.pypi.integrity.v1+json")
                    return
                if len(parts) == 4 and parts[1] == "pypi" and parts[3] == "json":
                    doc = server.json_api.get(canonicalize_name(parts[2]))
                    if doc is None:
                        self._send(404, b"not found", "text/plain")
                    else:
                        self._send(200, json.dumps(doc).encode(), "application/json")
                    return
                if len(parts) == 7 and parts[:2] == ["api", "repos"] and parts[4:6] == ["releases", "tags"]:
                    repo = f"{parts[2]}/{parts[3]}"
                    listing = server.releases.get((repo, parts[6]))
                    if listing is None:
                        self._send(404, b'{"message": "Not Found"}', "application/json")
                    else:
                        doc = {"tag_name": parts[6], "assets": listing}
                        self._send(200, json.dumps(doc).encode(), "application/json")
                    return
                served = server.files.get(path)
                if served is None:
                    self._send(404, b"not found", "text/plain")
                    return
                self._serve_file(served)

            def _serve_file(self, s: Served) -> None:
                s.hits += 1
                if s.fail_first > 0:
                    s.fail_first -= 1
                    self._send(500, b"try again", "text/plain")
                    return
                rng = self.headers.get("Range")
                start, end = 0, s.size
                if rng:
                    s.ranges.append(rng)
                if rng and not s.ignore_range and rng.startswith("bytes="):
                    lo, _, hi = rng[6:].partition("-")
                    if lo:
                        start = int(lo)
                        end = min(s.size, int(hi) + 1) if hi else s.size
                    else:
                        start = max(0, s.size - int(hi))
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{end - 1}/{s.size}")
                else:
                    self.send_response(200)
                self.send_header("Content-Length", str(end - start))
                self.send_header("Accept-Ranges", "bytes")
                self.end_headers()
                sent = 0
                drop = s.drop_after
                offset = 0
                for chunk in _chunks(s.data):
                    lo, hi = offset, offset + len(chunk)
                    offset = hi
                    if hi <= start:
                        continue
                    if lo >= end:
                        break
                    if hi > end:
                        chunk = chunk[: end - lo]
                    if lo < start:
                        chunk = chunk[start - lo :]
                        lo = start
                    if s.corrupt_at is not None and lo <= s.corrupt_at < hi:
                        b = bytearray(chunk)
                        b[s.corrupt_at - lo] ^= 0xFF
                        chunk = bytes(b)
                    if drop is not None and sent + len(chunk) > drop:
                        self.wfile.write(chunk[: max(0, drop - sent)])
                        self.wfile.flush()
                        s.drop_after = None
                        self.close_connection = True
                        return
                    try:
                        self.wfile.write(chunk)
                    except (BrokenPipeError, ConnectionResetError):
                        return
                    sent += len(chunk)

        return Handler


def in_toto_statement(filename: str, sha256: str) -> str:
    """An attestation's envelope.statement as PEP 740 has it: base64 of an in-toto Statement naming the file."""
    doc = {"_type": "https://in-toto.io/Statement/v1", "subject": [{"name": filename, "digest": {"sha256": sha256}}],
           "predicateType": "https://docs.pypi.org/attestations/publish/v1", "predicate": None}
    return base64.b64encode(json.dumps(doc).encode()).decode()


def provenance_doc(*publishers: dict[str, object], attestations: int = 1, statement: str = "") -> bytes:
    """A PEP 740 provenance object as PyPI's integrity API answers it: one attestation bundle per publisher
    (the attestations are stand-ins: lockbuild counts them and reads the subject of their ``statement``,
    when one is given, without verifying them)."""
    stand_in = {"version": 1, "verification_material": {"certificate": "", "transparency_entries": [{}]},
                "envelope": {"statement": statement, "signature": ""}}
    bundles = [{"publisher": p, "attestations": [stand_in] * attestations} for p in publishers]
    return json.dumps({"version": 1, "attestation_bundles": bundles}).encode()


def github_publisher(repository: str, workflow: str = "release.yml", environment: str | None = "pypi") -> dict[str, object]:
    return {"kind": "GitHub", "repository": repository, "workflow": workflow, "environment": environment,
            "claims": {"sha": "0" * 40, "ref": "refs/tags/v1"}}


def _chunks(data: bytes | Callable[[], Iterator[bytes]]) -> Iterator[bytes]:
    if isinstance(data, bytes):
        for i in range(0, len(data), 1 << 16):
            yield data[i : i + (1 << 16)]
    else:
        yield from data()


# building distributions ------------------------------------------------------------------------
def make_wheel(
    name: str,
    version: str,
    *,
    deps: tuple[str, ...] = (),
    tag: str = "py3-none-any",
    modules: dict[str, str] | None = None,
    scripts: dict[str, str] | None = None,
    data_files: dict[str, bytes] | None = None,
    padding: int = 0,
) -> tuple[str, bytes]:
    """A small, valid wheel, built in memory with fixed timestamps."""
    dist = name.replace("-", "_")
    filename = f"{dist}-{version}-{tag}.whl"
    info = f"{dist}-{version}.dist-info"
    files: dict[str, bytes] = {}
    for mod, src in (modules or {f"{dist}/__init__.py": f"__version__ = {version!r}\n"}).items():
        files[mod] = src.encode()
    if padding:
        files[f"{dist}/blob.bin"] = hashlib.shake_256(f"{name}{version}".encode()).digest(padding)
    for path, data in (data_files or {}).items():
        files[path] = data
    meta = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    meta += [f"Requires-Dist: {d}" for d in deps]
    files[f"{info}/METADATA"] = ("\n".join(meta) + "\n").encode()
    files[f"{info}/WHEEL"] = f"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: {tag}\n".encode()
    if scripts:
        ep = "[console_scripts]\n" + "".join(f"{k} = {v}\n" for k, v in scripts.items())
        files[f"{info}/entry_points.txt"] = ep.encode()
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        writer.writerow([path, f"sha256={digest}", len(data)])
    writer.writerow([f"{info}/RECORD", "", ""])
    files[f"{info}/RECORD"] = record.getvalue().encode()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in files.items():
            zi = zipfile.ZipInfo(path, (2020, 1, 1, 0, 0, 0))
            zi.external_attr = 0o644 << 16
            z.writestr(zi, data)
    return filename, buf.getvalue()


def make_sdist(name: str, version: str) -> tuple[str, bytes]:
    dist = name.replace("-", "_")
    filename = f"{dist}-{version}.tar.gz"
    return filename, make_tar_gz({f"{dist}-{version}/PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()})


def make_tar_gz(members: dict[str, bytes]) -> bytes:
    """A tar.gz whose bytes depend only on ``members`` (the gzip header's time is fixed)."""
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as gz, tarfile.open(fileobj=gz, mode="w") as tf:
        for path, data in members.items():
            ti = tarfile.TarInfo(path)
            ti.size = len(data)
            ti.mode = 0o644
            tf.addfile(ti, io.BytesIO(data))
    return buf.getvalue()
