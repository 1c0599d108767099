"""What a locked file's index says of it, and a locked wheel's METADATA, taken only with its digest: what
checks a remembered resolution against the requirements' closure, and what PEP 740 provenance is read from."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Executor
from dataclasses import dataclass

from lockbuild import fsio
from lockbuild.errors import IntegrityError
from lockbuild.fetch.cache import Cache
from lockbuild.fetch.extraindex import ExtraIndexes
from lockbuild.fetch.fetcher import Fetcher, Wanted, open_verified
from lockbuild.fetch.index import Index, IndexFile
from lockbuild.lock import LockedFile
from lockbuild.recipe import Build
from lockbuild.sdist.closure import MAX_METADATA_BYTES, closure_problem, wheel_metadata

# A remembered resolution is checked against the requirements' closure from each pin's METADATA. Where that
# means downloading wheels beyond this many bytes (an index without PEP 658 files, a cache without the
# wheels: vLLM's torch alone is 0.9 GB), resolving afresh with uv costs less, and the lock is the same.
CHECK_DOWNLOAD_BUDGET = 64 << 20


@dataclass(frozen=True)
class Listings:
    """The indexes a build's files were chosen from (their answers kept for one plan), and where their
    files are fetched and kept."""

    primary: Index
    extra: ExtraIndexes
    fetcher: Fetcher
    cache: Cache

    def listed(self, f: LockedFile) -> tuple[IndexFile, ...]:
        """The index entries of a locked file's release (kept from the look-ups that chose it)."""
        if f.origin == "primary":
            return self.primary.release(f.name, f.version)
        if f.origin == "second" and f.index in self.extra.clients:
            return self.extra.clients[f.index].release(f.name, f.version)
        return ()

    def to_download(self, files: Sequence[LockedFile]) -> int:
        """The bytes of the wheels that checking these pins' closure would download: those whose METADATA
        is neither published by the index (PEP 658) nor kept, nor in the cache."""
        return sum(f.size or 0 for f in files if not self._at_hand(f))

    def _at_hand(self, f: LockedFile) -> bool:
        """Whether ``metadata(f)`` downloads no wheel (checked cheapest first: the wheel cached is one stat)."""
        return (
            self._pep658(f) is not None
            or self.cache.lookup(f.sha256, f.size, hashed=False) is not None
            or self.cache.metadata(f.sha256) is not None
        )

    def _pep658(self, f: LockedFile) -> IndexFile | None:
        """The index's entry of ``f`` where it lists a METADATA file (PEP 658/714) for it."""
        entry = next((x for x in self.listed(f) if x.filename == f.filename and x.sha256 == f.sha256), None)
        return entry if entry is not None and entry.metadata_sha256 is not None else None

    def metadata(self, f: LockedFile) -> bytes:
        """A locked wheel's METADATA: the index's PEP 658 file (by its listed sha256), or the wheel's own."""
        if (entry := self._pep658(f)) is not None and entry.metadata_sha256 is not None:
            w = Wanted(entry.metadata_url, entry.metadata_sha256, None, f"the metadata of {f.filename}")
            with open_verified(self.fetcher, w) as fh:
                return fsio.bounded_read(fh, MAX_METADATA_BYTES, what=w.label, error=IntegrityError)
        kept = self.cache.metadata(f.sha256)  # taken out when the wheel entered the cache: the wheel unopened
        if kept is None and self.cache.lookup(f.sha256, f.size, hashed=False) is None:
            self.fetcher.download(Wanted(f.url, f.sha256, f.size, f.filename))  # hashed as it came; keeps it
            kept = self.cache.metadata(f.sha256)
        if kept is not None:
            return kept
        with open_verified(self.fetcher, Wanted(f.url, f.sha256, f.size, f.filename)) as fh:  # cached before
            data = wheel_metadata(fh, f.filename)
        self.cache.keep_metadata(f.sha256, data)
        return data

    def not_the_closure(
        self, requirements: Sequence[str], files: Sequence[LockedFile], build: Build, pool: Executor
    ) -> str | None:
        """Why a remembered resolution's files are not exactly the closure of ``requirements`` on the build's
        target (closure.py), or None. Each pin's METADATA is the index's PEP 658 file where it publishes one,
        else the wheel's own, each taken only with its digest (the wheel is then in the cache for the fetch)."""
        by_name = {f.name: f for f in files}
        if len(by_name) != len(files) or any(f.kind != "wheel" for f in files):
            return "it pins a package twice, or an sdist"
        got = dict(zip(by_name, pool.map(self.metadata, files), strict=True))
        pins = {f.name: f.version for f in files}
        return closure_problem(requirements, pins, got.__getitem__, build.target.marker_environment())
