"""The zstd layer of a bundle: the frame's structure walked before anything is decompressed (one
complete frame, a bounded window, a content checksum, nothing after it), then a streaming decompressor
whose output is counted against a limit and handed out without copies; and, for ``lockbuild sign``, the
raw bytes hashed as the decompressor reads them."""

from __future__ import annotations

import io
import os
import struct
from collections.abc import Iterator
from typing import IO, BinaryIO, cast

import zstandard

from lockbuild.digest import CHUNK, BackgroundHash
from lockbuild.errors import IntegrityError
from lockbuild.limits import DEFAULT_LIMITS, Limits

_MAGIC = 0xFD2FB528
TIP = "The bundle is damaged or was not made by lockbuild; do not install it. Fetch it again from its publisher."


def _bad(message: str) -> IntegrityError:
    return IntegrityError(message, tip=TIP)


def check_zstd_frame(f: BinaryIO, limits: Limits = DEFAULT_LIMITS) -> None:
    """Walk the zstd frame without decompressing: exactly one complete frame, a window within
    ``limits.zstd_window``, a content checksum, and no bytes after it."""
    f.seek(0, os.SEEK_END)
    end = f.tell()
    f.seek(0)

    def take(n: int, what: str) -> bytes:
        data = f.read(n)
        if len(data) != n:
            raise _bad(f"the bundle is truncated: it ends inside the zstd {what}.")
        return data

    (magic,) = struct.unpack("<I", take(4, "frame header"))
    if magic != _MAGIC:
        raise _bad(f"the bundle is not a zstd frame: expected magic {_MAGIC:#x}, found {magic:#x}.")
    fhd = take(1, "frame header")[0]
    fcs_flag, single, reserved, checksum, dict_flag = fhd >> 6, (fhd >> 5) & 1, (fhd >> 3) & 1, (fhd >> 2) & 1, fhd & 3
    if reserved:
        raise _bad("the bundle's zstd frame header sets a reserved bit.")
    window = 0
    if not single:
        wd = take(1, "window descriptor")[0]
        log = 10 + (wd >> 3)
        window = (1 << log) + ((1 << log) >> 3) * (wd & 7)
    if dict_flag:
        did = int.from_bytes(take((0, 1, 2, 4)[dict_flag], "dictionary id"), "little")
        if did:
            raise _bad("the bundle's zstd frame needs a dictionary; lockbuild bundles never use one.")
    fcs_len = (1 if single else 0, 2, 4, 8)[fcs_flag]
    if fcs_len:
        fcs = int.from_bytes(take(fcs_len, "content size"), "little") + (256 if fcs_len == 2 else 0)
        if fcs > limits.max_bundle:
            raise _bad(f"the bundle's zstd header claims {fcs} bytes of content; expected at most {limits.max_bundle}.")
        if single:
            window = fcs
    if window > limits.zstd_window:
        raise _bad(f"the bundle's zstd window is {window} bytes; expected at most {limits.zstd_window}.")
    if not checksum:
        raise _bad("the bundle's zstd frame has no content checksum; lockbuild always writes one.")
    while True:
        header = int.from_bytes(take(3, "block header"), "little")
        last, kind, size = header & 1, (header >> 1) & 3, header >> 3
        if kind == 3:
            raise _bad("the bundle's zstd frame has a reserved block type.")
        skip = 1 if kind == 1 else size
        if f.tell() + skip > end:
            raise _bad("the bundle is truncated: it ends inside a zstd block.")
        f.seek(skip, os.SEEK_CUR)
        if last:
            break
    take(4, "checksum")
    if f.tell() != end:
        raise _bad(f"the bundle has {end - f.tell()} bytes after its zstd frame; expected none.")
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
    """The decompressed stream of a checked frame (``max_window_size`` is in bytes)."""
    dctx = zstandard.ZstdDecompressor(max_window_size=limits.zstd_window)
    chunks = dctx.read_to_iter(cast(IO[bytes], f), read_size=CHUNK, write_size=CHUNK)
    return Decompressed(chunks, limits.max_bundle + (64 << 20))
