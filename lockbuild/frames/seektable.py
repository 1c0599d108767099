"""The frame tables at the end of a framed bundle, pure: encoded by the writer, parsed and checked by
every reader before any frame is decompressed. Two skippable frames: each frame's sha256 (magic
0x184D2A5D), then zstd's standard seek table (magic 0x184D2A5E, footer 0x8F92EAB1); stock ``zstd -d`` skips
both, and a statement signs the sha256 of the two together (``frames-sha256``; docs/bundle-format.md, 9)."""

from __future__ import annotations

import hashlib
import os
import struct
from dataclasses import dataclass
from typing import BinaryIO

from lockbuild.errors import IntegrityError
from lockbuild.limits import Limits, MiB

FRAME_SIZE = 2 * MiB  # every frame's decompressed size, the last one's at most
SKIPPABLE_SEEK = 0x184D2A5E
SKIPPABLE_HASHES = 0x184D2A5D
SEEKABLE_MAGIC = 0x8F92EAB1
FOOTER = 9
HASHES_TAG = b"LBFH"
# zstd's bound on a frame of FRAME_SIZE (ZSTD_compressBound) plus its header and checksum
MAX_COMPRESSED = FRAME_SIZE + (FRAME_SIZE >> 8) + (128 << 10) + 64
TIP = "The bundle is damaged or was not made by lockbuild; do not install it. Fetch it again from its publisher."


def _bad(message: str) -> IntegrityError:
    return IntegrityError(message, tip=TIP)


@dataclass(frozen=True)
class Frame:
    offset: int  # where its compressed bytes start in the file
    size: int  # compressed
    content: int  # decompressed
    sha256: bytes


@dataclass(frozen=True)
class FrameTable:
    """A framed bundle's checked tables: every frame, where the tables start, and their sha256."""

    frames: tuple[Frame, ...]
    tables_at: int
    file_size: int
    sha256: str  # of the tables' bytes, as a statement's frames-sha256 signs it

    @property
    def content_size(self) -> int:
        return sum(f.content for f in self.frames)


def encode_tables(sizes: list[tuple[int, int]], digests: list[bytes]) -> bytes:
    """The two skippable frames for frames of (compressed, decompressed) ``sizes`` and sha256 ``digests``."""
    n = len(sizes)
    hashes = HASHES_TAG + struct.pack("<I", n) + b"".join(digests)
    seek = b"".join(struct.pack("<II", c, d) for c, d in sizes) + struct.pack("<IBI", n, 0, SEEKABLE_MAGIC)
    return (
        struct.pack("<II", SKIPPABLE_HASHES, len(hashes))
        + hashes
        + struct.pack("<II", SKIPPABLE_SEEK, len(seek))
        + seek
    )


def tables_length(n: int) -> int:
    return 8 + 8 + 32 * n + 8 + 8 * n + FOOTER


def is_framed(f: BinaryIO, size: int) -> bool:
    """Whether the file ends with a seek table footer (then it must be a framed bundle, all of it)."""
    if size < FOOTER:
        return False
    f.seek(size - 4)
    framed: bool = f.read(4) == struct.pack("<I", SEEKABLE_MAGIC)
    f.seek(0)
    return framed


def max_frames(limits: Limits) -> int:
    return (limits.max_bundle + (64 * MiB)) // FRAME_SIZE + 1


def read_tables(f: BinaryIO, size: int, limits: Limits) -> FrameTable:
    """Parse and check the tables at the end of a file of ``size`` bytes, before any frame is read: a count
    within the bounds, two well-formed skippable frames that end the file, the same count in both, every
    frame's sizes within the bounds (each decompresses to FRAME_SIZE but the last, which is not empty and
    at most that), and frames that tile the file from its first byte to the tables, with no gap, no
    overlap and nothing past the tables."""
    if size < FOOTER:
        raise _bad(f"the bundle is {size} bytes; too short for a frame table.")
    f.seek(size - FOOTER)
    n, descriptor, magic = struct.unpack("<IBI", f.read(FOOTER))
    if magic != SEEKABLE_MAGIC:
        raise _bad(f"the bundle does not end with a seek table: expected magic {SEEKABLE_MAGIC:#x}, found {magic:#x}.")
    if descriptor != 0:
        raise _bad(f"the bundle's seek table descriptor is {descriptor:#x}; lockbuild writes 0 (no checksums).")
    if n == 0 or n > max_frames(limits):
        raise _bad(f"the bundle's seek table lists {n} frames; expected 1 to {max_frames(limits)}.")
    length = tables_length(n)
    if length > size:
        raise _bad(f"the bundle's frame tables ({length} bytes for {n} frames) point past its start ({size} bytes).")
    start = size - length
    f.seek(start)
    raw = f.read(length)
    f.seek(0)
    if len(raw) != length:
        raise _bad("the bundle is truncated: it ends inside its frame tables.")
    magic_h, len_h = struct.unpack_from("<II", raw, 0)
    if magic_h != SKIPPABLE_HASHES or len_h != 8 + 32 * n or raw[8:12] != HASHES_TAG:
        raise _bad("the bundle's frame hash table is not the skippable frame lockbuild writes before the seek table.")
    if struct.unpack_from("<I", raw, 12)[0] != n:
        raise _bad("the bundle's frame hash table and seek table count different numbers of frames.")
    at = 16 + 32 * n
    magic_s, len_s = struct.unpack_from("<II", raw, at)
    if magic_s != SKIPPABLE_SEEK or len_s != 8 * n + FOOTER:
        raise _bad("the bundle's seek table is not a skippable frame of its entries and footer.")
    frames: list[Frame] = []
    offset = 0
    for i in range(n):
        csize, dsize = struct.unpack_from("<II", raw, at + 8 + 8 * i)
        last = i == n - 1
        if csize < 6 or csize > MAX_COMPRESSED:
            raise _bad(f"the bundle's frame {i} is {csize} bytes compressed; expected 6 to {MAX_COMPRESSED}.")
        if dsize > FRAME_SIZE or dsize == 0 or (not last and dsize != FRAME_SIZE):
            raise _bad(
                f"the bundle's frame {i} decompresses to {dsize} bytes; expected {FRAME_SIZE}"
                + (" (the last: 1 to that)." if last else ".")
            )
        frames.append(Frame(offset, csize, dsize, raw[16 + 32 * i : 48 + 32 * i]))
        offset += csize
    if offset != start:
        how = "overlap its frame tables" if offset > start else f"leave {start - offset} bytes before its frame tables"
        raise _bad(f"the bundle's frames ({offset} bytes) {how}; the frames must fill the file up to the tables.")
    return FrameTable(tuple(frames), start, size, hashlib.sha256(raw).hexdigest())


def read_file_tables(f: BinaryIO, limits: Limits) -> FrameTable:
    """As :func:`read_tables`, for an open file's current size."""
    return read_tables(f, os.fstat(f.fileno()).st_size, limits)
