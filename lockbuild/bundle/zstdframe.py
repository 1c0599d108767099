"""The zstd layer of a bundle: the frame's structure walked before anything is decompressed (one
complete frame, a bounded window, a content checksum, nothing after it), then a streaming decompressor
whose output is counted against a limit and handed out without copies; and, for ``lockbuild sign``, the
raw bytes hashed as the decompressor reads them."""

from __future__ import annotations

import io
import os
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import BinaryIO

import zstandard

from lockbuild.digest import CHUNK, BackgroundHash
from lockbuild.errors import IntegrityError
from lockbuild.limits import DEFAULT_LIMITS, Limits

_MAGIC = 0xFD2FB528
TIP = "The bundle is damaged or was not made by lockbuild; do not install it. Fetch it again from its publisher."


def _bad(message: str) -> IntegrityError:
    return IntegrityError(message, tip=TIP)


MAX_FRAMES = 2 * 100_000 + 2  # a compressed frame and a stored one per member, at most, and the ends
STORED_BLOCK = 128 << 10  # the largest raw block a stored frame holds (its window: 2**17 bytes)
BATCH = max(1, CHUNK // STORED_BLOCK)  # blocks handed on at once: at most CHUNK bytes out (a block makes <= 128 KiB)


@dataclass(frozen=True)
class FrameHeader:
    window: int
    checksum: bool
    length: int  # the header's length in bytes


def parse_frame_header(take: Callable[[int, str], bytes], limits: Limits) -> FrameHeader:
    """A zstd frame header, strictly: lockbuild's magic, no reserved bit, no dictionary, a bounded window."""
    (magic,) = struct.unpack("<I", take(4, "frame header"))
    if magic != _MAGIC:
        raise _bad(f"the bundle is not a zstd frame: expected magic {_MAGIC:#x}, found {magic:#x}.")
    fhd = take(1, "frame header")[0]
    fcs_flag, single, reserved, checksum, dict_flag = fhd >> 6, (fhd >> 5) & 1, (fhd >> 3) & 1, (fhd >> 2) & 1, fhd & 3
    if reserved:
        raise _bad("the bundle's zstd frame header sets a reserved bit.")
    length = 5
    window = 0
    if not single:
        wd = take(1, "window descriptor")[0]
        log = 10 + (wd >> 3)
        window = (1 << log) + ((1 << log) >> 3) * (wd & 7)
        length += 1
    if dict_flag:
        n = (0, 1, 2, 4)[dict_flag]
        did = int.from_bytes(take(n, "dictionary id"), "little")
        length += n
        if did:
            raise _bad("the bundle's zstd frame needs a dictionary; lockbuild bundles never use one.")
    fcs_len = (1 if single else 0, 2, 4, 8)[fcs_flag]
    if fcs_len:
        fcs = int.from_bytes(take(fcs_len, "content size"), "little") + (256 if fcs_len == 2 else 0)
        length += fcs_len
        if fcs > limits.max_bundle:
            raise _bad(f"the bundle's zstd header claims {fcs} bytes of content; expected at most {limits.max_bundle}.")
        if single:
            window = fcs
    if window > limits.zstd_window:
        raise _bad(f"the bundle's zstd window is {window} bytes; expected at most {limits.zstd_window}.")
    return FrameHeader(window, bool(checksum), length)


def block_header(raw: bytes, frame: FrameHeader) -> tuple[bool, int, int]:
    """A block header: whether it is the frame's last, its type, and the bytes it takes in the file. A
    frame without a checksum is a stored frame and may hold raw blocks only (its bytes are a member's,
    which the manifest's sha256 covers)."""
    header = int.from_bytes(raw, "little")
    last, kind, size = bool(header & 1), (header >> 1) & 3, header >> 3
    if kind == 3:
        raise _bad("the bundle's zstd frame has a reserved block type.")
    if not frame.checksum and kind != 0:
        raise _bad(
            "the bundle's zstd frame compresses but has no content checksum; lockbuild always writes one "
            "(only a stored frame, of raw blocks, goes without)."
        )
    if size > STORED_BLOCK:
        raise _bad(f"the bundle's zstd block is {size} bytes; a block holds at most {STORED_BLOCK}.")
    return last, kind, 1 if kind == 1 else size


def check_zstd_frame(f: BinaryIO, limits: Limits = DEFAULT_LIMITS) -> None:
    """Walk the zstd frames without decompressing: one or more complete frames one after another, each
    with a window within ``limits.zstd_window`` and either a content checksum (a compressed frame) or
    only raw blocks (a stored frame, which model weights take: docs/bundle-format.md), no dictionary,
    and no bytes after the last."""
    f.seek(0, os.SEEK_END)
    end = f.tell()
    f.seek(0)

    def take(n: int, what: str) -> bytes:
        data = f.read(n)
        if len(data) != n:
            raise _bad(f"the bundle is truncated: it ends inside the zstd {what}.")
        return data

    frames = 0
    while True:
        frames += 1
        if frames > MAX_FRAMES:
            raise _bad(f"the bundle has more than {MAX_FRAMES} zstd frames.")
        frame = parse_frame_header(take, limits)
        while True:
            last, _, skip = block_header(take(3, "block header"), frame)
            if f.tell() + skip > end:
                raise _bad("the bundle is truncated: it ends inside a zstd block.")
            f.seek(skip, os.SEEK_CUR)
            if last:
                break
        if frame.checksum:
            take(4, "checksum")
        if f.tell() == end:
            break
        here = f.tell()
        if end - here < 4 or struct.unpack("<I", f.read(4))[0] != _MAGIC:
            raise _bad(f"the bundle has {end - here} bytes after its zstd frame; expected none (or another frame).")
        f.seek(here)
    f.seek(0)


class Hashing(io.RawIOBase):
    """The raw bundle bytes as the decompressor reads them, hashed on the way."""

    def __init__(self, f: BinaryIO) -> None:
        self.f = f
        self.h = BackgroundHash("sha256")

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        data = self.f.read(size)
        self.h.update(data)
        return data

    def readinto(self, b: bytearray | memoryview) -> int:  # type: ignore[override]
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)

    def finish(self) -> str:
        while self.read(CHUNK):
            pass
        return self.h.hexdigest()


class Decompressed:
    """The decompressed stream of a checked frame, as the decompressor produces it: immutable chunks,
    handed out as zero-copy views (``take``: a member's data) or copied (``read``: headers, padding),
    and counted against ``limit`` as they are produced."""

    def __init__(self, chunks: Iterator[bytes], limit: int) -> None:
        self.chunks = chunks
        self.buf = memoryview(b"")
        self.pos = 0
        self.total = 0
        self.limit = limit

    def take(self, n: int) -> memoryview:
        """The next at most ``n`` bytes, as a view of one chunk (read-only: the chunk is ``bytes``, so the
        view stays valid and unchanged wherever it is handed); empty only at the end of the stream."""
        while self.pos >= len(self.buf):
            try:
                chunk = next(self.chunks)
            except StopIteration:
                return memoryview(b"")
            except zstandard.ZstdError as exc:
                raise _bad(f"the bundle's zstd stream is corrupt: {exc}.") from None
            self.buf, self.pos = memoryview(chunk), 0
            self.total += len(chunk)
            if self.total > self.limit:
                raise _bad(f"the bundle decompresses to more than {self.limit} bytes; refused.")
        start = self.pos
        self.pos = min(start + n, len(self.buf))
        return self.buf[start : self.pos]

    def read(self, n: int) -> bytes:
        """The next ``n`` bytes, copied (fewer only at the end of the stream)."""
        first = self.take(n)
        if len(first) == n or not first:
            return first.tobytes()
        parts = [first]
        left = n - len(first)
        while left and (piece := self.take(left)):
            parts.append(piece)
            left -= len(piece)
        return b"".join(parts)


def decompressed(f: BinaryIO | Hashing, limits: Limits) -> Decompressed:
    """The decompressed stream of checked frames, read forwards once (``max_window_size`` is in bytes)."""
    return Decompressed(_frames(f, limits), limits.max_bundle + (64 << 20))


class _Raw:
    """The raw bundle bytes read forwards in large pieces (the source may be hashing as it is read), and
    handed out in the exact lengths the frame walk asks for."""

    def __init__(self, f: BinaryIO | Hashing) -> None:
        self.f = f
        self.buf = b""
        self.pos = 0

    def at_end(self) -> bool:
        if self.pos < len(self.buf):
            return False
        self.buf, self.pos = self.f.read(CHUNK), 0
        return not self.buf

    def take(self, n: int, what: str) -> bytes:
        return bytes(self.view(n, what))

    def view(self, n: int, what: str) -> bytes | memoryview:
        """The next ``n`` bytes: a view of the piece read (no copy) where they lie in it, else joined."""
        if self.pos + n <= len(self.buf):
            self.pos += n
            return memoryview(self.buf)[self.pos - n : self.pos]
        parts = [self.buf[self.pos :]]
        left = n - len(parts[0])
        while left:
            self.buf, self.pos = self.f.read(max(CHUNK, left)), 0
            if not self.buf:
                raise _bad(f"the bundle is truncated: it ends inside the zstd {what}.")
            piece = self.buf[:left]
            self.pos = len(piece)
            parts.append(piece)
            left -= len(piece)
        return b"".join(parts)


def _frames(f: BinaryIO | Hashing, limits: Limits) -> Iterator[bytes]:
    """Every frame's content in order: a stored frame's raw blocks as they are, a compressed frame's
    bytes through a fresh decompressor (which checks its content checksum), ``BATCH`` blocks at a time: the
    output of one call is at most ``BATCH`` blocks' (each at most 128 KiB: CHUNK in all), whatever its input."""
    dctx = zstandard.ZstdDecompressor(max_window_size=limits.zstd_window)
    raw = _Raw(f)
    while not raw.at_end():
        seen: list[bytes] = []
        frame = parse_frame_header(partial(_kept, seen, raw), limits)
        dobj = dctx.decompressobj(write_size=CHUNK) if frame.checksum else None
        if dobj is not None:
            _feed(dobj, b"".join(seen))
        last = False
        while not last:  # BATCH blocks at a time: one piece of at most CHUNK bytes, whatever the input
            parts: list[bytes | memoryview] = []
            for _ in range(BATCH):
                head = raw.view(3, "block header")
                last, _, size = block_header(bytes(head), frame)
                body = raw.view(size, "block") if size else b""
                parts += (body,) if dobj is None else (head, body)
                if last:
                    break
            if dobj is None:
                if out := b"".join(parts):
                    yield out
            else:
                if last:
                    parts.append(raw.view(4, "checksum"))
                if out := _feed(dobj, b"".join(parts)):
                    yield out
        if dobj is not None and not dobj.eof:
            raise _bad("the bundle's zstd frame did not end where its last block said it would.")


def _kept(seen: list[bytes], raw: _Raw, n: int, what: str) -> bytes:
    """The frame header's bytes, kept to be fed to the decompressor after them."""
    data = raw.take(n, what)
    seen.append(data)
    return data


def _feed(dobj: zstandard.ZstdDecompressionObj, data: bytes) -> bytes:
    try:
        return dobj.decompress(data)
    except zstandard.ZstdError as exc:
        raise _bad(f"the bundle's zstd stream is corrupt: {exc}.") from None
