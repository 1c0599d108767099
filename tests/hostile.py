"""Hand-crafted bundles and archives for the hostile-input tests.

Each builder makes a valid object by default; a test changes one thing, so a refusal can only come
from that one defect. ``good_bundle()`` is the baseline every hostile bundle is a variation of, and a
test reads it successfully to prove the builders themselves are sound.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import io
import struct
import tarfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import zstandard

from lockbuild.bundle.instructions import InstallTable
from lockbuild.bundle.manifest import MANIFEST, Manifest, Member

AS_OF = dt.datetime(2025, 1, 6, tzinfo=dt.UTC)
SERIAL = int(AS_OF.timestamp())
BLOCK = 512
RECORD = 20 * BLOCK
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"

UV_MEMBER = "tools/uv-0.9.0-py3-none-any.whl"
INSTALL = InstallTable(binary="toyengine", verify=("toyengine", "--version"), gpu_probe="none", uv=UV_MEMBER)
RECIPE = b'[engine]\nname = "toyengine"\n'
GOOD_FILES: tuple[tuple[str, bytes, str], ...] = (
    ("recipe.toml", RECIPE, "recipe"),
    ("lock/requirements.txt", b"toydep==1.0 --hash=sha256:00\n", "lock"),
    ("wheels/toydep-1.0-py3-none-any.whl", b"PK wheel bytes " * 100, "wheel"),
    (UV_MEMBER, b"PK uv wheel bytes", "tool"),
    ("assets/model.bin", bytes(range(256)) * 9, "asset"),
)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def member(path: str, data: bytes, kind: str = "asset") -> Member:
    return Member(path, len(data), sha(data), kind, f"https://example.invalid/{path}")


def manifest(members: Sequence[Member], **changes: object) -> Manifest:
    base = Manifest(
        engine="toyengine",
        version="1.0",
        variant="cpu",
        python="3.11",
        platform="x86_64-manylinux_2_28",
        as_of=AS_OF,
        serial=SERIAL,
        recipe_sha256=sha(RECIPE),
        lockbuild_version="0.1.0",
        uv_version="0.9.0",
        lock_format="requirements.txt",
        members=tuple(members),
        install=INSTALL,
    )
    return dataclasses.replace(base, **changes)


@dataclass(frozen=True)
class TarEntry:
    """One tar member as it will be written, whatever it claims."""

    name: str
    data: bytes = b""
    type: bytes = tarfile.REGTYPE
    mode: int = 0o644
    size: int | None = None  # the header's size, when it should disagree with the data
    linkname: str = ""
    pax: tuple[tuple[str, str], ...] = ()  # extra pax records
    format: int = tarfile.PAX_FORMAT


def header(e: TarEntry) -> bytes:
    ti = tarfile.TarInfo(e.name)
    ti.type = e.type
    ti.size = len(e.data) if e.size is None else e.size
    ti.mode = e.mode
    ti.mtime = SERIAL
    ti.linkname = e.linkname
    ti.uname = ti.gname = ""
    ti.pax_headers = dict(e.pax)
    if e.type in (tarfile.CHRTYPE, tarfile.BLKTYPE):
        ti.devmajor, ti.devminor = 1, 3
    return ti.tobuf(e.format, "utf-8", "surrogateescape")


def pad(n: int) -> bytes:
    return bytes(-n % BLOCK)


def tar_bytes(entries: Sequence[TarEntry], *, end: bool = True) -> bytes:
    """Headers, data and zero padding as a tar writer would put them; ``end`` adds the two zero blocks
    and pads to a whole record, as lockbuild's writer does."""
    out = bytearray()
    for e in entries:
        out += header(e) + e.data + pad(len(e.data))
    if end:
        out += bytes(2 * BLOCK)
        out += bytes(-len(out) % RECORD)
    return bytes(out)


def compress(raw: bytes, *, checksum: bool = True, content_size: bool = False, window_log: int = 0) -> bytes:
    """One zstd frame, written in streaming mode (no content size unless asked)."""
    params = zstandard.ZstdCompressionParameters.from_level(
        3, write_checksum=checksum, write_content_size=content_size, window_log=window_log
    )
    out = io.BytesIO()
    with zstandard.ZstdCompressor(compression_params=params).stream_writer(out, closefd=False) as w:
        w.write(raw)
    return out.getvalue()


def good_members() -> list[Member]:
    return [member(p, d, k) for p, d, k in GOOD_FILES]


def good_entries() -> list[TarEntry]:
    return [TarEntry(p, d) for p, d, _ in GOOD_FILES]


def manifest_entry(m: Manifest | bytes) -> TarEntry:
    return TarEntry(MANIFEST, m if isinstance(m, bytes) else m.to_toml())


def bundle_tar(
    entries: Sequence[TarEntry] | None = None, *, listed: Manifest | bytes | None = None, end: bool = True
) -> bytes:
    """The tar stream of a bundle: the manifest first (by default one listing ``good_members()``),
    then ``entries`` (by default the good ones)."""
    listed = manifest(good_members()) if listed is None else listed
    entries = good_entries() if entries is None else entries
    return tar_bytes([manifest_entry(listed), *entries], end=end)


def good_bundle() -> bytes:
    return compress(bundle_tar())


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


# --- zstd frames by hand ---------------------------------------------------------------------


def frame_header_len(frame: bytes) -> int:
    """The length of a frame's header (magic to the end of the frame content size field)."""
    fhd = frame[4]
    single, dict_flag, fcs_flag = (fhd >> 5) & 1, fhd & 3, fhd >> 6
    return 5 + (0 if single else 1) + (0, 1, 2, 4)[dict_flag] + ((1 if single else 0), 2, 4, 8)[fcs_flag]


def set_window(frame: bytes, window_log: int) -> bytes:
    """The same frame claiming a larger window (the blocks still decode with the smaller one)."""
    fhd = frame[4]
    assert not (fhd >> 5) & 1, "a single-segment frame has no window descriptor"
    return frame[:5] + bytes([(window_log - 10) << 3]) + frame[6:]


def add_dictionary_id(frame: bytes, dict_id: int) -> bytes:
    """The same frame naming a dictionary (4-byte id) in its header."""
    fhd = frame[4]
    assert fhd & 3 == 0 and not (fhd >> 5) & 1
    return frame[:4] + bytes([fhd | 3]) + frame[5:6] + struct.pack("<I", dict_id) + frame[6:]


def block(kind: int, content: bytes, *, last: bool = False, size: int | None = None) -> bytes:
    """One zstd block: kind 0 raw, 1 RLE (``content`` is the one byte, ``size`` the run length)."""
    n = len(content) if size is None else size
    return (int(last) | kind << 1 | n << 3).to_bytes(3, "little") + content


def frame(
    blocks: Sequence[bytes], *, content_size: int | None = None, single: bool = False, window_log: int = 20
) -> bytes:
    """A frame by hand, with a content checksum flag set (the 4 checksum bytes are zeros: a frame whose
    checksum is never reached, or whose checksum a test means to be wrong)."""
    fcs_flag = 0 if content_size is None else 3
    fhd = fcs_flag << 6 | int(single) << 5 | 1 << 2
    head = ZSTD_MAGIC + bytes([fhd])
    if not single:
        head += bytes([(window_log - 10) << 3])
    if content_size is not None:
        head += struct.pack("<Q", content_size)
    return head + b"".join(blocks) + bytes(4)


def raw_blocks(data: bytes, *, last: bool) -> list[bytes]:
    """``data`` as raw (stored) blocks of at most 128 KiB."""
    step = 128 << 10
    pieces = [data[i : i + step] for i in range(0, len(data), step)] or [b""]
    return [block(0, p, last=last and i == len(pieces) - 1) for i, p in enumerate(pieces)]


def zero_run_blocks(total: int) -> list[bytes]:
    """RLE blocks producing ``total`` zero bytes: 4 bytes of bundle per 128 KiB of output."""
    step = 128 << 10
    count, rest = divmod(total, step)
    blocks = [block(1, b"\0", size=step) for _ in range(count)]
    if rest:
        blocks.append(block(1, b"\0", size=rest))
    return blocks


# --- source and asset archives ---------------------------------------------------------------


def tar_archive(entries: Sequence[TarEntry], compression: str = "gz") -> bytes:
    """A compressed tar (``gz``, ``xz`` or ``bz2``) holding ``entries`` exactly as given."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=f"w:{compression}", format=tarfile.PAX_FORMAT) as tf:
        for e in entries:
            ti = tarfile.TarInfo(e.name)
            ti.type, ti.mode, ti.linkname = e.type, e.mode, e.linkname
            ti.size = len(e.data) if e.type in (tarfile.REGTYPE, tarfile.AREGTYPE) else 0
            tf.addfile(ti, io.BytesIO(e.data) if ti.size else None)
    return buf.getvalue()


@dataclass(frozen=True)
class ZipEntry:
    name: str
    data: bytes = b""
    mode: int = 0o100644  # st_mode: file type and permission bits


def zip_archive(entries: Sequence[ZipEntry]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for e in entries:
            zi = zipfile.ZipInfo(e.name, (2025, 1, 1, 0, 0, 0))
            zi.external_attr = e.mode << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(zi, e.data)
    return buf.getvalue()


def tree(root: Path) -> list[str]:
    """Every path under ``root``, relative, sorted (links and special files included, not followed)."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))
