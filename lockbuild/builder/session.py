"""Wiring for the builder's commands: one HTTP client, the cache, the fetcher and the planner."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from lockbuild.builder.cache import Cache, default_cache_dir
from lockbuild.builder.fetch import DEFAULT_JOBS, Fetcher, FetchReport
from lockbuild.builder.http import index_url, make_client
from lockbuild.builder.plan import Plan, Planner
from lockbuild.progress import Progress


@dataclass
class Session:
    cache: Cache
    fetcher: Fetcher
    planner: Planner

    def fetch(self, plan: Plan) -> tuple[dict[str, Path], FetchReport]:
        report = self.fetcher.fetch_all(plan.wanted())
        return {f.wanted.sha256: f.path for f in report.files}, report


@contextmanager
def session(*, progress: Progress, jobs: int = DEFAULT_JOBS, cache_dir: Path | None = None) -> Iterator[Session]:
    cache = Cache(cache_dir or default_cache_dir())
    cache.sweep()  # temp files of fetches killed long ago
    with make_client(connections=max(jobs, 8)) as api, make_client(connections=jobs) as downloads:
        downloads.follow_redirects = True
        fetcher = Fetcher(cache, downloads, jobs=jobs, progress=progress)
        planner = Planner(api, cache, fetcher, index_url=index_url(), progress=progress)
        yield Session(cache, fetcher, planner)

