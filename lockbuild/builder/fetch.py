"""Downloads: bounded concurrency, streaming sha256 and size checks, retries, Range resume, a content cache.

A file is accepted only when its bytes hash to the sha256 it was promised; it is written under a
temporary name and renamed into the cache only once verified, so a killed fetch leaves no bad entry.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import httpx

from lockbuild.builder.cache import Cache
from lockbuild.errors import FetchError, IntegrityError
from lockbuild.progress import Progress

DEFAULT_JOBS = 8
RETRIES = 5
BACKOFF = 0.25
MAX_UNSIZED = 16 << 30  # a file whose size is not announced may still not be endless
_RETRY_STATUS = {408, 425, 429, 500, 502, 503, 504}


@dataclass(frozen=True)
class Wanted:
    """A file to bring: where from, and the digest and size it must have."""

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
    pass


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
    ) -> None:
        self.cache = cache
        self.client = client
        self.jobs = max(1, jobs)
        self.progress = progress or Progress.quiet()
        self.retries = retries
        self.backoff = backoff
        self.sleep = sleep
        self._cancel = threading.Event()

    def fetch_all(self, wanted: Sequence[Wanted]) -> FetchReport:
        """Bring every file (cached ones are only re-hashed); the first failure stops the rest."""
        started = time.monotonic()
        unique: dict[str, Wanted] = {}
        for w in wanted:
            unique.setdefault(w.sha256, w)
        order = sorted(unique.values(), key=lambda w: -(w.size or 0))
        total = sum(w.size or 0 for w in order)
        self.progress.start("fetching", total_bytes=total, files=len(order))
        results: dict[str, Fetched] = {}
        with ThreadPoolExecutor(max_workers=self.jobs, thread_name_prefix="fetch") as pool:
            futures = {pool.submit(self._one, w): w for w in order}
            try:
                for fut in futures:
                    got = fut.result()
                    results[got.wanted.sha256] = got
            except BaseException:
                self._cancel.set()
                raise
        report = FetchReport(tuple(results[w.sha256] for w in unique.values()), time.monotonic() - started)
        self.progress.finish(
            f"fetched {len(report.files) - report.cached} file(s), {report.cached} from the cache, "
            f"in {report.seconds:.1f} s"
        )
        return report

    def _one(self, w: Wanted) -> Fetched:
        if self._cancel.is_set():
            raise FetchError(f"{w.label}: not fetched, another file failed first.")
        hit = self.cache.lookup(w.sha256, w.size)
        if hit is not None:
            self.progress.advance(w.size or 0)
            self.progress.file_done()
            return Fetched(w, hit, downloaded=False)
        path = self.download(w)
        self.progress.file_done()
        return Fetched(w, path, downloaded=True)

    def download(self, w: Wanted) -> Path:
        """Download one file into the cache, resuming with Range after a broken transfer."""
        temp = self.cache.new_temp(w.sha256)
        try:
            with temp.open("w+b") as out:
                h = self._transfer(w, out)
                out.flush()
                written = out.tell()
            if w.size is not None and written != w.size:
                raise IntegrityError(
                    f"{w.label}: expected {w.size} bytes from {w.url}, received {written}.",
                    tip="The server sent a different file than the lock names; nothing was kept.",
                )
            got = h.hexdigest()
            if got != w.sha256:
                raise IntegrityError(
                    f"{w.label}: sha256 mismatch for {w.url}: expected {w.sha256}, found {got}. The file was refused "
                    "and nothing was cached.",
                    tip="The file changed since it was locked, or the transfer was tampered with; do not use it.",
                )
            return self.cache.commit(temp, w.sha256)
        finally:
            temp.unlink(missing_ok=True)

    def _transfer(self, w: Wanted, out: BinaryIO) -> Any:
        h = hashlib.sha256()
        attempt = 0
        limit = w.size if w.size is not None else MAX_UNSIZED
        while True:
            if self._cancel.is_set():
                raise FetchError(f"{w.label}: cancelled.")
            offset = out.tell()
            headers = dict(w.headers)
            if offset:
                headers["Range"] = f"bytes={offset}-"
            try:
                with self.client.stream("GET", w.url, headers=headers) as resp:
                    if resp.status_code in _RETRY_STATUS:
                        raise _Retry(f"HTTP {resp.status_code}")
                    if offset and resp.status_code == 206:
                        if not resp.headers.get("content-range", "").startswith(f"bytes {offset}-"):
                            raise _Retry("a Range answer for the wrong bytes")
                    elif resp.status_code == 200:
                        if offset:  # the server ignored Range: start again cleanly
                            out.seek(0)
                            out.truncate()
                            h = hashlib.sha256()
                    else:
                        raise FetchError(
                            f"{w.label}: {w.url} answered HTTP {resp.status_code}; expected 200.",
                            tip="Check that the file still exists at that address.",
                        )
                    for chunk in resp.iter_raw(1 << 20):
                        if out.tell() + len(chunk) > limit:
                            raise IntegrityError(
                                f"{w.label}: {w.url} sent more than the {limit} bytes expected; refused.",
                                tip="The server sent a different or endless file; nothing was kept.",
                            )
                        out.write(chunk)
                        h.update(chunk)
                        self.progress.advance(len(chunk))
                return h
            except (httpx.TransportError, _Retry) as exc:
                attempt += 1
                if attempt > self.retries:
                    raise FetchError(
                        f"{w.label}: {w.url} failed {attempt} times; last: {exc.__class__.__name__}: {exc}",
                        tip="Check the network; a re-run resumes from the cache for files already fetched.",
                    ) from None
                self.sleep(min(self.backoff * 2 ** (attempt - 1), 10.0))
            except httpx.HTTPError as exc:
                raise FetchError(f"{w.label}: {w.url}: {exc.__class__.__name__}: {exc}") from None


def fetch_one(fetcher: Fetcher, w: Wanted) -> Path:
    """One file through the cache (used for source archives and release assets)."""
    hit = fetcher.cache.lookup(w.sha256, w.size)
    return hit if hit is not None else fetcher.download(w)

