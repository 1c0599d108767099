"""Wiring for the builder's commands: the settings, HTTP clients, the cache, the fetcher and the planner."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from lockbuild.builder.plan import LOOKUP_THREADS, Plan, Planner
from lockbuild.fetch.cache import Cache
from lockbuild.fetch.fetcher import DEFAULT_JOBS, Fetcher, FetchReport
from lockbuild.fetch.http import make_client
from lockbuild.progress import Progress
from lockbuild.settings import Settings


@dataclass
class Session:
    settings: Settings
    cache: Cache
    fetcher: Fetcher
    planner: Planner

    def fetch(self, plan: Plan, *, hash_hits: bool = True) -> tuple[dict[str, Path], FetchReport]:
        """Every file of the plan, downloaded or from the cache. ``hash_hits=False`` is for the build:
        the bundle writer hashes every byte it packs and refuses a mismatch (``DamagedSource``), so cache
        hits are checked by size only here, and each byte is hashed once."""
        self.fetcher.hash_hits = hash_hits
        try:
            report = self.fetcher.fetch_all(plan.wanted())
        finally:
            self.fetcher.hash_hits = True
        return {f.wanted.sha256: f.path for f in report.files}, report


@contextmanager
def session(settings: Settings, *, progress: Progress, jobs: int = DEFAULT_JOBS) -> Iterator[Session]:
    cache = Cache(settings.cache_dir)
    cache.check_owner()  # before anything is read from it or handed to uv
    cache.sweep()  # temp files of fetches killed long ago
    with (
        make_client(connections=max(jobs, LOOKUP_THREADS), settings=settings) as api,
        make_client(connections=jobs, settings=settings) as downloads,
    ):
        downloads.follow_redirects = True
        fetcher = Fetcher(cache, downloads, jobs=jobs, progress=progress)
        planner = Planner(api, cache, fetcher, settings=settings, progress=progress)
        yield Session(settings, cache, fetcher, planner)
