"""What GPU code an ELF shared object carries: the SASS architectures and PTX versions in its
``.nv_fatbin`` section. Reads only the headers and tables (payloads are skipped), from any seekable
binary file. Bounded: every offset is checked against the file's size before it is followed, every step
moves forward."""

from __future__ import annotations

import struct
import tarfile
import zipfile
import zlib
from dataclasses import dataclass
from typing import IO

from lockbuild.errors import LockbuildError
from lockbuild.gpu.vocab import Arch, arch_of_sm
from lockbuild.limits import MiB

SECTION = b".nv_fatbin"
MAGIC = 0xBA55ED50
KIND_PTX, KIND_SASS = 1, 2
FLAG_ARCH_SPECIFIC, FLAG_FAMILY = 0x100000, 0x200000
MAX_NAMES = MiB  # the section-name table's largest size (names of sections: a few KiB)
MAX_ENTRIES = 1 << 18  # fatbin entries in one file (libcublasLt, the largest known, has ~5,400)
MAX_HEADER = 4096  # a container's or an entry's header size
_ELF64_LE = b"\x7fELF\x02\x01"
_SHT_PROGBITS = 1
_SKIP_ZEROS = 1 << 16


class BinaryError(LockbuildError):
    """A shared object's ELF or fatbin structure is not what NVIDIA's tools write."""

    default_tip = (
        "The file is damaged or not what its package says it is; compare with NVIDIA's `cuobjdump "
        "--list-elf FILE`, and fetch the package again (or report it to its publisher)."
    )


@dataclass(frozen=True)
class Kernels:
    """The GPU code of one file: SASS architectures and PTX versions, sorted, each once."""

    sass: tuple[Arch, ...] = ()
    ptx: tuple[Arch, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.sass and not self.ptx

    def to_json(self) -> dict[str, list[str]]:
        return {"sass": [str(a) for a in self.sass], "ptx": [str(a) for a in self.ptx]}


class _Reader:
    """Bounded reads of one file by absolute offset; every failure names the file."""

    def __init__(self, f: IO[bytes], size: int, name: str) -> None:
        self.f, self.size, self.name = f, size, name

    def fail(self, what: str) -> BinaryError:
        return BinaryError(f"{self.name}: {what}")

    def read(self, offset: int, n: int, what: str) -> bytes:
        if offset < 0 or n < 0 or offset + n > self.size:
            raise self.fail(f"{what} at byte {offset} ({n} bytes) lies past the end of the file ({self.size} bytes).")
        try:
            self.f.seek(offset)
            data = self.f.read(n)
        except (OSError, EOFError, ValueError, zlib.error, zipfile.BadZipFile, tarfile.TarError) as e:
            raise self.fail(
                f"reading {what} failed ({type(e).__name__}: {e}); the archive member is damaged."
            ) from None
        if len(data) != n:
            raise self.fail(f"{what} at byte {offset} is cut short ({len(data)} of {n} bytes): the file is truncated.")
        return data


def fatbin_sections(r: _Reader) -> list[tuple[int, int]]:
    """The (offset, size) of each ``.nv_fatbin`` section; [] for a file that is no little-endian ELF64."""
    if r.size < 64:
        return []
    head = r.read(0, 64, "the ELF header")
    if not head.startswith(b"\x7fELF"):
        return []
    if not head.startswith(_ELF64_LE):
        return []  # 32-bit or big-endian: CUDA ships no such libraries
    shoff = struct.unpack_from("<Q", head, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", head, 0x3A)
    if shnum == 0:
        return []
    if shentsize != 64:
        raise r.fail(f"its ELF section entries are {shentsize} bytes; expected 64.")
    if shstrndx >= shnum:
        raise r.fail(f"its section-name table is section {shstrndx} of {shnum}.")
    table = r.read(shoff, shnum * 64, "the ELF section table")
    sections = [struct.unpack_from("<IIQQQQ", table, i * 64) for i in range(shnum)]
    _, _, _, _, names_at, names_size = sections[shstrndx]
    if names_size > MAX_NAMES:
        raise r.fail(f"its section-name table is {names_size} bytes; expected at most {MAX_NAMES}.")
    names = r.read(names_at, names_size, "the section-name table")
    out = []
    for name_at, kind, _, _, offset, size in sections:
        if kind == _SHT_PROGBITS and names[name_at : name_at + len(SECTION) + 1] == SECTION + b"\0":
            if offset + size > r.size:
                raise r.fail(f"its .nv_fatbin section ({size} bytes at byte {offset}) lies past the end of the file.")
            out.append((offset, size))
    return out


def _skip_zeros(r: _Reader, pos: int, end: int) -> int:
    """The first 8-byte-aligned offset from ``pos`` whose word is not zero (padding between containers)."""
    if end - pos >= 8 and r.read(pos, 8, "a fatbin container header") != bytes(8):
        return pos  # the common case: containers follow each other
    while pos < end:
        n = min(_SKIP_ZEROS, end - pos)
        chunk = r.read(pos, n, "the padding between fatbin containers")
        stripped = len(chunk) - len(chunk.lstrip(b"\0"))
        if stripped < n:
            return pos + stripped - stripped % 8
        pos += n
    return end


def _container(r: _Reader, at: int, end: int, budget: list[int], sass: set[Arch], ptx: set[Arch]) -> int:
    """Read the container at ``at``; the offset just past it."""
    magic, version, header_size, fat_size = struct.unpack("<IHHQ", r.read(at, 16, "a fatbin container header"))
    if magic != MAGIC or version != 1:
        raise r.fail(
            f"the .nv_fatbin section holds {magic:#010x} v{version} at byte {at}; expected fatbin 0xba55ed50 v1."
        )
    if not 16 <= header_size <= MAX_HEADER:
        raise r.fail(
            f"a fatbin container header at byte {at} says it is {header_size} bytes; expected 16-{MAX_HEADER}."
        )
    pos, stop = at + int(header_size), at + int(header_size) + int(fat_size)
    if stop > end:
        raise r.fail(f"a fatbin container at byte {at} ({fat_size} bytes) runs past its section's end.")
    while pos < stop:
        budget[0] -= 1
        if budget[0] < 0:
            raise r.fail(f"it holds over {MAX_ENTRIES} fatbin entries; expected fewer.")
        if stop - pos < 64:
            raise r.fail(f"a fatbin entry at byte {pos} is cut short by its container's end.")
        head = r.read(pos, 64, "a fatbin entry header")
        kind, _, size, payload = struct.unpack_from("<HHIQ", head, 0)
        sm = struct.unpack_from("<I", head, 28)[0]
        flags = struct.unpack_from("<Q", head, 40)[0]
        if not 64 <= size <= MAX_HEADER or payload > stop - pos - size:
            raise r.fail(
                f"a fatbin entry at byte {pos} says its header is {size} bytes and its payload {payload}; "
                f"expected a header of 64-{MAX_HEADER} bytes and both within its container."
            )
        if kind in (KIND_PTX, KIND_SASS):
            if not 10 <= sm <= 999:
                raise r.fail(f"a fatbin entry at byte {pos} is for sm_{sm}; expected sm_10 to sm_999.")
            suffix = "a" if flags & FLAG_ARCH_SPECIFIC else "f" if flags & FLAG_FAMILY else ""
            (ptx if kind == KIND_PTX else sass).add(arch_of_sm(sm, suffix))
        pos += size + payload
    return stop


def read_kernels(f: IO[bytes], size: int, name: str) -> Kernels:
    """The SASS and PTX architectures of the ELF shared object ``f`` (``size`` bytes, named ``name`` in
    messages); empty for a file that is not an ELF64 object or has no ``.nv_fatbin``. A structure that
    points past the file or its section, a loop or an oversized table raises :class:`BinaryError`.

    The layout (as NVIDIA's ``cuobjdump`` reads it): a ``.nv_fatbin`` section holds containers, each a 16-byte
    header (magic 0xBA55ED50, version 1, header size, size of its entries) then entries, each a header (kind:
    1 PTX, 2 ELF/SASS; header size; payload size; ``sm_NN`` at byte 28; flags at byte 40: 0x100000
    arch-specific ``a``, 0x200000 family ``f``) and its payload, which is skipped."""
    r = _Reader(f, size, name)
    sass: set[Arch] = set()
    ptx: set[Arch] = set()
    budget = [MAX_ENTRIES]
    for offset, length in fatbin_sections(r):
        pos, end = offset, offset + length
        while (pos := _skip_zeros(r, pos, end)) < end:
            if end - pos < 16:
                raise r.fail(f"the .nv_fatbin section ends with {end - pos} stray bytes at byte {pos}.")
            pos = _container(r, pos, end, budget, sass, ptx)
    return Kernels(tuple(sorted(sass)), tuple(sorted(ptx)))
