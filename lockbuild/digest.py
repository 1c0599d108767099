"""Streaming digests: hash while copying, with a reused buffer, never holding a whole file."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import BinaryIO, Protocol

CHUNK = 1 << 20


class _Hash(Protocol):
    def update(self, data: bytes | memoryview, /) -> None: ...


def hash_stream(src: BinaryIO, *hashes: _Hash, dst: BinaryIO | None = None, limit: int | None = None) -> int:
    """Read ``src`` to its end (or ``limit`` bytes), feeding every hash and ``dst``; returns bytes read."""
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    total = 0
    while True:
        want = CHUNK if limit is None else min(CHUNK, limit - total)
        if want <= 0:
            break
        n = src.readinto(view[:want])  # type: ignore[attr-defined]
        if not n:
            break
        chunk = view[:n]
        for h in hashes:
            h.update(chunk)
        if dst is not None:
            dst.write(chunk)
        total += n
    return total


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        hash_stream(f, h)
    return h.hexdigest()
