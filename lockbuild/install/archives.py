"""Safe extraction of an engine's source archive and release assets (tar.gz, tar.xz, zip).

The same rules as the bundle reader: regular files and directories only, relative normalised paths,
no setuid bits, no collisions (two entries of one name, a file where another entry needs a directory,
a file already placed by an earlier archive); refused, never rewritten. Sizes are bounded by
``Limits``. Any failure of the decompressors or the archive formats is an IntegrityError.
"""

from __future__ import annotations

import lzma
import os
import shutil
import stat
import tarfile
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from lockbuild.bundle.manifest import check_member_path, collision_key
from lockbuild.digest import hash_stream
from lockbuild.errors import IntegrityError
from lockbuild.limits import DEFAULT_LIMITS, Limits

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar.xz", ".txz", ".tar.bz2", ".tar", ".zip")


def is_archive(name: str) -> bool:
    return name.endswith(ARCHIVE_SUFFIXES)


_UNSAFE = "The archive is unsafe; it was not unpacked."


def _refuse(archive: Path, name: str, why: str) -> IntegrityError:
    return IntegrityError(f"{archive.name}: refused entry {name[:120]!r}: {why}.", tip=_UNSAFE)


# What the archive modules and decompressors raise on damaged input (and the file system on a clash).
_READ_ERRORS = (
    OSError, EOFError, zlib.error, lzma.LZMAError, tarfile.TarError, zipfile.BadZipFile,
    NotImplementedError, RuntimeError, ValueError,
)  # fmt: skip


def _zip_kind(mode: int) -> str | None:
    """The refusal for a zip entry's Unix file type, or None for a regular file (or no type at all)."""
    if stat.S_ISLNK(mode):
        return "it is a symbolic link"
    if stat.S_IFMT(mode) and not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
        return "it is a device, FIFO or socket"
    return None


def _entries(archive: Path) -> Iterator[tuple[str, str, int, int, BinaryIO | None]]:
    """(name, kind 'file'|'dir', size, mode, stream) for every entry; other kinds are refused."""
    if archive.name.endswith(".zip"):
        with zipfile.ZipFile(archive) as zf:
            for info in zf.infolist():
                mode = (info.external_attr >> 16) & 0xFFFF
                why = _zip_kind(mode)
                if why:
                    raise _refuse(archive, info.filename, why)
                name = info.filename.rstrip("/")
                if info.is_dir():
                    yield name, "dir", 0, mode & 0o7777 or 0o755, None
                else:
                    with zf.open(info) as f:
                        yield name, "file", info.file_size, mode & 0o7777 or 0o644, f  # type: ignore[misc]
        return
    with tarfile.open(archive, mode="r:*") as tf:
        for ti in tf:
            name = ti.name.rstrip("/") if ti.isdir() else ti.name
            if ti.isdir():
                yield name, "dir", 0, ti.mode, None
            elif ti.isreg():
                yield name, "file", ti.size, ti.mode, tf.extractfile(ti)  # type: ignore[misc]
            else:
                kind = "a link" if ti.issym() or ti.islnk() else "a device or FIFO"
                raise _refuse(archive, ti.name, f"it is {kind}")


def extract(archive: Path, dest: Path, *, strip: str | None = None, limits: Limits = DEFAULT_LIMITS) -> int:
    """Unpack ``archive`` into ``dest``; with ``strip``, only that top directory's contents. Files are
    created exclusively, so two archives unpacked into one directory may not overwrite each other.
    Returns the number of files written."""
    try:
        return _extract(archive, dest, strip, limits)
    except _READ_ERRORS as exc:
        raise IntegrityError(
            f"{archive.name}: cannot unpack the archive: {exc}.",
            tip="The archive is damaged or unusual; it was checked against its digest, so report it to its publisher.",
        ) from None


def _claim(kinds: dict[str, str], key: str, kind: str) -> str | None:
    """Record an entry; say why not if a file collides with another entry or stands where a directory must."""
    for parent in PurePosixPath(key).parents:
        if str(parent) == ".":
            break
        if kinds.setdefault(str(parent), "dir") == "file":
            return f"it needs {parent} to be a directory, but that is a file in the archive"
    old = kinds.get(key)
    if old is not None and (old == "file" or kind == "file"):
        return "it collides with another entry"
    kinds[key] = kind
    return None


def _extract(archive: Path, dest: Path, strip: str | None, limits: Limits) -> int:
    dest.mkdir(parents=True, exist_ok=True)
    kinds: dict[str, str] = {}
    total = 0
    count = 0
    for name, kind, size, mode, stream in _entries(archive):
        try:
            check_member_path(name, limits)
        except IntegrityError as exc:
            raise _refuse(archive, name, exc.message) from None
        if mode & 0o7000:
            raise _refuse(archive, name, "it has setuid, setgid or sticky bits")
        rel = name
        if strip is not None:
            if name == strip or not name.startswith(strip + "/"):
                continue
            rel = name[len(strip) + 1 :]
        clash = _claim(kinds, collision_key(rel), kind)
        if clash:
            raise _refuse(archive, name, clash)
        out = dest.joinpath(*rel.split("/"))
        if kind == "dir":
            out.mkdir(parents=True, exist_ok=True)
            continue
        total += size
        count += 1
        if size > limits.max_member or total > limits.max_bundle or count > limits.max_members:
            raise _refuse(archive, name, "the archive is larger than the limits allow")
        _write(archive, name, dest, rel, size, mode, stream)
    return count


def _write(archive: Path, name: str, dest: Path, rel: str, size: int, mode: int, src: BinaryIO | None) -> None:
    out = dest.joinpath(*rel.split("/"))
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.parent.resolve() != dest.resolve().joinpath(*rel.split("/")[:-1]):
        raise _refuse(archive, name, "its directory resolves outside the destination")
    if out.exists() or out.is_symlink():
        raise _refuse(archive, name, "a file of that name is already there")
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o755 if mode & 0o111 else 0o644)
    with os.fdopen(fd, "wb") as f:
        assert src is not None
        written = hash_stream(src, dst=f, limit=size + 1)
    if written != size:
        raise _refuse(archive, name, f"it holds {written} bytes, not the {size} its header says")


def place_file(src: Path, dest_dir: Path) -> None:
    dest_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dest_dir / src.name)
