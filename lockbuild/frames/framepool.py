"""Frames on a pool of threads, in order, a fixed number in flight (memory flat in the bundle's size):
the writer compresses the tar stream's fixed-size pieces, each into a frame of its own, so its bytes
never depend on the thread count; the reader hashes each frame as it was read and compares it with the
table before a byte of it is decompressed. zstd and sha256 release the GIL, so the threads run at once."""

from __future__ import annotations

import hashlib
import os
import threading
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import BinaryIO, Protocol, cast

import zstandard

from lockbuild.bundle.zstdframe import STORED_BLOCK
from lockbuild.errors import IntegrityError
from lockbuild.frames.seektable import FRAME_SIZE, TIP, Frame, FrameTable, encode_tables
from lockbuild.limits import Limits

LEVEL = -3  # the level of the unframed writer (bundle/write.py says why)


def stored_frame(piece: bytes) -> bytes:
    """``piece`` as a zstd frame of raw blocks: magic, a descriptor of 0xA0 (a single segment, a 4-byte
    content size, no checksum: the frame's sha256 in the signed table covers its bytes), the content size,
    then blocks of 128 KiB, the last one shorter and flagged last."""
    parts = [b"\x28\xb5\x2f\xfd\xa0", len(piece).to_bytes(4, "little")]
    for at in range(0, len(piece), STORED_BLOCK):
        block = piece[at : at + STORED_BLOCK]
        last = at + STORED_BLOCK >= len(piece)
        parts += [((len(block) << 3) | int(last)).to_bytes(3, "little"), block]
    return b"".join(parts)


def workers(threads: int | None) -> int:
    """``threads``, or the cores this process may run on (its affinity: ``taskset`` and cpusets count)."""
    return max(1, threads if threads is not None else len(os.sched_getaffinity(0)))


def in_flight(threads: int | None) -> int:
    """Frames handed to the pool and not yet written or yielded: one a worker, and two waiting (memory
    is about three FRAME_SIZE pieces a worker, whatever the bundle's size)."""
    return workers(threads) + 2


class FramedWriter:
    """Cuts what is written into FRAME_SIZE pieces, compresses each on the pool into an independent frame
    (content size and checksum in it), writes them in order, and ends with the tables. A piece that lies
    wholly inside a model's weights (between ``begin_stored`` and ``end_stored``) is not compressed: its
    frame holds raw blocks (a *stored* frame), since weights do not compress."""

    def __init__(self, out: BinaryIO, threads: int | None = None) -> None:
        self.out = out
        self.n = workers(threads)
        self.pool = ThreadPoolExecutor(max_workers=self.n, thread_name_prefix="lockbuild-zstd")
        self.local = threading.local()
        self.buf = bytearray()
        self.cut = 0  # the bytes handed to the pool so far: where the buffer starts in the tar stream
        self.stored: list[tuple[int, int | None]] = []  # (start, end or None while open): the weights' ranges
        self.flight: deque[Future[tuple[bytes, int, bytes]]] = deque()
        self.sizes: list[tuple[int, int]] = []
        self.digests: list[bytes] = []

    def _compress(self, piece: bytes, stored: bool) -> tuple[bytes, int, bytes]:
        if stored:
            frame = stored_frame(piece)
        else:
            cctx = getattr(self.local, "cctx", None)
            if cctx is None:
                cctx = self.local.cctx = zstandard.ZstdCompressor(
                    level=LEVEL, write_checksum=True, write_content_size=True
                )
            frame = cctx.compress(piece)
        return frame, len(piece), hashlib.sha256(frame).digest()

    def _inside_weights(self, start: int, end: int) -> bool:
        self.stored = [r for r in self.stored if r[1] is None or r[1] > start]  # ranges behind the cut go
        return any(s <= start and (e is None or e >= end) for s, e in self.stored)

    def _submit(self, piece: bytes) -> None:
        stored = self._inside_weights(self.cut, self.cut + len(piece))
        self.cut += len(piece)
        self.flight.append(self.pool.submit(self._compress, piece, stored))
        while len(self.flight) > in_flight(self.n):
            self._drain_one()

    def _drain_one(self) -> None:
        frame, content, digest = self.flight.popleft().result()
        self.out.write(frame)
        self.sizes.append((len(frame), content))
        self.digests.append(digest)

    def write(self, data: bytes | memoryview) -> None:
        self.buf += data
        if len(self.buf) >= FRAME_SIZE:
            done = 0
            with memoryview(self.buf) as view:  # one copy of each piece, released before the buffer moves
                while len(view) - done >= FRAME_SIZE:
                    self._submit(bytes(view[done : done + FRAME_SIZE]))
                    done += FRAME_SIZE
            del self.buf[:done]

    def begin_stored(self) -> None:
        """A model's weights begin (their tar header first): the pieces wholly inside them are stored."""
        self.stored.append((self.cut + len(self.buf), None))

    def end_stored(self) -> None:
        """The weights (and their padding) end here."""
        self.stored[-1] = (self.stored[-1][0], self.cut + len(self.buf))

    def discard(self) -> None:
        """After a failure: nothing more is written; the frames not yet compressed are dropped."""
        self.pool.shutdown(cancel_futures=True)
        self.flight.clear()

    def close(self) -> str:
        """Write the last frame and the tables; the sha256 of the tables (a statement's frames-sha256)."""
        try:
            if self.buf:
                self._submit(bytes(self.buf))
                self.buf = bytearray()
            while self.flight:
                self._drain_one()
        finally:
            self.pool.shutdown(cancel_futures=True)
        tables = encode_tables(self.sizes, self.digests)
        self.out.write(tables)
        return hashlib.sha256(tables).hexdigest()


def _check(frame: Frame, index: int, data: memoryview, decompress: bool, limits: Limits) -> bytes | None:
    """One frame: its bytes hashed and compared with the table, and only then, with ``decompress``, its
    header checked (no dictionary, a bounded window, the table's content size) and decompressed. A content
    checksum is not required: a stored frame has none, and the signed sha256 covers every frame's bytes."""
    if len(data) != frame.size:
        raise IntegrityError(f"the bundle is truncated: it ends inside frame {index}.", tip=TIP)
    if hashlib.sha256(data).digest() != frame.sha256:
        raise IntegrityError(
            f"the bundle's frame {index} (bytes {frame.offset} to {frame.offset + frame.size}) does not have the "
            "sha256 its signed frame table lists; it was not decompressed.",
            tip=TIP,
        )
    if not decompress:
        return None
    try:
        params = zstandard.get_frame_parameters(data)
        if params.dict_id or params.content_size != frame.content:
            raise IntegrityError(
                f"the bundle's frame {index} header does not match the table (content {params.content_size}, "
                f"expected {frame.content}; lockbuild writes no dictionary).",
                tip=TIP,
            )
        if params.window_size > limits.zstd_window:
            raise IntegrityError(f"the bundle's frame {index} window is over {limits.zstd_window} bytes.", tip=TIP)
        dobj = zstandard.ZstdDecompressor(max_window_size=limits.zstd_window).decompressobj()
        out = dobj.decompress(data)
    except zstandard.ZstdError as exc:
        raise IntegrityError(f"the bundle's frame {index} is corrupt: {exc}.", tip=TIP) from None
    if not dobj.eof or dobj.unused_data or len(out) != frame.content:
        raise IntegrityError(f"the bundle's frame {index} is not one zstd frame of {frame.content} bytes.", tip=TIP)
    return out


class Readable(Protocol):
    def readinto(self, b: bytearray | memoryview, /) -> int: ...


def _read_exactly(f: Readable, view: memoryview) -> memoryview:
    """``view`` filled from ``f``, or the part a file that ended filled (the frame's check says so)."""
    got = 0
    while got < len(view) and (n := f.readinto(view[got:])):
        got += n
    return view[:got]


def checked_frames(
    f: Readable, table: FrameTable, limits: Limits, *, decompress: bool = True, threads: int | None = None
) -> Iterator[bytes]:
    """Every frame in order, read once from ``f`` (at the file's start) into a ring of reused buffers (no
    fresh memory a frame), each checked against ``table`` on the pool, ``in_flight`` at once; yields each
    frame's content (or b"" without ``decompress``). A buffer is read into again only once the frame it
    held has been checked (its future's result taken: the ring is one longer than the frames in flight)."""
    n = workers(threads)
    pool = ThreadPoolExecutor(max_workers=n, thread_name_prefix="lockbuild-frames")
    flight: deque[Future[bytes | None]] = deque()
    largest = max(fr.size for fr in table.frames)  # at most MAX_COMPRESSED (seektable.read_tables)
    ring = [bytearray(largest) for _ in range(in_flight(n) + 1)]
    try:
        for i, frame in enumerate(table.frames):
            data = _read_exactly(f, memoryview(ring[i % len(ring)])[: frame.size])
            flight.append(pool.submit(_check, frame, i, data, decompress, limits))
            if len(flight) >= in_flight(n):
                yield flight.popleft().result() or b""
        while flight:
            yield flight.popleft().result() or b""
    finally:
        pool.shutdown(cancel_futures=True)


def count_frames(f: BinaryIO, table: FrameTable, limits: Limits, threads: int | None = None) -> int:
    """Hash every frame against ``table`` without decompressing: the whole file is then the signed one."""
    n = 0
    for _ in checked_frames(cast(Readable, f), table, limits, decompress=False, threads=threads):
        n += 1
    return n
