"""A small writer of ELF shared objects with a ``.nv_fatbin`` section of chosen architectures, for the
tests (no NVIDIA binary is kept in the repository): the layout NVIDIA's nvcc writes, which the real
``cuobjdump`` lists (``tests/gpu/test_fatbin.py`` compares)."""

from __future__ import annotations

import struct

FLAG_64BIT_LINUX = 0x11
SUFFIX_FLAGS = {"": 0, "a": 0x100000, "f": 0x200000}


def _pad8(data: bytes) -> bytes:
    return data + bytes(-len(data) % 8)


def cubin(sm: int) -> bytes:
    """A minimal CUDA ELF (EM_CUDA, ``sm_NN`` in e_flags as nvcc writes it) with no code: what a SASS
    entry carries, enough for cuobjdump to list it."""
    return elf_so({".text.k": bytes(16)}, cuda=(sm, 0x05000004 | sm << 8))


def entry(kind: str, arch: str, payload: bytes = b"", *, header_size: int = 0, size: int | None = None) -> bytes:
    """One fatbin entry: ``kind`` "sass" or "ptx", ``arch`` like "9.0a"; ``size`` overrides the payload
    size the header states (a hostile entry). A PTX entry's header carries nvcc's 16-byte extension."""
    suffix = arch[-1] if arch[-1] in "af" else ""
    major, minor = (int(x) for x in arch.rstrip("af").split("."))
    if kind == "ptx":
        payload = payload or f".version 9.0\n.target sm_{major}{minor}{suffix}\n".encode()
    payload = _pad8(payload or cubin(major * 10 + minor))
    header_size = header_size or (80 if kind == "ptx" else 64)
    extension = struct.pack("<I", 0x48) + bytes(12) if header_size >= 80 else b""
    code = (9, 0) if kind == "ptx" else (1, 8)
    head = struct.pack(
        "<HHIQIIHHIIIQQQ",
        1 if kind == "ptx" else 2,
        0x0101,
        header_size,
        len(payload) if size is None else size,
        0,
        0x40 if extension else 0,
        code[1],
        code[0],
        major * 10 + minor,
        0,
        0,
        FLAG_64BIT_LINUX | SUFFIX_FLAGS[suffix],
        0,
        0,
    )
    return head + extension + bytes(header_size - 64 - len(extension)) + payload


def container(*entries: bytes, size: int | None = None) -> bytes:
    body = b"".join(entries)
    return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body) if size is None else size) + body


def fatbin(sass: tuple[str, ...] = (), ptx: tuple[str, ...] = ()) -> bytes:
    """One container of SASS entries for ``sass`` and PTX entries for ``ptx``."""
    return container(*[entry("sass", a) for a in sass], *[entry("ptx", a) for a in ptx])


def elf_so(
    sections: dict[str, bytes],
    *,
    shoff: int | None = None,
    shnum: int | None = None,
    cuda: tuple[int, int] | None = None,
) -> bytes:
    """A little-endian ELF64 shared object holding ``sections`` (PROGBITS, in order) and a section-name
    table; ``shoff``/``shnum`` override what the header says (a hostile file). ``cuda``: (sm, e_flags) of a
    CUDA cubin instead (EM_CUDA, the payload of a SASS entry)."""
    names = b"\0" + b"".join(n.encode() + b"\0" for n in [*sections, ".shstrtab"])
    body = bytearray(bytes(64))
    headers = [bytes(64)]
    name_at = 1
    for name, data in [*sections.items(), (".shstrtab", names)]:
        body += bytes(-len(body) % 16)
        kind = 3 if name == ".shstrtab" else 1
        headers.append(struct.pack("<IIQQQQIIQQ", name_at, kind, 2, 0, len(body), len(data), 0, 0, 16, 0))
        body += data
        name_at += len(name) + 1
    body += bytes(-len(body) % 8)
    table_at = len(body)
    body += b"".join(headers)
    ident = b"\x7fELF\x02\x01\x01" + (b"\x41\x08" if cuda else bytes(2)) + bytes(7)
    head = ident + struct.pack(
        "<HHIQQQIHHHHHH",
        2 if cuda else 3,  # ET_EXEC (a cubin), ET_DYN
        190 if cuda else 62,  # EM_CUDA, EM_X86_64
        1,
        0,
        0,
        table_at if shoff is None else shoff,
        cuda[1] if cuda else 0,
        64,
        56,
        0,
        64,
        len(headers) if shnum is None else shnum,
        len(headers) - 1,
    )
    body[:64] = head
    return bytes(body)


def cuda_so(sass: tuple[str, ...] = (), ptx: tuple[str, ...] = ()) -> bytes:
    """A shared object with SASS for ``sass`` and PTX for ``ptx`` in one ``.nv_fatbin`` container."""
    return elf_so({".text": b"\xc3" * 16, ".nv_fatbin": fatbin(sass, ptx)})
