"""Streaming digests: hash while copying, with a reused buffer, never holding a whole file."""

from __future__ import annotations

import base64
import hashlib
import os
import re
import threading
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol, TypeVar

from lockbuild.errors import IntegrityError
from lockbuild.limits import MiB
from lockbuild.proc.channel import Cancelled, Channel, End

CHUNK = MiB  # the read size of every copy and hash loop (a file, a member, a blob, a download): one place
SHA256_HEX = re.compile(r"[0-9a-f]{64}")  # a sha256 as lockbuild writes it: 64 lowercase hex digits (fullmatch)
GIT_SHA1_HEX = re.compile(r"[0-9a-f]{40}")  # a git object id (a blob's sha1), 40 lowercase hex digits (fullmatch)


def record_line(name: str, data: bytes) -> str:
    """A wheel RECORD line for ``name`` holding ``data`` (PEP 376/427: urlsafe base64 sha256, no padding)."""
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def is_sha256(text: str) -> bool:
    return SHA256_HEX.fullmatch(text) is not None


@dataclass(frozen=True)
class FileIdentity:
    """What ``fstat`` says of a file that could show it changed: which inode, its size, and its
    modification and status-change times (any write or truncation moves both; the status-change time
    cannot be set back by an unprivileged process)."""

    dev: int
    ino: int
    size: int
    mtime_ns: int
    ctime_ns: int

    @staticmethod
    def of(st: os.stat_result) -> FileIdentity:
        return FileIdentity(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


@dataclass(frozen=True)
class HashedFile:
    """A file whose ``sha256`` was taken of the very bytes written to it (a download, as it arrived), and
    its ``identity`` right after it was put in place. A reader whose open descriptor shows that same
    identity before and after reading it reads the bytes that were hashed, and need not hash them again
    (``same_file``); any other file is hashed as it is read."""

    path: Path
    sha256: str
    identity: FileIdentity


def same_file(fd: int, identity: FileIdentity) -> bool:
    """Whether the open ``fd`` is still the file ``identity`` describes, unchanged."""
    return FileIdentity.of(os.fstat(fd)) == identity


def is_git_sha1(text: str) -> bool:
    return GIT_SHA1_HEX.fullmatch(text) is not None


class Hasher(Protocol):
    """A running hash (hashlib's objects): bytes in, a hex digest out."""

    def update(self, data: bytes | bytearray | memoryview, /) -> None: ...

    def hexdigest(self) -> str: ...


def git_blob_hash(size: int) -> Hasher:
    """A sha1 ready to take the ``size`` bytes of a file: its hexdigest is then the file's git blob id
    (``git hash-object``: sha1 of ``b"blob SIZE\\0"`` and the bytes)."""
    return hashlib.sha1(b"blob %d\0" % size, usedforsecurity=False)


class _Hash(Protocol):
    def update(self, data: bytes | memoryview, /) -> None: ...


C = TypeVar("C", bytes, memoryview)


def pump(
    read: Callable[[int], C],
    *sinks: Callable[[C], object],
    limit: int | None = None,
    peek: bool = True,
    advance: Callable[[int], None] | None = None,
) -> int:
    """The one read-hash loop: ``read(n)`` (at most ``n`` bytes, at most ``CHUNK``; empty at the end) until
    the source ends, each chunk fed in order to every sink (a hash's ``update``, a file's ``write``) and then
    counted to ``advance``; returns the count read.

    ``limit``: at most ``limit`` bytes are fed. With ``peek`` (the default) one byte more is asked for, so
    a source longer than ``limit`` is seen, never silently cut: the count is then over ``limit`` and the
    chunk that crossed it is fed to no sink (the caller refuses the source, in its own words). Without
    ``peek`` what follows ``limit`` stays unread (a split's next part). A source that ends before
    ``limit`` is the caller's to judge, by the count."""
    stop = None if limit is None else limit + 1 if peek else limit
    total = 0
    while True:
        want = CHUNK if stop is None else min(CHUNK, stop - total)
        if want <= 0:
            break
        chunk = read(want)
        if not chunk:
            break
        total += len(chunk)
        if limit is not None and total > limit:
            break
        for sink in sinks:
            sink(chunk)
        if advance is not None:
            advance(len(chunk))
    return total


def reading_into(src: BinaryIO) -> Callable[[int], memoryview]:
    """``src``'s reads for :func:`pump`, into one reused buffer: each chunk is valid only until the next
    read, so only for sinks that use it at once (a hash, a file's ``write``), never one that keeps it (a
    ``BackgroundHash``, a queue)."""
    view = memoryview(bytearray(CHUNK))

    def read(n: int) -> memoryview:
        return view[: src.readinto(view[:n]) or 0]  # type: ignore[attr-defined]

    return read


def reading_chunks(chunks: Iterable[bytes]) -> Callable[[int], bytes]:
    """An iterable's chunks (a download's, as they arrive) as reads for :func:`pump`: each read is the
    next chunk, whatever size was asked for (a chunk that crosses the limit is seen and fed to no sink)."""
    it = (c for c in chunks if c)
    return lambda _n: next(it, b"")


class Writer(Protocol):
    def write(self, data: bytes, /) -> int: ...


def copy_with_hash(
    src: BinaryIO,
    dst: Writer | None,
    size: int,
    *,
    advance: Callable[[int], None] | None = None,
) -> tuple[int, str]:
    """Copy up to ``size`` bytes of ``src`` to ``dst`` (None: only hash), reading at most one byte
    more, so a longer source is seen without being copied: (bytes seen, sha256 of the first ``size``)."""
    h = hashlib.sha256()
    n = pump(src.read, h.update, *(() if dst is None else (dst.write,)), limit=size, advance=advance)
    return n, h.hexdigest()


READ_PIECE = 4 << 20  # digest_exactly's reads: large enough that each hash update releases the GIL for long
READ_RING = 4  # pieces in flight: one being read while the others are hashed


def digest_exactly(f: BinaryIO, size: int, *, what: str, blake2b: bool = False) -> tuple[str, bytes | None]:
    """The sha256 (hex) of exactly ``size`` bytes of ``f`` (and, with ``blake2b``, their BLAKE2b-512), in
    one read: the caller's thread reads into a ring of reused buffers while each digest runs on a thread of
    its own (hashlib releases the GIL for large updates), so the digests cost about the slowest of them and
    the reads overlap them. A file that ends before ``size`` or goes on after it is an ``IntegrityError``
    naming ``what``."""
    sha = hashlib.sha256()
    b2 = hashlib.blake2b(digest_size=64) if blake2b else None
    hashes: list[_Hash] = [sha] if b2 is None else [sha, b2]
    names = ("sha256", "blake2b")
    pools = [ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"lockbuild-{n}") for n in names[: len(hashes)]]
    ring = [bytearray(READ_PIECE) for _ in range(min(READ_RING, size // READ_PIECE + 1))]
    busy: list[list[Future[None]]] = [[] for _ in ring]
    left, at = size, 0
    try:
        while left:
            for fut in busy[at]:
                fut.result()  # that buffer's bytes are hashed: it may be filled again
            view = memoryview(ring[at])[: min(READ_PIECE, left)]
            n = f.readinto(view)  # type: ignore[attr-defined]
            if not n:
                raise IntegrityError(f"{what} shrank while it was read: expected {size} bytes.")
            piece = view[:n]
            busy[at] = [pool.submit(h.update, piece) for pool, h in zip(pools, hashes, strict=True)]
            left -= n
            at = (at + 1) % len(ring)
        for futs in busy:
            for fut in futs:
                fut.result()
    finally:
        for pool in pools:
            pool.shutdown(wait=True, cancel_futures=True)
    if f.read(1):
        raise IntegrityError(f"{what} grew while it was read: expected {size} bytes.")
    return sha.hexdigest(), (b2.digest() if b2 is not None else None)


class BackgroundHash:
    """A hash fed on another thread, in order, at most ``depth`` chunks behind the caller, so hashing
    overlaps the caller's work (decompressing, writing). Chunks must not change once handed over
    (``bytes``, or read-only views of bytes). ``pool``: a single-worker executor to share (one stream
    after another on the same thread); without one, the hash has its own."""

    def __init__(self, name: str = "sha256", *, depth: int = 1, pool: Executor | None = None) -> None:
        self.h = hashlib.new(name)
        self._own = pool is None
        self._pool = pool if pool is not None else ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self._depth = depth
        self._pending: deque[Future[None]] = deque()

    def update(self, data: bytes | memoryview) -> None:
        if len(self._pending) >= self._depth:
            self._pending.popleft().result()
        self._pending.append(self._pool.submit(self.h.update, data))

    def hexdigest(self) -> str:
        while self._pending:
            self._pending.popleft().result()
        if self._own:
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


class Writable(Protocol):
    def write(self, data: bytes, /) -> int | None: ...


class HashingWriter:
    """A write-only sink that writes a stream to ``out`` and takes its sha256 and BLAKE2b-512, each of the
    three on its own thread fed through a bounded channel: the producer (zstd's output callback) hands a
    chunk on and goes back to work, and the file write and the two hashes run side by side instead of one
    after the other, never more than ``depth`` chunks behind. Every chunk reaches all three in order.
    ``finish`` waits for them and returns (size, sha256 hex, BLAKE2b-512 bytes); the first failure (an
    ``OSError`` from ``out``) is raised, the same exception, by the producer's next ``write`` or by
    ``finish``. ``abort`` stops and joins the threads; call it whatever happened (a no-op after ``finish``)."""

    def __init__(self, out: Writable, *, depth: int = 4) -> None:
        self.size = 0
        self._sha256 = hashlib.sha256()
        self._blake2b = hashlib.blake2b(digest_size=64)
        self._error: BaseException | None = None
        self._lock = threading.Lock()
        consumers: list[tuple[str, Callable[[bytes], object]]] = [
            ("lockbuild-out", out.write),  # a BufferedWriter writes the whole chunk or raises
            ("lockbuild-sha256", self._sha256.update),
            ("lockbuild-blake2b", self._blake2b.update),
        ]
        self._channels: list[Channel[bytes]] = [Channel(depth) for _ in consumers]
        self._threads = [
            threading.Thread(target=self._consume, args=(use, ch), name=name, daemon=True)
            for (name, use), ch in zip(consumers, self._channels, strict=True)
        ]
        for t in self._threads:
            t.start()

    def _consume(self, use: Callable[[bytes], object], channel: Channel[bytes]) -> None:
        try:
            while not isinstance(chunk := channel.get(), End):
                use(chunk)
        except Cancelled:
            return
        except BaseException as exc:  # raised on the producer's thread (write or finish)
            with self._lock:
                if self._error is None:
                    self._error = exc
            for ch in self._channels:
                ch.stop()

    def write(self, data: bytes | bytearray | memoryview) -> int:
        chunk = data if type(data) is bytes else bytes(data)  # zstd hands over new bytes: shared, not copied
        try:
            for ch in self._channels:
                ch.put(chunk)
        except Cancelled:
            if self._error is None:  # only a failing consumer stops the channels before finish/abort
                raise
            raise self._error from None
        self.size += len(chunk)
        return len(chunk)

    def flush(self) -> None:
        """zstd calls this at the end of its frame; ``out`` is written (and flushed) by ``finish``'s caller."""

    def finish(self) -> tuple[int, str, bytes]:
        """Wait for every chunk to be written and hashed: (size, sha256 hex, BLAKE2b-512 bytes)."""
        for ch in self._channels:
            ch.close()
        for t in self._threads:
            t.join()
        if self._error is not None:
            raise self._error
        return self.size, self._sha256.hexdigest(), self._blake2b.digest()

    def abort(self) -> None:
        for ch in self._channels:
            ch.stop()
        for t in self._threads:
            t.join()
