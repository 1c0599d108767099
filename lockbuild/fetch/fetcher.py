"""Downloads: bounded concurrency, streaming sha256 and size checks, retries, Range resume, a content cache.

A file is accepted only when its bytes hash to the sha256 it was promised; it is renamed into the cache
only once verified, so a killed fetch leaves no bad entry. Bodies are streamed (memory stays flat), and
every byte received before a broken transfer is kept, so the next attempt resumes there with Range."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Literal
from urllib.parse import urlsplit

import httpx

from lockbuild import fsio
from lockbuild.digest import HashedFile, Hasher
from lockbuild.errors import TLS_TIP, FetchError, IntegrityError, transport_tip
from lockbuild.fetch import curlget
from lockbuild.fetch.cache import GIT_KEY, Cache, digest_of, entry_hash
from lockbuild.fetch.http import failure, secrets_of
from lockbuild.fetch.sink import Sink
from lockbuild.limits import MiB
from lockbuild.progress import Progress
from lockbuild.wire.rules import ENCODING_TIP, RAW_BODY, encoding_problem

DEFAULT_JOBS = 8
RETRIES = 5
BACKOFF = 0.25
MAX_BACKOFF = 10.0
MAX_UNSIZED = 16 << 30  # a file whose size is not announced may still not be endless
PROGRESS_RESETS_RETRIES = MiB  # an attempt that brought this many bytes starts the retry count afresh
_RETRY_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class Wanted:
    """A file to bring: where from, and the digest and size it must have.

    ``sha256`` is also the file's key in the cache; a file known only by its git blob id (a Hugging Face
    repo's small files) has the key ``git-sha1:`` and that id (``cache.GIT_KEY``), and a size."""

    url: str
    sha256: str
    size: int | None
    label: str
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Fetched:
    wanted: Wanted
    path: Path
    downloaded: bool
    hashed: HashedFile | None = None  # downloaded now: hashed as it arrived, and unchanged since (digest.py)


@dataclass(frozen=True)
class FetchReport:
    files: tuple[Fetched, ...]
    seconds: float

    @property
    def downloaded_bytes(self) -> int:
        return sum(f.path.stat().st_size for f in self.files if f.downloaded)

    @property
    def cached(self) -> int:
        return sum(1 for f in self.files if not f.downloaded)


class _Retry(Exception):
    """An answer worth asking again for (5xx, 429, a Range answer for the wrong bytes)."""


class _Restart(Exception):
    """The server cannot serve the rest of the file: start again from its first byte."""


def _new_hash(w: Wanted) -> Hasher:
    """The hash that names ``w``: sha256, or the git blob sha1 of its stated size (refused without one)."""
    if w.sha256.startswith(GIT_KEY) and w.size is None:
        raise IntegrityError(f"{w.label}: a file known by its git blob id needs a stated size; refused.")
    return entry_hash(w.sha256, w.size or 0)


def cancelled(w: Wanted) -> FetchError:
    return FetchError(f"{w.label}: not fetched, another file failed first.")


class Fetcher:
    def __init__(
        self,
        cache: Cache,
        client: httpx.Client,
        *,
        jobs: int = DEFAULT_JOBS,
        progress: Progress | None = None,
        retries: int = RETRIES,
        backoff: float = BACKOFF,
        sleep: Callable[[float], None] = time.sleep,
        max_unsized: int = MAX_UNSIZED,
        hash_hits: bool = True,
        transfer: Literal["curl", "httpx"] = "curl",
    ) -> None:
        self.cache = cache
        self.client = client
        self.jobs = max(1, jobs)
        self.progress = progress or Progress.quiet()
        self.retries = retries
        self.backoff = backoff
        self.sleep = sleep
        self.max_unsized = max_unsized
        # False: a cache hit of known size is checked by type and size only, and the caller hashes every
        # byte it reads (the bundle writer does, and refuses a mismatch): each byte hashed once
        self.hash_hits = hash_hits
        self.transfer = transfer  # who receives the bytes: libcurl (fetch/curlget.py) or httpx, same rules

    def fetch_all(self, wanted: Sequence[Wanted]) -> FetchReport:
        """Bring every file (cached ones are only re-hashed); the first failure cancels the rest and is raised."""
        started = time.monotonic()
        unique: dict[str, Wanted] = {}
        for w in wanted:
            unique.setdefault(w.sha256, w)
        order = sorted(unique.values(), key=lambda w: -(w.size or 0))
        self.progress.start("fetching", total_bytes=sum(w.size or 0 for w in order), files=len(order))
        cancel = threading.Event()
        results: dict[str, Fetched] = {}
        pool = ThreadPoolExecutor(max_workers=self.jobs, thread_name_prefix="lockbuild-fetch")
        try:
            futures = [pool.submit(self.fetch_one, w, cancel) for w in order]
            for fut in as_completed(futures):
                got = fut.result()
                results[got.wanted.sha256] = got
        except BaseException:
            cancel.set()
            pool.shutdown(wait=True, cancel_futures=True)
            self.progress.finish()
            raise
        pool.shutdown(wait=True)
        report = FetchReport(tuple(results[w.sha256] for w in unique.values()), time.monotonic() - started)
        self.progress.finish(
            f"fetched {len(report.files)} file{'' if len(report.files) == 1 else 's'}: "
            f"{len(report.files) - report.cached} downloaded, "
            f"{report.cached} from the cache, in {report.seconds:.1f} s"
        )
        return report

    def fetch_one(self, w: Wanted, cancel: threading.Event) -> Fetched:
        """One file: a cache hit (checked as ``hash_hits`` says), or a download; ``cancel`` stops it."""
        if cancel.is_set():
            raise cancelled(w)
        hit = self.cache.lookup(w.sha256, w.size, hashed=self.hash_hits)
        if hit is not None:
            self.progress.skip(w.size or 0)
            return Fetched(w, hit, downloaded=False)
        path, hashed = self._download(w, cancel)
        self.progress.file_done()
        return Fetched(w, path, downloaded=True, hashed=hashed)

    def download(self, w: Wanted, cancel: threading.Event | None = None) -> Path:
        """Download one file into the cache, resuming with Range after a broken transfer."""
        return self._download(w, cancel or threading.Event())[0]

    def _download(self, w: Wanted, cancel: threading.Event) -> tuple[Path, HashedFile | None]:
        temp: Path | None = None
        try:
            temp = self.cache.new_temp(w.sha256)
            with fsio.create_new(temp, mode=0o600) as out:
                limit = w.size if w.size is not None else self.max_unsized
                sink = Sink(w.label, w.url, out, limit, self.progress, lambda: _new_hash(w))
                self._transfer(w, sink, cancel)
                sink.flush()
                out.flush()
                written = os.fstat(out.fileno())  # after the last byte: what the hash is of
            _check(w, sink)
            path = self.cache.commit(temp, w.sha256, name=urlsplit(w.url).path.rpartition("/")[2])
            return path, self.cache.arrived(w.sha256, written)
        except OSError as exc:
            raise FetchError(
                f"{w.label}: cannot write to the cache at {self.cache.root}: {exc.strerror or exc}.",
                tip="Check the free space and permissions there, or set LOCKBUILD_CACHE_DIR.",
            ) from None
        finally:
            if temp is not None:
                temp.unlink(missing_ok=True)

    def _transfer(self, w: Wanted, sink: Sink, cancel: threading.Event) -> None:
        failures = 0
        while True:
            if cancel.is_set():
                raise cancelled(w)
            before = sink.written
            try:
                self._attempt(w, sink, cancel)
                return
            except (_Retry, _Restart, httpx.TransportError) as exc:
                shown = failure(exc, secrets_of(self.client))
                if isinstance(exc, httpx.UnsupportedProtocol):
                    raise FetchError(f"{w.label}: cannot fetch {w.url}: {shown}") from None
                if transport_tip(exc) == TLS_TIP:  # a certificate that does not verify will not on a retry
                    raise FetchError(f"{w.label}: cannot fetch {w.url}: {shown}", tip=TLS_TIP) from None
                if isinstance(exc, _Restart):
                    sink.restart()
                failures = 1 if sink.written - before >= PROGRESS_RESETS_RETRIES else failures + 1
                if failures > self.retries:
                    last = shown.partition(": ")[2] if isinstance(exc, (_Retry, _Restart)) else shown
                    raise FetchError(
                        f"{w.label}: {w.url} failed {failures} times in a row; last: {last}.",
                        tip="Check the network; a re-run resumes from the cache for files already fetched.",
                    ) from None
                self.sleep(min(self.backoff * 2 ** (failures - 1), MAX_BACKOFF))
            except (httpx.HTTPError, httpx.InvalidURL) as exc:
                raise FetchError(f"{w.label}: {w.url}: {failure(exc, secrets_of(self.client))}") from None

    def _attempt(self, w: Wanted, sink: Sink, cancel: threading.Event) -> None:
        """One request: from the first byte, or from the first byte not yet received."""
        offset = sink.written
        headers = {**dict(w.headers), **RAW_BODY}  # the body as stored: the size bound counts bytes received
        if offset:
            headers["Range"] = f"bytes={offset}-"

        def body(chunk: bytes) -> None:
            if cancel.is_set():
                raise cancelled(w)
            sink.write(chunk)

        if self.transfer == "curl":
            curlget.get(self.client, w.url, headers, lambda status, h: _answer(w, sink, offset, status, h), body)
            return
        with self.client.stream("GET", w.url, headers=headers) as resp:
            _answer(w, sink, offset, resp.status_code, resp.headers)
            for chunk in resp.iter_raw():
                body(chunk)


def _answer(w: Wanted, sink: Sink, offset: int, status: int, headers: Mapping[str, str]) -> None:
    """Judge an answer's status and headers before a byte of its body is taken (``offset``: the Range asked)."""
    if status in _RETRY_STATUS:
        raise _Retry(f"HTTP {status}")
    if offset and status == 416:
        raise _Restart(f"HTTP 416 for bytes={offset}-")
    if offset and status == 206:
        if not headers.get("content-range", "").startswith(f"bytes {offset}-"):
            raise _Restart(f"a Range answer for other bytes ({headers.get('content-range')})")
    elif status == 200:
        if offset:  # the server ignored Range: start again cleanly
            sink.restart()
    else:
        raise FetchError(
            f"{w.label}: {w.url} answered HTTP {status}; expected 200.",
            tip="Check that the file still exists at that address"
            + (" and that its host's token (GITHUB_TOKEN, HF_TOKEN) may read it." if status in (401, 403) else "."),
        )
    encoded = encoding_problem(headers)
    if encoded is not None:
        raise FetchError(f"{w.label}: {w.url}: {encoded}.", tip=ENCODING_TIP)
    sink.expect(headers.get("content-length"))


def _check(w: Wanted, sink: Sink) -> None:
    if w.size is not None and sink.written != w.size:
        raise IntegrityError(
            f"{w.label}: expected {w.size} bytes from {w.url}, received {sink.written}.",
            tip="The server sent a different file than the lock names; nothing was kept.",
        )
    got = sink.hash.hexdigest()
    if got != digest_of(w.sha256):
        kind = "git blob sha1" if w.sha256.startswith(GIT_KEY) else "sha256"
        raise IntegrityError(
            f"{w.label}: {kind} mismatch for {w.url}: expected {digest_of(w.sha256)}, found {got}. The file was "
            "refused and nothing was cached.",
            tip="The file changed since it was locked, or the transfer was tampered with; do not use it.",
        )


def open_verified(fetcher: Fetcher, w: Wanted) -> BinaryIO:
    """One file through the cache, open for reading: the bytes read are the bytes that were hashed
    (the entry is hashed from this descriptor), so a file swapped after the check is never read."""
    f = fetcher.cache.open_entry(w.sha256, w.size)
    if f is None:
        fetcher.download(w)
        f = fetcher.cache.open_entry(w.sha256, w.size)
    if f is None:
        raise IntegrityError(
            f"{w.label}: the cache entry for {w.sha256} changed right after it was verified; refused.",
            tip="Another process writes to the cache directory; make it private to this user.",
        )
    return f
