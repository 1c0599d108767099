"""Downloads: bounded concurrency, streaming sha256 and size checks, retries, Range resume, a content cache.

A file is accepted only when its bytes hash to the sha256 it was promised; it is written under a
temporary name and renamed into the cache only once verified, so a killed fetch leaves no bad entry.
Bodies are streamed as they arrive (``iter_raw``): memory stays flat whatever the file size, and every
byte received before a broken transfer is kept, so the next attempt resumes exactly there with Range.
The pieces a TLS socket hands over are small (one record, 16 KiB at most); they are gathered into
pieces of ``digest.CHUNK`` before they are hashed and written, so each hash update and file write
releases and retakes the GIL once a MiB instead of once a record (on the vLLM workload, eight
downloads at once: 48 s -> 33 s for 4.4 GB, 31 s -> 17 s of system time, from context switches).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO
from urllib.parse import urlsplit

import httpx

from lockbuild import fsio
from lockbuild.builder.cache import GIT_KEY, Cache, digest_of, entry_hash
from lockbuild.digest import CHUNK, HashedFile, Hasher
from lockbuild.errors import TLS_TIP, FetchError, IntegrityError, transport_tip
from lockbuild.limits import MiB
from lockbuild.progress import Progress

DEFAULT_JOBS = 8
# A batch (a build's downloads, packed in order as they arrive) keeps at most jobs x AHEAD_PER_JOB bytes of
# files in flight (1 GiB at the default 8 jobs; always at least MIN_IN_FLIGHT files), started in the packer's
# order: the file the packer waits for does not share the network with a whole row of large ones. The vLLM
# build, cold, 2 CPUs: 63.6 s with all eight at once (the packer idle 25 s behind eight CUDA wheels that all
# arrived at the end), 54.9 s with a 1 GiB window, 56.8 s with 512 MiB, 60.7 s with 2 GiB. A network that
# gives each connection little is given more connections with --jobs, and the window grows with them.
AHEAD_PER_JOB = 128 << 20
MIN_IN_FLIGHT = 2
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


class _Sink:
    """The temp file being written: bytes, their hash, and the bound on how many may come. ``written``
    counts every byte received, including the ones gathered in ``pending`` and not yet hashed and written
    (``flush`` does that at each ``CHUNK`` and once the body is whole). A broken transfer keeps them: the
    next attempt asks for the bytes after ``written`` and appends to ``pending``."""

    def __init__(self, w: Wanted, out: BinaryIO, limit: int, progress: Progress) -> None:
        self.w = w
        self.out = out
        self.limit = limit
        self.progress = progress
        self.hash = _new_hash(w)
        self.written = 0
        self.pending = bytearray()

    def restart(self) -> None:
        self.progress.advance(-(self.written - len(self.pending)))  # what progress was told: the flushed bytes
        self.pending.clear()
        self.out.seek(0)
        self.out.truncate()
        self.hash = _new_hash(self.w)
        self.written = 0

    def expect(self, announced: str | None) -> None:
        """Refuse, before reading it, a body whose announced length cannot fit the file."""
        if announced is not None and announced.isdigit() and self.written + int(announced) > self.limit:
            raise _too_big(self.w, self.limit, f"announced {self.written + int(announced)}")

    def write(self, chunk: bytes) -> None:
        if self.written + len(chunk) > self.limit:
            raise _too_big(self.w, self.limit, "sent more")
        self.pending += chunk
        self.written += len(chunk)
        if len(self.pending) >= CHUNK:
            self.flush()

    def flush(self) -> None:
        """Hash and write the gathered bytes (the hash is of the very bytes written)."""
        if self.pending:
            self.out.write(self.pending)
            self.hash.update(self.pending)
            self.progress.advance(len(self.pending))
            self.pending.clear()


def _new_hash(w: Wanted) -> Hasher:
    """The hash that names ``w``: sha256, or the git blob sha1 of its stated size (refused without one)."""
    if w.sha256.startswith(GIT_KEY) and w.size is None:
        raise IntegrityError(f"{w.label}: a file known by its git blob id needs a stated size; refused.")
    return entry_hash(w.sha256, w.size or 0)


def _too_big(w: Wanted, limit: int, what: str) -> IntegrityError:
    return IntegrityError(
        f"{w.label}: expected at most {limit} bytes from {w.url}, the server {what}; refused.",
        tip="The server sent a different or endless file; nothing was kept.",
    )


def _cancelled(w: Wanted) -> FetchError:
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
            futures = [pool.submit(self._one, w, cancel) for w in order]
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

    def start(self, wanted: Sequence[Wanted]) -> Batch:
        """Bring every file, started in the given order (the order the caller will read them in) on ``jobs``
        threads, a window of bytes at a time (``Batch``); the caller takes each file as it completes
        (``Batch.path``)."""
        return Batch(self, wanted)

    def _one(self, w: Wanted, cancel: threading.Event) -> Fetched:
        if cancel.is_set():
            raise _cancelled(w)
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
                sink = _Sink(w, out, w.size if w.size is not None else self.max_unsized, self.progress)
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

    def _transfer(self, w: Wanted, sink: _Sink, cancel: threading.Event) -> None:
        failures = 0
        while True:
            if cancel.is_set():
                raise _cancelled(w)
            before = sink.written
            try:
                self._attempt(w, sink, cancel)
                return
            except (_Retry, _Restart, httpx.TransportError) as exc:
                if isinstance(exc, httpx.UnsupportedProtocol):
                    raise FetchError(f"{w.label}: cannot fetch {w.url}: {exc}") from None
                if transport_tip(exc) == TLS_TIP:  # a certificate that does not verify will not on a retry
                    raise FetchError(
                        f"{w.label}: cannot fetch {w.url}: {exc.__class__.__name__}: {exc}", tip=TLS_TIP
                    ) from None
                if isinstance(exc, _Restart):
                    sink.restart()
                failures = 1 if sink.written - before >= PROGRESS_RESETS_RETRIES else failures + 1
                if failures > self.retries:
                    last = str(exc) if isinstance(exc, (_Retry, _Restart)) else f"{exc.__class__.__name__}: {exc}"
                    raise FetchError(
                        f"{w.label}: {w.url} failed {failures} times in a row; last: {last}.",
                        tip="Check the network; a re-run resumes from the cache for files already fetched.",
                    ) from None
                self.sleep(min(self.backoff * 2 ** (failures - 1), MAX_BACKOFF))
            except (httpx.HTTPError, httpx.InvalidURL) as exc:
                raise FetchError(f"{w.label}: {w.url}: {exc.__class__.__name__}: {exc}") from None

    def _attempt(self, w: Wanted, sink: _Sink, cancel: threading.Event) -> None:
        """One request: from the first byte, or from the first byte not yet received."""
        offset = sink.written
        headers = {"Accept-Encoding": "identity", **dict(w.headers)}
        if offset:
            headers["Range"] = f"bytes={offset}-"
        with self.client.stream("GET", w.url, headers=headers) as resp:
            status = resp.status_code
            if status in _RETRY_STATUS:
                raise _Retry(f"HTTP {status}")
            if offset and status == 416:
                raise _Restart(f"HTTP 416 for bytes={offset}-")
            if offset and status == 206:
                if not resp.headers.get("content-range", "").startswith(f"bytes {offset}-"):
                    raise _Restart(f"a Range answer for other bytes ({resp.headers.get('content-range')})")
            elif status == 200:
                if offset:  # the server ignored Range: start again cleanly
                    sink.restart()
            else:
                raise FetchError(
                    f"{w.label}: {w.url} answered HTTP {status}; expected 200.",
                    tip="Check that the file still exists at that address"
                    + (
                        " and that its host's token (GITHUB_TOKEN, HF_TOKEN) may read it."
                        if status in (401, 403)
                        else "."
                    ),
                )
            sink.expect(resp.headers.get("content-length"))
            for chunk in resp.iter_raw():
                if cancel.is_set():
                    raise _cancelled(w)
                sink.write(chunk)


class Batch:
    """Downloads in flight (cache hits checked as ``Fetcher.hash_hits`` says), handed out one file at a
    time: ``path`` waits for that file only, so a reader can consume files in its own order while the
    rest are still arriving. ``finish`` waits for all (the first failure is raised); ``abort`` cancels."""

    def __init__(self, fetcher: Fetcher, wanted: Sequence[Wanted], *, ahead: int | None = None) -> None:
        self.fetcher = fetcher
        self.started = time.monotonic()
        unique: dict[str, Wanted] = {}
        for w in wanted:
            unique.setdefault(w.sha256, w)
        self.wanted = unique
        fetcher.progress.start("fetching", total_bytes=sum(w.size or 0 for w in unique.values()), files=len(unique))
        self.cancel = threading.Event()
        self.pool = ThreadPoolExecutor(max_workers=fetcher.jobs, thread_name_prefix="lockbuild-fetch")
        self.order = list(unique.values())
        self.index = {w.sha256: i for i, w in enumerate(self.order)}
        self.ahead = ahead if ahead is not None else fetcher.jobs * AHEAD_PER_JOB
        self.futures: dict[str, Future[Fetched]] = {}
        self._lock = threading.Lock()
        self._flight = [0, 0]  # files started and not yet done: their count, their bytes
        self._top_up(0)

    def _top_up(self, at: int) -> None:
        """Start, in order, every file up to ``at`` (the one the reader waits for; -1: none), then the next
        ones while fewer than MIN_IN_FLIGHT are in flight or their sizes stay within ``ahead``. Called again
        as each file is done (a cache hit is done at once), so the window slides with the downloads."""
        with self._lock:
            while (i := len(self.futures)) < len(self.order) and not self.cancel.is_set():
                w = self.order[i]
                size = w.size or 0
                count, held = self._flight
                if i > at and count >= MIN_IN_FLIGHT and held + size > self.ahead:
                    return
                self._flight = [count + 1, held + size]
                try:
                    self.futures[w.sha256] = self.pool.submit(self._run, w, size)
                except RuntimeError:  # the pool was shut down (abort): nothing more starts
                    return

    def _run(self, w: Wanted, size: int) -> Fetched:
        try:
            return self.fetcher._one(w, self.cancel)
        finally:
            with self._lock:
                self._flight = [self._flight[0] - 1, self._flight[1] - size]
            self._top_up(-1)

    def path(self, sha256: str) -> Path:
        return self.fetched(sha256).path

    def fetched(self, sha256: str) -> Fetched:
        self._top_up(self.index[sha256])
        fut = self.futures.get(sha256)
        if fut is None:  # aborted before it started
            raise _cancelled(self.wanted[sha256])
        return fut.result()

    def finish(self) -> FetchReport:
        try:
            self._top_up(len(self.order) - 1)
            files = tuple(f.result() for f in self.futures.values())
        except BaseException:
            self.abort()
            raise
        self.pool.shutdown(wait=True)
        report = FetchReport(files, time.monotonic() - self.started)
        self.fetcher.progress.finish(
            f"fetched {len(files)} file{'' if len(files) == 1 else 's'}: {len(files) - report.cached} downloaded, "
            f"{report.cached} from the cache, in {report.seconds:.1f} s"
        )
        return report

    def abort(self) -> None:
        self.cancel.set()
        self.pool.shutdown(wait=True, cancel_futures=True)
        self.fetcher.progress.finish()


def _check(w: Wanted, sink: _Sink) -> None:
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
