"""The safe streaming bundle reader: the pieces every reader of a ``.lbz`` is made of.

It judges no signature and has no member loop of its own (the trust path hands its pieces to the one
extraction). Before anything is decompressed the zstd layer is walked; the strict tar reader then refuses
links, devices, unlisted or reordered members, damaged headers and trailing data (docs/bundle-format.md)."""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO, NamedTuple, cast

from lockbuild.bundle.manifest import MANIFEST, Manifest
from lockbuild.bundle.manifestparse import parse_manifest
from lockbuild.bundle.tar import MAX_TRAILER, TarHeader, TarReader, check_header, copy_member, stream_member
from lockbuild.bundle.zstdframe import TIP, Decompressed, Hashing, check_zstd_frame, decompressed
from lockbuild.errors import IntegrityError, LockbuildError
from lockbuild.frames.framepool import Readable, checked_frames
from lockbuild.frames.seektable import FrameTable, is_framed, read_tables
from lockbuild.fsio import open_regular
from lockbuild.limits import DEFAULT_LIMITS, Limits
from lockbuild.progress import Progress

__all__ = [
    "MAX_TRAILER",
    "Head",
    "TarPiece",
    "TarReader",
    "check_zstd_frame",
    "open_file",
    "open_stream",
    "open_tar",
    "read_head",
    "read_head_raw",
    "read_manifest",
    "tar_pieces",
]


class Head(NamedTuple):
    """The first two members: the manifest (parsed, and the exact bytes the bundle carries, which is what
    a signature's manifest-sha256 covers) and the recipe."""

    manifest: Manifest
    manifest_bytes: bytes
    recipe: bytes


def _bad(message: str) -> IntegrityError:
    return IntegrityError(message, tip=TIP)


def open_tar(f: BinaryIO | Hashing, limits: Limits) -> TarReader:
    """The decompressed tar stream, as a strict tar reader."""
    return TarReader(decompressed(f, limits))


def open_stream(
    raw: BinaryIO, limits: Limits, *, table: FrameTable | None = None, via: Hashing | None = None
) -> TarReader:
    """The tar stream of a bundle, whatever its layout, read forwards once from ``raw``'s start (through
    ``via`` where the raw bytes are hashed on the way). A framed bundle: ``table`` (the signed one, from the
    trust decision) or else the tables the file ends with, checked before any frame is read, then every
    frame hashed against it before it is decompressed (lockbuild/frames/). A bundle made before frames: its
    zstd frames walked, then decompressed (bundle/zstdframe.py)."""
    if table is None:
        size = os.fstat(raw.fileno()).st_size
        if is_framed(raw, size):
            table = read_tables(raw, size, limits)
    raw.seek(0)
    if table is not None:
        return TarReader(Decompressed(checked_frames(cast(Readable, via or raw), table, limits), table.content_size))
    check_zstd_frame(raw, limits)
    return open_tar(via or raw, limits)


def open_file(path: Path, limits: Limits) -> BinaryIO:
    """The bundle, as a regular file of bounded size: a FIFO, a device or a link (say, one swapped in
    after the signatures were checked) is refused, never read."""
    try:
        f, _ = open_regular(path, what="bundle", max_size=limits.max_bundle, error=IntegrityError)
    except FileNotFoundError:
        raise LockbuildError(f"cannot read the bundle {path}: No such file or directory.") from None
    return f


def read_manifest(tar: TarReader, limits: Limits) -> tuple[Manifest, bytes]:
    first = tar.next()
    if first is None or first.name != MANIFEST:
        found = repr(first.name) if first else "missing"
        raise _bad(f"the bundle's first member is {found}; expected {MANIFEST}.")
    check_header(first, limits)
    if first.size > limits.max_manifest:
        raise _bad(f"the manifest is {first.size} bytes; expected at most {limits.max_manifest}.")
    raw = io.BytesIO()
    copy_member(tar, first, raw, Progress.quiet())
    return parse_manifest(raw.getvalue(), limits), raw.getvalue()


class TarPiece:
    """A member of the tar stream, as :func:`lockbuild.bundle.extract.extract` takes it."""

    absent = False

    def __init__(self, tar: TarReader, header: TarHeader) -> None:
        self.tar, self.header = tar, header
        self.name, self.size = header.name, header.size

    def pump(
        self, dst: BinaryIO | None, update: Callable[[bytes | memoryview], None], advance: Callable[[int], None]
    ) -> int:
        stream_member(self.tar, self.header, dst, _Advance(advance), update)
        return self.size

    def skip(self) -> None:
        stream_member(self.tar, self.header, None, _Advance(None), _ignore)


def _ignore(_piece: bytes | memoryview) -> None:
    return None


class _Advance:
    """The one method of Progress that stream_member calls."""

    def __init__(self, advance: Callable[[int], None] | None) -> None:
        self._advance = advance

    def advance(self, n: int) -> None:
        if self._advance is not None:
            self._advance(n)


def tar_pieces(tar: TarReader, limits: Limits) -> Iterator[TarPiece]:
    """The members after the manifest, each header checked (a regular file, a plain path, no setuid
    bits, bounded size); the extraction decides whether each is the one the manifest lists next."""
    while (h := tar.next()) is not None:
        check_header(h, limits)
        piece = TarPiece(tar, h)
        yield piece


def read_head(path: Path, limits: Limits = DEFAULT_LIMITS) -> tuple[Manifest, bytes]:
    """The manifest and the recipe (the first two members, the recipe checked against its digest);
    the rest of the bundle is not read."""
    head = read_head_raw(path, limits)
    return head.manifest, head.recipe


def read_head_raw(path: Path, limits: Limits = DEFAULT_LIMITS) -> Head:
    """As :func:`read_head`, with the manifest's exact bytes."""
    with open_file(path, limits) as f:
        tar = open_stream(f, limits)
        manifest, manifest_bytes = read_manifest(tar, limits)
        if not manifest.members or manifest.members[0].path != "recipe.toml":
            raise _bad("the manifest does not list recipe.toml first.")
        want = manifest.members[0]
        second = tar.next()
        if second is None or second.name != want.path or second.size != want.size or want.size > limits.max_manifest:
            raise _bad("the bundle's second member is not the recipe the manifest lists.")
        check_header(second, limits)
        recipe = io.BytesIO()
        if copy_member(tar, second, recipe, Progress.quiet()) != want.sha256:
            raise _bad("the bundle's recipe.toml does not match the manifest's sha256.")
        return Head(manifest, manifest_bytes, recipe.getvalue())
