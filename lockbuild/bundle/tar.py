"""The strict tar reader of a bundle: exactly what the writer writes, checked header by header.

ustar headers and pax 'x' headers for long or non-ASCII names, every checksum and byte of padding checked,
two zero blocks and at most MAX_TRAILER zero bytes at the end. Python's tarfile is not used: it takes a
damaged header after the first as the end of the archive, which would let bytes hide in a signed bundle."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import BinaryIO, Protocol

from lockbuild.bundle.paths import check_member_path
from lockbuild.bundle.zstdframe import TIP, Decompressed
from lockbuild.digest import CHUNK, pump
from lockbuild.errors import IntegrityError
from lockbuild.limits import Limits, MiB
from lockbuild.progress import Progress


def _bad(message: str) -> IntegrityError:
    return IntegrityError(message, tip=TIP)


BLOCK = 512
MAX_PAX = 64 << 10  # the largest pax extended header accepted
MAX_TRAILER = MiB  # the most zero bytes accepted after the end-of-archive marker
_ZERO = bytes(BLOCK)
_MAGIC_USTAR = b"ustar\x0000"
_REGULAR = (b"0", b"\0")
_KINDS = {
    b"1": "a hard link",
    b"2": "a symbolic link",
    b"3": "a character device",
    b"4": "a block device",
    b"5": "a directory",
    b"6": "a FIFO",
    b"7": "a contiguous file",
    b"g": "a pax global header",
    b"x": "a pax extended header",
    b"L": "a GNU long name",
    b"K": "a GNU long link name",
    b"S": "a GNU sparse file",
    b"V": "a GNU volume header",
    b"M": "a GNU multi-volume continuation",
}
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

    def __init__(self, f: Decompressed) -> None:
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
            raise _bad(
                f"the tar stream has a lone zero block at offset {self.offset - 2 * BLOCK}; expected two at its end."
            )
        rest = 0
        while data := self.f.read(CHUNK):
            if data.count(0) != len(data):
                raise _bad("the bundle has data after the end of its tar archive; expected only zero padding.")
            rest += len(data)
            if rest > MAX_TRAILER:
                raise _bad(f"the bundle has more than {MAX_TRAILER} bytes of padding after its tar archive.")


def check_header(h: TarHeader, limits: Limits) -> None:
    if h.type not in _REGULAR:
        kind = _KINDS.get(h.type, f"of tar type {h.type!r}")
        raise _bad(f"refused member {h.name[:120]!r}: it is {kind}; bundles hold only regular files.")
    check_member_path(h.name, limits)
    if h.mode & 0o7000:
        raise _bad(f"refused member {h.name!r}: it has setuid, setgid or sticky bits ({h.mode:o}).")
    if h.size > limits.max_member:
        raise _bad(f"refused member {h.name!r}: {h.size} bytes is over the limit of {limits.max_member}.")


class Advancing(Protocol):
    def advance(self, n: int) -> None: ...


def stream_member(
    tar: TarReader, h: TarHeader, dst: BinaryIO | None, progress: Advancing, hash_piece: Callable[[memoryview], None]
) -> None:
    """Stream one member's data (and its padding) as the decompressor produced it, no copy made: each
    piece (a read-only view) goes to ``hash_piece`` and to ``dst``."""
    sinks = (hash_piece,) if dst is None else (hash_piece, dst.write)
    if pump(tar.f.take, *sinks, limit=h.size, peek=False, advance=progress.advance) < h.size:
        raise _bad(f"the bundle is truncated inside {h.name!r}.")
    tar.offset += h.size
    tar.padding(h.size, repr(h.name))


def copy_member(tar: TarReader, h: TarHeader, dst: BinaryIO | None, progress: Progress) -> str:
    """Stream one member's data (and its padding), hashing it and writing it to ``dst``; its sha256."""
    h_sha = hashlib.sha256()
    stream_member(tar, h, dst, progress, h_sha.update)
    return h_sha.hexdigest()
