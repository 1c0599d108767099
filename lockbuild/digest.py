"""Streaming digests: hash while copying, with a reused buffer, never holding a whole file."""

from __future__ import annotations

import hashlib
import io
import re
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO, Protocol

CHUNK = 1 << 20
SHA256_HEX = re.compile(r"[0-9a-f]{64}")  # a sha256 as lockbuild writes it: 64 lowercase hex digits (fullmatch)


def is_sha256(text: str) -> bool:
    return SHA256_HEX.fullmatch(text) is not None


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


class BackgroundHash:
    """A hash fed on another thread, one chunk at a time in order, so hashing overlaps the caller's
    work (decompressing, writing). Chunks must be immutable ``bytes``."""

    def __init__(self, name: str = "sha256") -> None:
        self.h = hashlib.new(name)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self._pending: Future[None] | None = None

    def update(self, data: bytes) -> None:
        if self._pending is not None:
            self._pending.result()
        self._pending = self._pool.submit(self.h.update, data)

    def hexdigest(self) -> str:
        if self._pending is not None:
            self._pending.result()
        self._pool.shutdown()
        return self.h.hexdigest()


class TwinHasher:
    """sha256 and BLAKE2b-512 of one stream, the BLAKE2b on a second thread (hashlib releases the GIL
    for large updates), so the two digests cost about one pass. Chunks must be immutable ``bytes``."""

    def __init__(self) -> None:
        self.sha256 = hashlib.sha256()
        self.blake2b = hashlib.blake2b(digest_size=64)
        self.size = 0
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="blake2b")
        self._pending: Future[None] | None = None

    def update(self, data: bytes) -> None:
        if self._pending is not None:
            self._pending.result()
        self._pending = self._pool.submit(self.blake2b.update, data)
        self.sha256.update(data)
        self.size += len(data)

    def finish(self) -> tuple[int, str, bytes]:
        """(size, sha256 hex, BLAKE2b-512 bytes)."""
        if self._pending is not None:
            self._pending.result()
        self._pool.shutdown()
        return self.size, self.sha256.hexdigest(), self.blake2b.digest()


def file_twin_digests(path: Path) -> tuple[int, str, bytes]:
    hasher = TwinHasher()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            hasher.update(chunk)
    return hasher.finish()


class HashingWriter(io.RawIOBase):
    """A write-only file that hashes what passes through it on its way to ``out``."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self.hasher = TwinHasher()

    def writable(self) -> bool:
        return True

    def write(self, data: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
        chunk = bytes(data)
        self.out.write(chunk)
        self.hasher.update(chunk)
        return len(chunk)

    def flush(self) -> None:
        self.out.flush()
