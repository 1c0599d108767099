"""The safe streaming bundle reader.

Before anything is decompressed, the zstd frame's structure is walked (one frame, a bounded window,
a checksum, complete, nothing after it). Then the tar stream is read member by member by a strict
reader of its own: each member must be a regular file named exactly as the manifest's next entry, of
the listed size and sha256. Links, devices, FIFOs, directories, unlisted, missing, duplicate,
reordered or oversized members, damaged headers, non-zero padding and data after the archive's end
fail the whole read; paths are refused, never rewritten. docs/bundle-format.md describes the format.
"""

from __future__ import annotations

import hashlib
import io
import os
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, BinaryIO, cast

import zstandard

from lockbuild.bundle.manifest import MANIFEST, Manifest, Member, check_member_path, parse_manifest
from lockbuild.digest import CHUNK, BackgroundHash
from lockbuild.errors import InstallError, IntegrityError, LockbuildError
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


class _Stream(io.RawIOBase):
    """Decompressed bytes as a file, produced in bounded pieces and counted against a limit."""

    def __init__(self, chunks: Iterator[bytes], limit: int) -> None:
        self.chunks = chunks
        self.buf = memoryview(b"")
        self.pos = 0
        self.total = 0
        self.limit = limit

    def readable(self) -> bool:
        return True

    def readinto(self, b: bytearray | memoryview) -> int:  # type: ignore[override]
        while self.pos >= len(self.buf):
            try:
                chunk = next(self.chunks)
            except StopIteration:
                return 0
            except zstandard.ZstdError as exc:
                raise _bad(f"the bundle's zstd stream is corrupt: {exc}.") from None
            self.buf, self.pos = memoryview(chunk), 0
            self.total += len(chunk)
            if self.total > self.limit:
                raise _bad(f"the bundle decompresses to more than {self.limit} bytes; refused.")
        n = min(len(b), len(self.buf) - self.pos)
        b[:n] = self.buf[self.pos : self.pos + n]
        self.pos += n
        return n


# --- the tar stream ---------------------------------------------------------------------------
# A strict reader of exactly what the writer writes (POSIX ustar headers, pax 'x' headers for long or
# non-ASCII names): every header checksummed, every byte of padding zero, the archive closed by two
# zero blocks followed by at most MAX_TRAILER bytes of zeros and then the end of the zstd frame.
# Python's tarfile is not used here: it treats a damaged header after the first as the end of the
# archive and never looks at what follows it, which would let bytes hide in a signed bundle.

BLOCK = 512
MAX_PAX = 64 << 10  # the largest pax extended header accepted
MAX_TRAILER = 1 << 20  # the most zero bytes accepted after the end-of-archive marker
_ZERO = bytes(BLOCK)
_MAGIC_USTAR = b"ustar\x0000"
_REGULAR = (b"0", b"\0")
_KINDS = {
    b"1": "a hard link", b"2": "a symbolic link", b"3": "a character device", b"4": "a block device",
    b"5": "a directory", b"6": "a FIFO", b"7": "a contiguous file", b"g": "a pax global header",
    b"x": "a pax extended header", b"L": "a GNU long name", b"K": "a GNU long link name",
    b"S": "a GNU sparse file", b"V": "a GNU volume header", b"M": "a GNU multi-volume continuation",
}  # fmt: skip
_PAX_USED = ("path", "size")
_PAX_IGNORED = ("mtime", "atime", "ctime", "uid", "gid", "uname", "gname")


@dataclass(frozen=True)
class TarHeader:
    name: str
    size: int
    mode: int
    type: bytes
    offset: int  # where the header starts in the tar stream


def _number(field: bytes, what: str, offset: int) -> int:
    text = field.split(b"\0", 1)[0].strip(b" ")
    if not text.isdigit() or b"8" in text or b"9" in text:
        if not text:
            return 0
        raise _bad(f"the tar header at offset {offset} has a malformed {what} field {bytes(field)!r}.")
    return int(text, 8)


def _text(field: bytes, what: str, offset: int) -> str:
    try:
        return field.split(b"\0", 1)[0].decode("utf-8")
    except UnicodeDecodeError:
        raise _bad(f"the tar header at offset {offset} has a {what} that is not UTF-8.") from None


def parse_header(block: bytes, offset: int = 0) -> TarHeader:
    """One 512-byte POSIX ustar header, strictly: checksum, magic, octal fields, UTF-8 names."""
    stored = _number(block[148:156], "checksum", offset)
    if stored != sum(block[:148]) + 8 * 0x20 + sum(block[156:]):
        raise _bad(f"the tar header at offset {offset} fails its checksum.")
    if block[257:265] != _MAGIC_USTAR:
        raise _bad(f"the tar header at offset {offset} is not POSIX ustar (magic {bytes(block[257:265])!r}).")
    name = _text(block[0:100], "name", offset)
    prefix = _text(block[345:500], "name prefix", offset)
    return TarHeader(
        name=f"{prefix}/{name}" if prefix else name,
        size=_number(block[124:136], "size", offset),
        mode=_number(block[100:108], "mode", offset),
        type=bytes(block[156:157]),
        offset=offset,
    )


def parse_pax(data: bytes, offset: int = 0) -> dict[str, str]:
    """The records of a pax extended header ("LEN key=value\\n"); only path and size are used,
    a few descriptive keys are ignored, and any other key is refused."""
    records: dict[str, str] = {}
    pos = 0
    while pos < len(data):
        space = data.find(b" ", pos, pos + 20)
        length_text = data[pos:space] if space > pos else b""
        if not length_text.isdigit() or (length_text.startswith(b"0")):
            raise _bad(f"the pax header at offset {offset} has a malformed record length.")
        end = pos + int(length_text)
        if end > len(data) or end <= space + 1 or data[end - 1] != 0x0A:
            raise _bad(f"the pax header at offset {offset} has a record that overruns it.")
        key_b, eq, value_b = data[space + 1 : end - 1].partition(b"=")
        try:
            key, value = key_b.decode("utf-8"), value_b.decode("utf-8")
        except UnicodeDecodeError:
            raise _bad(f"the pax header at offset {offset} has a record that is not UTF-8.") from None
        if not eq or key in records:
            raise _bad(f"the pax header at offset {offset} has a malformed or repeated record {key[:40]!r}.")
        if key not in _PAX_USED + _PAX_IGNORED:
            raise _bad(f"the pax header at offset {offset} has the record {key[:40]!r}; expected only path or size.")
        records[key] = value
        pos = end
    size = records.get("size")
    if size is not None and not (size.isascii() and size.isdigit()):
        raise _bad(f"the pax header at offset {offset} gives the size {size[:40]!r}; expected a number.")
    return records


class TarReader:
    """Headers and data from a tar stream, read forwards once."""

    def __init__(self, f: BinaryIO) -> None:
        self.f = f
        self.offset = 0

    def _exact(self, n: int, what: str) -> bytes:
        data = self.f.read(n)
        if len(data) != n:
            raise _bad(f"the bundle is truncated: its tar stream ends inside {what} (offset {self.offset}).")
        self.offset += n
        return data

    def next(self) -> TarHeader | None:
        """The next member's header (pax records applied), or None at a well-formed end of archive."""
        start = self.offset
        block = self._exact(BLOCK, "a tar header")
        if block == _ZERO:
            self._end()
            return None
        header = parse_header(block, start)
        if header.type != b"x":
            return header
        if header.size > MAX_PAX:
            raise _bad(f"the pax header at offset {start} is {header.size} bytes; expected at most {MAX_PAX}.")
        pax = parse_pax(self._data(header.size, "a pax header"), start)
        start = self.offset
        block = self._exact(BLOCK, "a tar header")
        if block == _ZERO:
            raise _bad(f"the pax header at offset {header.offset} is followed by the end of the archive.")
        header = parse_header(block, start)
        if header.type == b"x":
            raise _bad(f"the tar stream has two pax headers in a row at offset {start}.")
        return TarHeader(
            name=pax.get("path", header.name),
            size=int(pax["size"]) if "size" in pax else header.size,
            mode=header.mode,
            type=header.type,
            offset=start,
        )

    def _data(self, size: int, what: str) -> bytes:
        data = self._exact(size, what)
        self.padding(size, what)
        return data

    def padding(self, size: int, what: str) -> None:
        """The zero bytes that round a member's data up to a whole block."""
        pad = -size % BLOCK
        if pad and any(self._exact(pad, f"the padding after {what}")):
            raise _bad(f"the padding after {what} holds data (offset {self.offset - pad}); expected zeros.")

    def _end(self) -> None:
        """A second zero block, then at most MAX_TRAILER zero bytes, then the end of the stream."""
        if self._exact(BLOCK, "the end-of-archive marker") != _ZERO:
            raise _bad(f"the tar stream has a lone zero block at offset {self.offset - 2 * BLOCK}; "
                       "expected two at its end.")  # fmt: skip
        rest = 0
        while data := self.f.read(CHUNK):
            if data.count(0) != len(data):
                raise _bad("the bundle has data after the end of its tar archive; expected only zero padding.")
            rest += len(data)
            if rest > MAX_TRAILER:
                raise _bad(f"the bundle has more than {MAX_TRAILER} bytes of padding after its tar archive.")


def _open_tar(f: BinaryIO | _Hashing, limits: Limits) -> TarReader:
    """The decompressed tar stream (``max_window_size`` is in bytes), as a strict tar reader."""
    dctx = zstandard.ZstdDecompressor(max_window_size=limits.zstd_window)
    chunks = dctx.read_to_iter(cast(IO[bytes], f), read_size=CHUNK, write_size=CHUNK)
    return TarReader(io.BufferedReader(_Stream(chunks, limits.max_bundle + (64 << 20)), buffer_size=CHUNK))


def _check_header(h: TarHeader, limits: Limits) -> None:
    if h.type not in _REGULAR:
        kind = _KINDS.get(h.type, f"of tar type {h.type!r}")
        raise _bad(f"refused member {h.name[:120]!r}: it is {kind}; bundles hold only regular files.")
    check_member_path(h.name, limits)
    if h.mode & 0o7000:
        raise _bad(f"refused member {h.name!r}: it has setuid, setgid or sticky bits ({h.mode:o}).")
    if h.size > limits.max_member:
        raise _bad(f"refused member {h.name!r}: {h.size} bytes is over the limit of {limits.max_member}.")


def _copy(tar: TarReader, h: TarHeader, dst: BinaryIO | None, progress: Progress) -> str:
    """Stream one member's data (and its padding), hashing it and writing it to ``dst``."""
    h_sha = hashlib.sha256()
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    left = h.size
    while left:
        n = tar.f.readinto(view[: min(CHUNK, left)])  # type: ignore[attr-defined]
        if not n:
            raise _bad(f"the bundle is truncated inside {h.name!r}.")
        h_sha.update(view[:n])
        if dst is not None:
            dst.write(view[:n])
        progress.advance(n)
        left -= n
    tar.offset += h.size
    tar.padding(h.size, repr(h.name))
    return h_sha.hexdigest()


def _create(dest: Path, path: str) -> BinaryIO:
    """A new file at ``path`` under ``dest``: every directory on the way is made here or is a plain
    directory already (never a link), and the file must not exist."""
    parts = path.split("/")
    current = dest
    for part in parts[:-1]:
        current = current / part
        try:
            current.mkdir()
        except FileExistsError:
            if current.is_symlink() or not current.is_dir():
                raise _bad(f"refused member {path!r}: {current} is not a plain directory.") from None
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(current / parts[-1], flags, 0o644)
    except FileExistsError:
        raise _bad(f"refused member {path!r}: {current / parts[-1]} already exists.") from None
    return os.fdopen(fd, "wb")


def _open(path: Path) -> BinaryIO:
    try:
        return path.open("rb")
    except OSError as exc:
        raise LockbuildError(f"cannot read the bundle {path}: {exc.strerror or exc}.") from None


def _read_manifest(tar: TarReader, limits: Limits) -> Manifest:
    first = tar.next()
    if first is None or first.name != MANIFEST:
        found = repr(first.name) if first else "missing"
        raise _bad(f"the bundle's first member is {found}; expected {MANIFEST}.")
    _check_header(first, limits)
    if first.size > limits.max_manifest:
        raise _bad(f"the manifest is {first.size} bytes; expected at most {limits.max_manifest}.")
    raw = io.BytesIO()
    _copy(tar, first, raw, Progress.quiet())
    return parse_manifest(raw.getvalue(), limits)


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
    if dest is not None:
        try:
            dest.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InstallError(f"cannot make the destination {dest}: {exc.strerror or exc}.") from None
    with _open(path) as raw_file:
        check_zstd_frame(raw_file, limits)
        f = _Hashing(raw_file)
        tar = _open_tar(f, limits)
        manifest = _read_manifest(tar, limits)
        if on_manifest is not None:
            on_manifest(manifest)
        progress.start("checking" if dest is None else "unpacking", total_bytes=manifest.unpacked_size,
                       files=len(manifest.members))  # fmt: skip
        listed = {m.path for m in manifest.members}
        done = {MANIFEST}
        for i, member in enumerate(manifest.members):
            h = tar.next()
            if h is None:
                missing = ", ".join(m.path for m in manifest.members[i : i + 3])
                raise _bad(f"the bundle ends before {len(manifest.members) - i} listed member(s): {missing}.")
            _check_header(h, limits)
            if h.name != member.path:
                raise _bad(_misplaced(h.name, done, listed, f"expected {member.path!r} next"))
            if h.size != member.size:
                raise _bad(f"member {h.name!r} is {h.size} bytes; the manifest says {member.size}.")
            _extract_one(tar, h, member, dest, progress)
            done.add(h.name)
            progress.file_done()
        extra = tar.next()
        if extra is not None:
            raise _bad(_misplaced(extra.name, done, listed, "expected the end of the archive"))
        got = f.finish()
    if expect_sha256 is not None and got != expect_sha256:
        raise _bad(f"the bundle changed while it was read: sha256 {got}, signed {expect_sha256}.")
    progress.finish()
    return manifest


def _misplaced(name: str, done: set[str], listed: set[str], expected: str) -> str:
    if name in done:
        return f"refused member {name!r}: it appears twice in the bundle ({expected})."
    if name not in listed:
        return f"refused member {name!r}: it is not listed in the manifest ({expected})."
    return f"member {name!r} is out of order: {expected}."


def _extract_one(tar: TarReader, h: TarHeader, member: Member, dest: Path | None, progress: Progress) -> None:
    if dest is None:
        digest = _copy(tar, h, None, progress)
    else:
        try:
            with _create(dest, member.path) as out:
                digest = _copy(tar, h, out, progress)
        except OSError as exc:
            raise InstallError(
                f"cannot write {member.path} into {dest}: {exc.strerror or exc}.",
                tip="Check the free space and permissions of the destination, then run it again.",
            ) from None
    if digest != member.sha256:
        raise _bad(f"member {member.path!r} has sha256 {digest}; the manifest says {member.sha256}.")


def read_head(path: Path, limits: Limits = DEFAULT_LIMITS) -> tuple[Manifest, bytes]:
    """The manifest and the recipe (the first two members, the recipe checked against its digest);
    the rest of the bundle is not read."""
    with _open(path) as f:
        check_zstd_frame(f, limits)
        tar = _open_tar(f, limits)
        manifest = _read_manifest(tar, limits)
        if not manifest.members or manifest.members[0].path != "recipe.toml":
            raise _bad("the manifest does not list recipe.toml first.")
        want = manifest.members[0]
        second = tar.next()
        if second is None or second.name != want.path or second.size != want.size or want.size > limits.max_manifest:
            raise _bad("the bundle's second member is not the recipe the manifest lists.")
        _check_header(second, limits)
        recipe = io.BytesIO()
        if _copy(tar, second, recipe, Progress.quiet()) != want.sha256:
            raise _bad("the bundle's recipe.toml does not match the manifest's sha256.")
        return manifest, recipe.getvalue()
