"""Media parts: a bundle cut into pieces that `cat` joins back into the identical file (:func:`split`).

The part list ``NAME.lbz.parts.toml`` is not signed: the signatures cover the joined file. It lets a
damaged part be named as soon as it is read, instead of a bundle failing as a whole after gigabytes."""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from lockbuild import fsio
from lockbuild.bundle.manifest import toml_string
from lockbuild.digest import pump
from lockbuild.documents import loads_toml
from lockbuild.errors import IntegrityError, LockbuildError
from lockbuild.fsio import open_regular, read_regular
from lockbuild.limits import DEFAULT_LIMITS, Limits, MiB
from lockbuild.trust import signature_path

PARTS_SUFFIX = ".parts.toml"
_UNITS = {
    "": 1,
    "K": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "KI": 1 << 10,
    "MI": MiB,
    "GI": 1 << 30,
    "TI": 1 << 40,
}
_SIZE = re.compile(r"(\d+)\s*([KMGT]I?)?B?", re.IGNORECASE)
_PART_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,250}")
_HEX = re.compile(r"[0-9a-f]{64}")
MAX_PARTS = 10_000
MAX_LIST = 4 << 20
_TIP = "Copy the part again from the original media (or split the bundle again) and retry."


def parse_size(text: str) -> int:
    """'4G' = 4×10⁹ bytes (fits FAT32's 4 GiB − 1 limit), '700M', '4GiB' = 4×2³⁰, or plain bytes."""
    m = _SIZE.fullmatch(text.strip())
    if not m or int(m.group(1)) <= 0:
        raise LockbuildError(f"--size {text!r} is not a size; expected e.g. 4G (10⁹ bytes), 700M, 4GiB or 1048576.")
    return int(m.group(1)) * _UNITS[(m.group(2) or "").upper()]


@dataclass(frozen=True)
class Part:
    name: str
    size: int
    sha256: str


@dataclass(frozen=True)
class PartList:
    file: str
    size: int
    sha256: str
    parts: tuple[Part, ...]

    def to_toml(self) -> bytes:
        lines = [
            "format = 1",
            f"file = {toml_string(self.file)}",
            f"size = {self.size}",
            f"sha256 = {toml_string(self.sha256)}",
            "",
        ]
        for p in self.parts:
            lines += [
                "[[parts]]",
                f"name = {toml_string(p.name)}",
                f"size = {p.size}",
                f"sha256 = {toml_string(p.sha256)}",
                "",
            ]
        return "\n".join(lines).encode()


def split(bundle: Path, size: int, out: Path) -> Path:
    """Write the parts, the signature copy and the part list into ``out``; returns the part list.

    ``NAME.lbz.part000``, ``part001``, … (each ``size`` bytes, the last shorter; wider numbers past 1000
    parts, so the names sort in order), ``NAME.lbz.minisig``, and ``NAME.lbz.parts.toml``: ``format``,
    ``file``, ``size``, ``sha256`` of the whole file, and a ``[[parts]]`` table (``name``, ``size``,
    ``sha256``) per part."""
    out.mkdir(parents=True, exist_ok=True)
    whole = hashlib.sha256()
    parts: list[Part] = []
    total = 0
    try:  # a regular file, by descriptor: a FIFO or a device is refused, never read
        src, whole_size = open_regular(bundle, what="bundle", max_size=DEFAULT_LIMITS.max_bundle, error=IntegrityError)
    except FileNotFoundError:
        raise LockbuildError(f"the bundle {bundle} does not exist.", tip="Check the path.") from None
    count = max(1, -(-whole_size // size))
    if count > MAX_PARTS:
        src.close()
        raise LockbuildError(f"--size {size} would cut {bundle.name} into {count} parts; at most {MAX_PARTS}.")
    width = max(3, len(str(count - 1)))  # names sort in order, so `cat NAME.lbz.part*` joins them
    with src:
        while True:
            name = f"{bundle.name}.part{len(parts):0{width}d}"
            h = hashlib.sha256()
            fsio.sweep_beside(out / name)  # what a killed split left
            tmp = fsio.temp_beside(out / name)
            try:
                with fsio.create_new(tmp) as dst:
                    n = pump(src.read, h.update, whole.update, dst.write, limit=size, peek=False)
                    dst.flush()
                    os.fsync(dst.fileno())
                if n == 0 and parts:
                    break
                tmp.replace(out / name)
            finally:
                tmp.unlink(missing_ok=True)
            parts.append(Part(name, n, h.hexdigest()))
            total += n
            if n < size:
                break
    sig = signature_path(bundle)
    if sig.exists():  # copied as read: a regular file within the readers' limit
        blocks = read_regular(
            sig, what="signature file", max_size=DEFAULT_LIMITS.max_signature_file, error=IntegrityError
        )
        _replace(out / sig.name, blocks)
    listing = PartList(bundle.name, total, whole.hexdigest(), tuple(parts))
    path = out / f"{bundle.name}{PARTS_SUFFIX}"
    _replace(path, listing.to_toml())
    return path


def _replace(path: Path, data: bytes) -> None:
    """``data`` at ``path``, made as a new file beside it and renamed over it: a link planted at ``path``
    is replaced, never written through."""
    tmp = fsio.temp_beside(path)
    try:
        fsio.write_new(tmp, data, sync=True)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


def _bad(message: str) -> IntegrityError:
    return IntegrityError(message, tip=_TIP)


def parse_part_list(raw: bytes, source: str) -> PartList:
    """Strictly: plain part names (no '/', no '..'), sizes and sha256s, at most MAX_PARTS parts."""
    data = loads_toml(
        raw, max_bytes=MAX_LIST, refuse=lambda why: _bad(f"{source} is not a valid part list: {why.detail}.")
    )
    if data.get("format") != 1 or set(data) != {"format", "file", "size", "sha256", "parts"}:
        raise _bad(f"{source} is not a format-1 part list (expected format, file, size, sha256, parts).")
    file, size, sha, parts = data["file"], data["size"], data["sha256"], data["parts"]
    ok = isinstance(file, str) and _PART_NAME.fullmatch(file) and isinstance(size, int) and size >= 0
    if not ok or not isinstance(sha, str) or not _HEX.fullmatch(sha) or not isinstance(parts, list):
        raise _bad(f"{source} has a malformed file, size, sha256 or parts.")
    if not 0 < len(parts) <= MAX_PARTS:
        raise _bad(f"{source} lists {len(parts)} parts; expected 1 to {MAX_PARTS}.")
    out: list[Part] = []
    for i, p in enumerate(parts):
        if not isinstance(p, dict) or set(p) != {"name", "size", "sha256"}:
            raise _bad(f"{source}: parts[{i}] must have exactly name, size and sha256.")
        name, psize, psha = p["name"], p["size"], p["sha256"]
        if not isinstance(name, str) or not _PART_NAME.fullmatch(name) or ".." in name:
            raise _bad(f"{source}: parts[{i}] name {str(name)[:80]!r} is not a plain file name.")
        if not isinstance(psize, int) or isinstance(psize, bool) or psize < 0:
            raise _bad(f"{source}: parts[{i}] size is not a number of bytes.")
        if not isinstance(psha, str) or not _HEX.fullmatch(psha):
            raise _bad(f"{source}: parts[{i}] sha256 is malformed.")
        out.append(Part(name, psize, psha))
    if sum(p.size for p in out) != size:
        raise _bad(f"{source}: the parts add up to {sum(p.size for p in out)} bytes; the list says {size}.")
    return PartList(file, size, sha, tuple(out))


def read_part_list(path: Path) -> PartList:
    try:
        raw = read_regular(path, what="part list", max_size=MAX_LIST, error=IntegrityError)
    except FileNotFoundError:
        raise LockbuildError(f"the part list {path} does not exist.", tip="Check the path.") from None
    return parse_part_list(raw, str(path))


def join(
    part_list: Path, dst: BinaryIO, *, listing: PartList | None = None, limits: Limits = DEFAULT_LIMITS
) -> PartList:
    """Concatenate the parts into ``dst``, checking each part's size and sha256 as it streams; a
    damaged, short or long part is refused by name (never read past its listed size), a part that is
    not a regular file is refused without being opened for long. The whole file's digest is checked
    at the end. The caller checks the list's total size against what it trusts before calling this."""
    listing = listing or read_part_list(part_list)
    whole = hashlib.sha256()
    for p in listing.parts:
        try:
            f, size = open_regular(
                part_list.parent / p.name, what="part", max_size=limits.max_bundle, error=IntegrityError
            )
        except FileNotFoundError:
            raise _bad(f"cannot read the part {p.name}: it is missing beside {part_list.name}.") from None
        if size != p.size:
            f.close()
            raise _bad(f"the part {p.name} is {size} bytes; its list says {p.size} (truncated or another file?).")
        h = hashlib.sha256()
        with f:
            n = pump(f.read, h.update, whole.update, dst.write, limit=p.size)
        digest = h.hexdigest()
        if n != p.size:
            raise _bad(f"the part {p.name} is {n} bytes; its list says {p.size} (it changed while it was read).")
        if digest != p.sha256:
            raise _bad(f"the part {p.name} is damaged: sha256 {digest}, its list says {p.sha256}.")
    if whole.hexdigest() != listing.sha256:
        raise _bad(f"the joined parts have sha256 {whole.hexdigest()}; the part list says {listing.sha256}.")
    return listing
