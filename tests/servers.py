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
import functools
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
    range_from_zero: bool = False  # answer a Range request 206 with the whole body, from byte 0, once
    corrupt_at: int | None = None  # flip one byte at this offset
    hits: int = 0
    ranges: list[str] = field(default_factory=list)
    headers: dict[str, str] = field(default_factory=dict)  # sent with every answer (a Hub file's ETag...)


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
        for registry in (
            self.files,
            self.projects,
            self.releases,
            self.json_api,
            self.redirects,
            self.raw_pages,
            self.provenance,
        ):
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

    def add_release(
        self, repo: str, tag: str, assets: dict[str, bytes], *, digests: dict[str, str | None] | None = None
    ) -> None:
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
                f["provenance"] = (
                    f"/{index}/integrity/{canonicalize_name(name)}/{version}/{e.filename}/provenance" if known else None
                )
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
                if rng and s.range_from_zero:
                    s.range_from_zero = False
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes 0-{s.size - 1}/{s.size}")
                elif rng and not s.ignore_range and rng.startswith("bytes="):
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
                for name, value in s.headers.items():
                    self.send_header(name, value)
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
    doc = {
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"name": filename, "digest": {"sha256": sha256}}],
        "predicateType": "https://docs.pypi.org/attestations/publish/v1",
        "predicate": None,
    }
    return base64.b64encode(json.dumps(doc).encode()).decode()


def provenance_doc(*publishers: dict[str, object], attestations: int = 1, statement: str = "") -> bytes:
    """A PEP 740 provenance object as PyPI's integrity API answers it: one attestation bundle per publisher
    (the attestations are stand-ins: lockbuild counts them and reads the subject of their ``statement``,
    when one is given, without verifying them)."""
    stand_in = {
        "version": 1,
        "verification_material": {"certificate": "", "transparency_entries": [{}]},
        "envelope": {"statement": statement, "signature": ""},
    }
    bundles = [{"publisher": p, "attestations": [stand_in] * attestations} for p in publishers]
    return json.dumps({"version": 1, "attestation_bundles": bundles}).encode()


def github_publisher(
    repository: str, workflow: str = "release.yml", environment: str | None = "pypi"
) -> dict[str, object]:
    return {
        "kind": "GitHub",
        "repository": repository,
        "workflow": workflow,
        "environment": environment,
        "claims": {"sha": "0" * 40, "ref": "refs/tags/v1"},
    }


def _chunks(data: bytes | Callable[[], Iterator[bytes]]) -> Iterator[bytes]:
    if isinstance(data, bytes):
        for i in range(0, len(data), 1 << 16):
            yield data[i : i + (1 << 16)]
    else:
        yield from data()


# a fake Hugging Face Hub ----------------------------------------------------------------------------
LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".pkl", ".model", ".gguf", ".msgpack")


def git_blob_id(data: bytes) -> str:
    """``git hash-object``: the sha1 of ``blob SIZE\\0`` and the bytes (the Hub's ``oid`` of a file)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer(data: bytes) -> bytes:
    """The git-lfs pointer file the repo's git tree holds for an LFS file (its blob id is the ``oid``)."""
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{hashlib.sha256(data).hexdigest()}\nsize {len(data)}\n".encode()


@dataclass
class HubEntry:
    """One file of a fake Hub repo: its bytes, whether it is stored in LFS, and what the Hub states."""

    path: str
    data: bytes
    lfs: bool

    @functools.cached_property
    def pointer(self) -> bytes:
        return lfs_pointer(self.data)

    @functools.cached_property
    def oid(self) -> str:
        return git_blob_id(self.pointer if self.lfs else self.data)

    @functools.cached_property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    def tree_item(self) -> dict[str, object]:
        item: dict[str, object] = {"type": "file", "oid": self.oid, "size": len(self.data), "path": self.path}
        if self.lfs:
            item["lfs"] = {"oid": self.sha256, "size": len(self.data), "pointerSize": len(self.pointer)}
        return item

    def sibling(self, blobs: bool) -> dict[str, object]:
        item: dict[str, object] = {"rfilename": self.path}
        if blobs:
            item.update(blobId=self.oid, size=len(self.data))
            if self.lfs:
                item["lfs"] = {"sha256": self.sha256, "size": len(self.data), "pointerSize": len(self.pointer)}
        return item


class FakeHub(FakeServer):
    """A fake of the Hugging Face Hub's model endpoints, as the Hub answers them:

    - ``GET /api/models/ORG/NAME/revision/REV[?blobs=true]``: ``id``, ``sha``, ``lastModified`` (the
      commit's date) and ``siblings`` (with
      ``blobId``, ``size`` and ``lfs`` under ``blobs=true``); an unknown revision is a 404 with
      ``X-Error-Code: RevisionNotFound``, an unknown repo a 401 with ``RepoNotFound``;
    - ``GET /api/models/ORG/NAME/tree/REV[/PATH]?recursive=true``: files and directories, ``page_size``
      entries a page, the next page named by ``Link: <…&cursor=N>; rel="next"``;
    - ``GET|HEAD /ORG/NAME/resolve/REV/PATH``: a small file answered here (quoted ``ETag`` = its blob
      id, ``X-Repo-Commit``); an LFS file a 302 to ``cdn`` (another origin: a second server) with
      ``X-Linked-Etag`` (its sha256), ``X-Linked-Size`` and ``X-Repo-Commit``; the CDN honours Range.

    Files are registered with ``add_repo``; the CDN's ``Served`` entries take the usual faults
    (``cdn.files[hub.cdn_path(sha256)]``). ``tamper_revision`` / ``tamper_tree`` rewrite an answer
    before it is sent; ``next_link`` replaces the first page's next link.
    """

    def __init__(self, cdn: FakeServer) -> None:
        self.cdn = cdn
        self.repos: dict[str, dict[str, list[HubEntry]]] = {}  # repo -> commit -> files
        self.refs: dict[tuple[str, str], str] = {}  # (repo, branch or tag) -> commit
        self.dates: dict[tuple[str, str], str] = {}  # (repo, commit) -> its date, as lastModified states it
        self.page_size = 1000
        self.tamper_revision: Callable[[dict[str, object]], object] | None = None
        self.tamper_tree: Callable[[list[dict[str, object]]], object] | None = None
        self.next_link: str | None = None
        super().__init__()

    def reset(self) -> None:
        super().reset()
        self.repos.clear()
        self.refs.clear()
        self.dates.clear()
        self.page_size = 1000
        self.tamper_revision = self.tamper_tree = None
        self.next_link = None

    @property
    def endpoint(self) -> str:
        return self.url

    @staticmethod
    def cdn_path(sha256: str) -> str:
        return f"/lfs-cdn/{sha256}"

    def add_repo(
        self,
        repo: str,
        files: dict[str, bytes],
        *,
        commit: str | None = None,
        branch: str = "main",
        lfs: Callable[[str], bool] | None = None,
        date: str = "2025-01-01T00:00:00.000Z",
    ) -> str:
        """Publish ``files`` as a commit of ``repo`` (its id derived from the files unless given), which
        ``branch`` then names; returns the commit. LFS: by suffix, as a repo's ``.gitattributes`` has it.
        ``date``: the commit's date, which the revision's ``lastModified`` states (as the Hub's does)."""
        is_lfs = lfs or (lambda path: path.endswith(LFS_SUFFIXES))
        entries = sorted((HubEntry(p, d, is_lfs(p)) for p, d in files.items()), key=lambda e: e.path)
        if commit is None:
            commit = hashlib.sha1(repr([(e.path, e.oid) for e in entries]).encode()).hexdigest()
        self.repos.setdefault(repo, {})[commit] = entries
        self.refs[(repo, branch)] = commit
        self.dates[(repo, commit)] = date
        for e in entries:
            headers = {"ETag": f'"{e.oid}"', "X-Repo-Commit": commit}
            if e.lfs:
                self.cdn.add_file(self.cdn_path(e.sha256), e.data)
            else:
                self.files[f"/{repo}/resolve/{commit}/{e.path}"] = Served(e.data, len(e.data), headers=headers)
        return commit

    def commit_of(self, repo: str, rev: str) -> str | None:
        commits = self.repos.get(repo, {})
        return rev if rev in commits else self.refs.get((repo, rev))

    def _tree_items(self, repo: str, commit: str, under: str, recursive: bool) -> list[dict[str, object]]:
        prefix = f"{under}/" if under else ""
        dirs: set[str] = set()
        files: list[dict[str, object]] = []
        for e in self.repos[repo][commit]:
            if not e.path.startswith(prefix):
                continue
            rest = e.path[len(prefix) :].split("/")
            for depth in range(1, len(rest) if recursive else min(2, len(rest))):
                dirs.add(prefix + "/".join(rest[:depth]))
            if recursive or len(rest) == 1:
                files.append(e.tree_item())
        folders: list[dict[str, object]] = [
            {"type": "directory", "oid": hashlib.sha1(d.encode()).hexdigest(), "size": 0, "path": d} for d in dirs
        ]
        return sorted(folders + files, key=lambda item: str(item["path"]))

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        hub = self
        base = super()._handler()

        class HubHandler(base):  # type: ignore[valid-type,misc]
            def _json(self, code: int, doc: object, headers: dict[str, str] | None = None) -> None:
                body = json.dumps(doc).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)

            def _not_found(self, code: str) -> None:
                status = 401 if code == "RepoNotFound" else 404
                self._json(status, {"error": code}, {"X-Error-Code": code})

            def _route(self, head: bool) -> bool:
                split = urlsplit(self.path)
                path = unquote(split.path)
                query = dict(q.split("=", 1) if "=" in q else (q, "") for q in split.query.split("&") if q)
                parts = path.split("/")[1:]
                if len(parts) >= 6 and parts[:2] == ["api", "models"] and parts[4] in ("revision", "tree"):
                    hub.requests.append(path)
                    hub.request_headers.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
                    repo = f"{parts[2]}/{parts[3]}"
                    if repo not in hub.repos:
                        self._not_found("RepoNotFound")
                        return True
                    commit = hub.commit_of(repo, parts[5])
                    if commit is None:
                        self._not_found("RevisionNotFound")
                        return True
                    if parts[4] == "revision":
                        blobs = query.get("blobs", "").lower() == "true"
                        doc: dict[str, object] = {
                            "_id": hashlib.sha1(repo.encode()).hexdigest()[:24],
                            "id": repo,
                            "modelId": repo,
                            "author": parts[2],
                            "sha": commit,
                            "lastModified": hub.dates[(repo, commit)],
                            "private": False,
                            "disabled": False,
                            "gated": False,
                            "tags": [],
                            "downloads": 0,
                            "likes": 0,
                            "library_name": "transformers",
                            "siblings": [e.sibling(blobs) for e in hub.repos[repo][commit]],
                        }
                        self._json(200, hub.tamper_revision(doc) if hub.tamper_revision else doc)
                        return True
                    recursive = query.get("recursive", "").lower() == "true"
                    items = hub._tree_items(repo, commit, "/".join(parts[6:]), recursive)
                    cursor = int(query.get("cursor", "0") or 0)
                    page = items[cursor : cursor + hub.page_size]
                    headers = {}
                    if cursor + hub.page_size < len(items):
                        nxt = f"{hub.url}{split.path}?recursive={query.get('recursive', 'false')}&cursor={cursor + hub.page_size}"
                        if hub.next_link is not None and cursor == 0:
                            nxt = hub.next_link
                        headers["Link"] = f'<{nxt}>; rel="next"'
                    self._json(200, hub.tamper_tree(page) if hub.tamper_tree else page, headers)
                    return True
                if len(parts) >= 5 and parts[2] == "resolve":
                    repo = f"{parts[0]}/{parts[1]}"
                    commit = hub.commit_of(repo, parts[3])
                    file_path = "/".join(parts[4:])
                    entry = next(
                        (e for e in hub.repos.get(repo, {}).get(commit or "", []) if e.path == file_path), None
                    )
                    if commit is None or entry is None:
                        hub.requests.append(path)
                        hub.request_headers.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
                        self._not_found("EntryNotFound" if commit else "RevisionNotFound")
                        return True
                    if entry.lfs:
                        hub.requests.append(path)
                        hub.request_headers.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
                        self.send_response(302)
                        self.send_header("Location", f"{hub.cdn.url}{hub.cdn_path(entry.sha256)}?X-Amz-Signature=fake")
                        self.send_header("ETag", f'"{entry.oid}"')
                        self.send_header("X-Linked-Etag", f'"{entry.sha256}"')
                        self.send_header("X-Linked-Size", str(len(entry.data)))
                        self.send_header("X-Repo-Commit", commit)
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return True
                    key = f"/{repo}/resolve/{commit}/{file_path}"
                    if head:
                        self.send_response(200)
                        self.send_header("Content-Length", str(len(entry.data)))
                        self.send_header("ETag", f'"{entry.oid}"')
                        self.send_header("X-Repo-Commit", commit)
                        self.end_headers()
                        return True
                    self.path = key  # the registered file (with its faults), served by the base handler
                    return False
                return False

            def do_HEAD(self) -> None:
                if not self._route(head=True):
                    super().do_HEAD()

            def do_GET(self) -> None:
                if not self._route(head=False):
                    super().do_GET()

        return HubHandler


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
    return filename, make_tar_gz(
        {f"{dist}-{version}/PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()}
    )


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
