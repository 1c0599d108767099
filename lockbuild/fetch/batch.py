"""A build's downloads, handed to the packer one file at a time, a window of bytes ahead of it."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from lockbuild.fetch.fetcher import Fetched, Fetcher, FetchReport, Wanted, cancelled

# A batch (a build's downloads, packed in order as they arrive) keeps at most jobs x AHEAD_PER_JOB bytes of
# files in flight (1 GiB at the default 8 jobs; always at least MIN_IN_FLIGHT files), started in the packer's
# order: the file the packer waits for does not share the network with a whole row of large ones. The vLLM
# build, cold, 2 CPUs: 63.6 s with all eight at once (the packer idle 25 s behind eight CUDA wheels that all
# arrived at the end), 54.9 s with a 1 GiB window, 56.8 s with 512 MiB, 60.7 s with 2 GiB. A network that
# gives each connection little is given more connections with --jobs, and the window grows with them.
AHEAD_PER_JOB = 128 << 20
MIN_IN_FLIGHT = 2


class Batch:
    """Downloads (started in the given order, the order the caller will read them in, on ``Fetcher.jobs``
    threads) in flight (cache hits checked as ``Fetcher.hash_hits`` says), handed out one file at a
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
            return self.fetcher.fetch_one(w, self.cancel)
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
            raise cancelled(self.wanted[sha256])
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
