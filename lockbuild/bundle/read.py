"""The safe streaming bundle reader.

Before anything is decompressed, the zstd frame's structure is walked (one frame, a bounded window,
a checksum, complete, nothing after it). Then the tar stream is read member by member: each must be
a regular file named exactly as the manifest's next entry, of the listed size and sha256. Links,
devices, FIFOs, directories, unlisted, missing, duplicate, reordered or oversized members fail the
whole read; paths are refused, never rewritten.
"""

from __future__ import annotations

import hashlib
import io
import os
import struct
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

import zstandard

from lockbuild.bundle.manifest import MANIFEST, Manifest, Member, check_member_path, parse_manifest
from lockbuild.digest import CHUNK
from lockbuild.errors import IntegrityError
from lockbuild.limits import DEFAULT_LIMITS, Limits
from lockbuild.progress import Progress

_MAGIC = 0xFD2FB528
_TIP = "The bundle is damaged or was not made by lockbuild; do not install it. Fetch it again from its publisher."


def _bad(message: str) -> IntegrityError:
    return IntegrityError(message, tip=_TIP)


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


class _Hashing(io.RawIOBase):
    """The raw bundle bytes as the decompressor reads them, hashed on the way."""

    def __init__(self, f: BinaryIO) -> None:
        self.f = f
        self.h = hashlib.sha256()

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


class _Stream(io.RawIOBase):
    """Decompressed bytes as a file, produced in bounded pieces and counted against a limit."""

    def __init__(self, chunks: Iterator[bytes], limit: int, progress: Progress) -> None:
        self.chunks = chunks
        self.buf = b""
        self.pos = 0
        self.total = 0
        self.limit = limit
        self.progress = progress

    def readable(self) -> bool:
        return True

    def readinto(self, b: bytearray | memoryview) -> int:  # type: ignore[override]
        while self.pos >= len(self.buf):
            try:
                self.buf = next(self.chunks)
            except StopIteration:
                return 0
            except zstandard.ZstdError as exc:
                raise _bad(f"the bundle's zstd stream is corrupt: {exc}.") from None
            self.pos = 0
            self.total += len(self.buf)
            if self.total > self.limit:
                raise _bad(f"the bundle decompresses to more than {self.limit} bytes; refused.")
        n = min(len(b), len(self.buf) - self.pos)
        b[:n] = self.buf[self.pos : self.pos + n]
        self.pos += n
        return n


def _open_tar(f: BinaryIO | _Hashing, limits: Limits, progress: Progress) -> tuple[tarfile.TarFile, _Stream]:
    dctx = zstandard.ZstdDecompressor(max_window_size=limits.zstd_window)
    stream = _Stream(dctx.read_to_iter(f, read_size=CHUNK, write_size=CHUNK), limits.max_bundle + (64 << 20), progress)
    buffered = io.BufferedReader(stream, buffer_size=CHUNK)
    try:
        tf = tarfile.open(fileobj=buffered, mode="r|", bufsize=CHUNK)
    except tarfile.TarError as exc:
        raise _bad(f"the bundle is not a tar archive: {exc}.") from None
    return tf, stream


def _next(tf: tarfile.TarFile) -> tarfile.TarInfo | None:
    try:
        return tf.next()
    except tarfile.TarError as exc:
        raise _bad(f"the bundle's tar stream is malformed: {exc}.") from None


def _check_header(ti: tarfile.TarInfo, limits: Limits) -> None:
    check_member_path(ti.name, limits)
    if not ti.isreg():
        kind = (
            "a symbolic link" if ti.issym() else "a hard link" if ti.islnk() else "a directory" if ti.isdir()
            else "a device" if ti.isdev() else "a FIFO" if ti.isfifo() else f"type {ti.type!r}"
        )  # fmt: skip
        raise _bad(f"refused member {ti.name!r}: it is {kind}; bundles hold only regular files.")
    if ti.mode & 0o7000:
        raise _bad(f"refused member {ti.name!r}: it has setuid, setgid or sticky bits ({ti.mode:o}).")
    if ti.size > limits.max_member:
        raise _bad(f"refused member {ti.name!r}: {ti.size} bytes is over the limit of {limits.max_member}.")


def _copy(tf: tarfile.TarFile, ti: tarfile.TarInfo, dst: BinaryIO | None, progress: Progress) -> str:
    src = tf.extractfile(ti)
    assert src is not None
    h = hashlib.sha256()
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    left = ti.size
    try:
        while left:
            n = src.readinto(view[: min(CHUNK, left)])
            if not n:
                raise _bad(f"the bundle is truncated inside {ti.name!r}.")
            h.update(view[:n])
            if dst is not None:
                dst.write(view[:n])
            progress.advance(n)
            left -= n
    except tarfile.TarError as exc:
        raise _bad(f"the bundle's tar stream is malformed inside {ti.name!r}: {exc}.") from None
    return h.hexdigest()


def _create(dest: Path, path: str) -> BinaryIO:
    target = dest.joinpath(*path.split("/"))
    parent = target.parent
    parent.mkdir(parents=True, exist_ok=True)
    if parent.resolve() != dest.resolve().joinpath(*path.split("/")[:-1]):
        raise _bad(f"refused member {path!r}: its directory resolves outside the destination.")
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o644)
    return os.fdopen(fd, "wb")


def read_bundle(
    path: Path,
    *,
    dest: Path | None = None,
    limits: Limits = DEFAULT_LIMITS,
    progress: Progress | None = None,
    on_manifest: Callable[[Manifest], None] | None = None,
    expect_sha256: str | None = None,
) -> Manifest:
    """Check every member of the bundle against its manifest; with ``dest``, write them there.

    ``on_manifest`` runs once the manifest is read, before any other member: a place to refuse early.
    With ``expect_sha256`` (the digest the signatures were checked over), the bytes read must be that
    file: a bundle swapped after its signature was checked is refused.
    The caller owns ``dest`` (an empty staging directory) and removes it if this raises.
    """
    progress = progress or Progress.quiet()
    with path.open("rb") as raw_file:
        check_zstd_frame(raw_file, limits)
        f = _Hashing(raw_file)
        tf, stream = _open_tar(f, limits, progress)
        first = _next(tf)
        if first is None or first.name != MANIFEST:
            raise _bad(f"the bundle's first member is {first.name if first else 'missing'!r}; expected {MANIFEST}.")
        _check_header(first, limits)
        if first.size > limits.max_manifest:
            raise _bad(f"the manifest is {first.size} bytes; expected at most {limits.max_manifest}.")
        raw = io.BytesIO()
        _copy(tf, first, raw, Progress.quiet())
        manifest = parse_manifest(raw.getvalue(), limits)
        if on_manifest is not None:
            on_manifest(manifest)
        progress.start("checking" if dest is None else "unpacking", total_bytes=manifest.unpacked_size,
                       files=len(manifest.members))  # fmt: skip
        listed = {m.path: m for m in manifest.members}
        for i, member in enumerate(manifest.members):
            ti = _next(tf)
            if ti is None:
                missing = ", ".join(m.path for m in manifest.members[i : i + 3])
                raise _bad(f"the bundle ends before {len(manifest.members) - i} listed member(s): {missing}.")
            _check_header(ti, limits)
            if ti.name != member.path:
                if ti.name == MANIFEST or ti.name in [m.path for m in manifest.members[:i]]:
                    raise _bad(f"refused member {ti.name!r}: it appears twice in the bundle.")
                if ti.name not in listed:
                    raise _bad(f"refused member {ti.name!r}: it is not listed in the manifest.")
                raise _bad(f"member {ti.name!r} is out of order: expected {member.path!r} next.")
            if ti.size != member.size:
                raise _bad(f"member {ti.name!r} is {ti.size} bytes; the manifest says {member.size}.")
            _extract_one(tf, ti, member, dest, progress)
            progress.file_done()
        extra = _next(tf)
        if extra is not None:
            raise _bad(f"refused member {extra.name!r}: it is not listed in the manifest.")
        _drain(stream)
        got = f.finish()
    if expect_sha256 is not None and got != expect_sha256:
        raise _bad(f"the bundle changed while it was read: sha256 {got}, signed {expect_sha256}.")
    progress.finish()
    return manifest


def _extract_one(tf: tarfile.TarFile, ti: tarfile.TarInfo, member: Member, dest: Path | None, progress: Progress) -> None:
    if dest is None:
        digest = _copy(tf, ti, None, progress)
    else:
        with _create(dest, member.path) as out:
            digest = _copy(tf, ti, out, progress)
    if digest != member.sha256:
        raise _bad(f"member {member.path!r} has sha256 {digest}; the manifest says {member.sha256}.")


def _drain(stream: _Stream) -> None:
    """After the tar's end: only zero padding may remain, and the zstd frame must end cleanly."""
    buf = bytearray(CHUNK)
    while True:
        n = stream.readinto(buf)
        if not n:
            return
        if any(buf[:n]):
            raise _bad("the bundle has data after the end of its tar archive; expected only padding.")


def read_head(path: Path, limits: Limits = DEFAULT_LIMITS) -> tuple[Manifest, bytes]:
    """The manifest and the recipe (the first two members, the recipe checked against its digest);
    the rest of the bundle is not read."""
    with path.open("rb") as f:
        check_zstd_frame(f, limits)
        tf, _ = _open_tar(f, limits, Progress.quiet())
        first = _next(tf)
        if first is None or first.name != MANIFEST:
            raise _bad(f"the bundle's first member is not {MANIFEST}.")
        _check_header(first, limits)
        if first.size > limits.max_manifest:
            raise _bad(f"the manifest is {first.size} bytes; expected at most {limits.max_manifest}.")
        raw = io.BytesIO()
        _copy(tf, first, raw, Progress.quiet())
        manifest = parse_manifest(raw.getvalue(), limits)
        if not manifest.members or manifest.members[0].path != "recipe.toml":
            raise _bad("the manifest does not list recipe.toml first.")
        want = manifest.members[0]
        second = _next(tf)
        if second is None or second.name != want.path or second.size != want.size or want.size > limits.max_manifest:
            raise _bad("the bundle's second member is not the recipe the manifest lists.")
        _check_header(second, limits)
        recipe = io.BytesIO()
        if _copy(tf, second, recipe, Progress.quiet()) != want.sha256:
            raise _bad("the bundle's recipe.toml does not match the manifest's sha256.")
        return manifest, recipe.getvalue()
