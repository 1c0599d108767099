"""A wheel's members are read in one place (lockbuild/wheelfile.py): however the wheel is damaged (a deflate,
bzip2 or lzma stream that does not decode, a bad CRC, an encrypted entry, a cut-off file, no zip at all),
the reader says so as the caller's error naming the wheel, never zlib's or zipfile's own exception; and
`store index` over such a wheel is an export error that leaves nothing behind."""

from __future__ import annotations

import ast
import io
import struct
import zipfile
import zlib
from pathlib import Path

import pytest
from conftest import make_keys
from hostile import UV_MEMBER
from servers import make_wheel
from sitekit import cli, make_bundle

import lockbuild
from lockbuild import wheelfile
from lockbuild.errors import IntegrityError
from lockbuild.site.pyindex import ExportError

NAME = "damaged-1.0-py3-none-any.whl"
META = "damaged-1.0.dist-info/METADATA"
TEXT = b"Metadata-Version: 2.1\nName: damaged\nVersion: 1.0\n" + b"Description: long enough to compress\n" * 40


def _wheel(compression: int = zipfile.ZIP_DEFLATED, text: bytes = TEXT) -> bytearray:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=compression) as z:
        z.writestr("damaged/__init__.py", b"")
        z.writestr(META, text)
    return bytearray(buf.getvalue())


def _data_span(wheel: bytes, name: str = META) -> tuple[int, int]:
    """Where the stored (compressed) bytes of ``name`` lie in the wheel: (offset, length)."""
    info = zipfile.ZipFile(io.BytesIO(bytes(wheel))).getinfo(name)
    name_len, extra_len = struct.unpack("<HH", wheel[info.header_offset + 26 : info.header_offset + 30])
    return info.header_offset + 30 + name_len + extra_len, info.compress_size


def damaged_deflate() -> bytes:
    """A wheel whose METADATA deflate stream does not decode (zipfile raises zlib.error)."""
    wheel = _wheel()
    start, size = _data_span(wheel)
    wheel[start : start + size] = b"\xff" * size  # block type 3: "invalid block type"
    return bytes(wheel)


def _damaged(kind: str) -> bytes:
    if kind == "deflate":
        return damaged_deflate()
    if kind in ("bzip2", "lzma"):
        wheel = _wheel(zipfile.ZIP_BZIP2 if kind == "bzip2" else zipfile.ZIP_LZMA)
        start, size = _data_span(wheel)
        wheel[start + size // 2 : start + size] = b"\x00" * (size - size // 2)
        return bytes(wheel)
    if kind == "crc":
        wheel = _wheel(zipfile.ZIP_STORED)
        start, _ = _data_span(wheel)
        wheel[start] ^= 0x20  # the same length, other bytes: only the CRC tells
        return bytes(wheel)
    if kind == "encrypted":
        wheel = _wheel()
        info = zipfile.ZipFile(io.BytesIO(bytes(wheel))).getinfo(META)
        for at in (info.header_offset + 6, bytes(wheel).rindex(b"PK\x01\x02") + 8):  # local and central flags
            wheel[at] |= 0x01
        return bytes(wheel)
    if kind == "unknown-compression":
        wheel = _wheel(zipfile.ZIP_STORED)
        info = zipfile.ZipFile(io.BytesIO(bytes(wheel))).getinfo(META)
        for at in (info.header_offset + 8, bytes(wheel).rindex(b"PK\x01\x02") + 10):
            wheel[at : at + 2] = struct.pack("<H", 99)  # AES, which zipfile does not know
        return bytes(wheel)
    if kind == "truncated":
        wheel = _wheel()
        start, size = _data_span(wheel)
        return bytes(wheel[: start + size // 2])
    if kind == "not-a-zip":
        return b"PK\x03\x04 not really a zip"
    raise AssertionError(kind)


KINDS = ("deflate", "bzip2", "lzma", "crc", "encrypted", "unknown-compression", "truncated", "not-a-zip")


def test_the_damaged_deflate_stream_is_what_zipfile_alone_fails_on() -> None:
    with pytest.raises(zlib.error):
        zipfile.ZipFile(io.BytesIO(damaged_deflate())).read(META)


@pytest.mark.parametrize("kind", KINDS)
def test_every_way_a_wheel_fails_to_read_is_the_callers_error_naming_it(kind: str) -> None:
    for error in (ExportError, IntegrityError):
        with pytest.raises(error) as got:
            wheelfile.metadata(io.BytesIO(_damaged(kind)), NAME, error=error, tip="the tip")
        assert type(got.value) is error
        assert f"the wheel {NAME}" in got.value.message and got.value.tip == "the tip"
    assert wheelfile.metadata(io.BytesIO(bytes(_wheel())), NAME, error=ExportError) == TEXT


def test_a_wheel_whose_metadata_does_not_decode_is_an_export_error(tmp_path: Path) -> None:
    keys = make_keys(tmp_path / "k")
    good, data = make_wheel("fine", "1.0")
    files = [
        ("recipe.toml", b"[engine]\n", "recipe"),
        (UV_MEMBER, b"PK uv", "tool"),
        (f"wheels/{good}", data, "wheel"),
        (f"wheels/{NAME}", damaged_deflate(), "wheel"),
    ]
    store = tmp_path / "store"
    bundle = make_bundle(tmp_path / "b", [keys.secret], files=files)
    assert cli("import", bundle, "--trust", keys.trust, "--store", store).exit_code == 0
    out = tmp_path / "pypi"
    r = cli("store", "index", "--store", store, "--out", out)
    assert r.exit_code == ExportError.exit_code and "Traceback" not in r.output
    assert f"ERROR cannot read the wheel {NAME} (error: Error -3 while decompressing data" in r.output
    assert "TIP Leave its build out of the index (--build), or rebuild the bundle." in r.output
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["b", "k", "store"]
    r = cli("store", "index", "--store", store, "--out", out, "--json")
    assert r.exit_code == ExportError.exit_code and '"type": "ExportError"' in r.stdout


# Library modules that open a zip themselves, each with its reason; everything else reads a wheel's members
# through lockbuild/wheelfile.py.
ZIP_READERS_ALLOWED = {
    "lockbuild/wheelfile.py": "the one reader of a wheel's members",
    "lockbuild/install/archives.py": "a release asset's .zip, unpacked whole; its errors are wheelfile.READ_ERRORS",
    "lockbuild/sdist/buildreqs.py": "an sdist's .zip (pyproject.toml); its errors are wheelfile.READ_ERRORS",
    "lockbuild/builder/selfwheel.py": "lockbuild's own wheel, made in memory by the same module",
    "lockbuild/gpu/sharedobjects.py": "a wheel's .so members streamed to the fatbin reader; every read failure is "
    "its BinaryError naming the wheel",
    "lockbuild/vulns/database.py": "osv.dev's database zip (not a wheel), bounded; every failure is a database error",
}


def test_only_the_one_reader_opens_a_wheel() -> None:
    root = Path(lockbuild.__file__).parent
    found = set()
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr in ("ZipFile", "ZipExtFile"):
                found.add(path.relative_to(root.parent).as_posix())
    assert found - set(ZIP_READERS_ALLOWED) == set(), "read wheels through lockbuild.wheelfile"
    assert set(ZIP_READERS_ALLOWED) - found == set(), "no longer needs its allowance"
