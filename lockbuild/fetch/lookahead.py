"""Index look-ups started on uv's hints, while uv still resolves.

Each version uv's log names starts the look-up of that release's files; a final pin that was hinted takes
that look-up's result (or its error), any other is looked up then, and an unused hint is never waited for.
A hint changes when a page is read, never what is chosen: the same rules run on the same answers."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Generic, TypeVar

from packaging.utils import canonicalize_name, canonicalize_version

T = TypeVar("T")
MAX_HINTS = 2000  # look-ups started early in one resolution, at most (one per package name)


def _key(name: str, version: str) -> tuple[str, str]:
    return canonicalize_name(name), canonicalize_version(version)


class Lookahead(Generic[T]):
    """Look-ups started early by ``hint``, taken by ``take`` once the pins are final."""

    def __init__(self, pool: Executor, lookup: Callable[[str, str], T], wanted: Callable[[str], bool]) -> None:
        self._pool = pool
        self._lookup = lookup
        self._wanted = wanted  # which names ``lookup`` serves (the primary index's, not a URL's or an extra index's)
        self._started: dict[tuple[str, str], Future[T]] = {}
        self._names: set[str] = set()
        self._lock = threading.Lock()
        self._closed = False

    def hint(self, name: str, version: str) -> None:
        """uv chose ``name==version`` (for now): look its release up, once per package name. Never raises."""
        try:
            key = _key(name, version)
        except Exception:  # a hint is only a hint
            return
        with self._lock:
            if self._closed or key[0] in self._names or len(self._names) >= MAX_HINTS:
                return
            self._names.add(key[0])
            if not self._wanted(key[0]):
                return
            try:
                self._started[key] = self._pool.submit(self._lookup, name, version)
            except RuntimeError:  # the pool is shutting down
                return

    def take(self, name: str, version: str) -> Future[T] | None:
        """The early look-up of ``name==version``, if one was started (its result or error is the pin's)."""
        with self._lock:
            return self._started.pop(_key(name, version), None)

    def close(self) -> int:
        """No more hints; look-ups not taken are cancelled where they have not started. Returns how many
        were started and not taken (their results and errors are dropped)."""
        with self._lock:
            self._closed = True
            left = list(self._started.values())
            self._started.clear()
        for f in left:
            f.cancel()
        return len(left)
