"""Safe extraction of an engine's source archive and release assets (tar.gz, tar.xz, zip).

The same rules as the bundle reader: regular files and directories only, relative normalised paths,
no setuid bits, no collisions; refused, never rewritten. Sizes are bounded by ``Limits``.
"""

from __future__ import annotations

import os
import shutil
import stat
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from lockbuild.bundle.manifest import check_member_path, collision_key
from lockbuild.digest import hash_stream
from lockbuild.errors import IntegrityError
from lockbuild.limits import DEFAULT_LIMITS, Limits

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar.xz", ".txz", ".tar.bz2", ".tar", ".zip")


def is_archive(name: str) -> bool:
    return name.endswith(ARCHIVE_SUFFIXES)


def _refuse(archive: Path, name: str, why: str) -> IntegrityError:
    return IntegrityError(f"{archive.name}: refused entry {name[:120]!r}: {why}.", tip="The archive is unsafe; not unpacked.")


def _entries(archive: Path) -> Iterator[tuple[str, str, int, int, BinaryIO | None]]:
    """(name, kind 'file'|'dir', size, mode, stream) for every entry; other kinds are refused."""
    if archive.name.endswith(".zip"):
        with zipfile.ZipFile(archive) as zf:
            for info in zf.infolist():
                mode = (info.external_attr >> 16) & 0xFFFF
                if stat.S_ISLNK(mode):
                    raise _refuse(archive, info.filename, "it is a symbolic link")
                name = info.filename.rstrip("/")
                if info.is_dir():
                    yield name, "dir", 0, 0o755, None
                else:
                    with zf.open(info) as f:
                        yield name, "file", info.file_size, mode & 0o7777 or 0o644, f  # type: ignore[misc]
        return
    try:
        with tarfile.open(archive, mode="r:*") as tf:
            for ti in tf:
                name = ti.name.rstrip("/") if ti.isdir() else ti.name
                if ti.isdir():
                    yield name, "dir", 0, ti.mode, None
                elif ti.isreg():
                    f = tf.extractfile(ti)
                    yield name, "file", ti.size, ti.mode, f  # type: ignore[misc]
                else:
                    kind = "a link" if ti.issym() or ti.islnk() else "a device or FIFO"
                    raise _refuse(archive, ti.name, f"it is {kind}")
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise IntegrityError(f"{archive.name}: cannot read the archive: {exc}.") from None


def extract(archive: Path, dest: Path, *, strip: str | None = None, limits: Limits = DEFAULT_LIMITS) -> int:
    """Unpack ``archive`` into ``dest``; with ``strip``, only that top directory's contents. Files are
    created exclusively, so two archives unpacked into one directory may not overwrite each other.
    Returns the number of files written."""
    dest.mkdir(parents=True, exist_ok=True)
    seen: set[str] = set()
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
            if name == strip:
                continue
            if not name.startswith(strip + "/"):
                continue
            rel = name[len(strip) + 1 :]
        key = collision_key(rel)
        if key in seen:
            raise _refuse(archive, name, "it collides with another entry")
        seen.add(key)
        out = dest.joinpath(*rel.split("/"))
        if kind == "dir":
            out.mkdir(parents=True, exist_ok=True)
            continue
        total += size
        count += 1
        if size > limits.max_member or total > limits.max_bundle or count > limits.max_members:
            raise _refuse(archive, name, "the archive is larger than the limits allow")
        out.parent.mkdir(parents=True, exist_ok=True)
        if out.parent.resolve() != dest.resolve().joinpath(*rel.split("/")[:-1]):
            raise _refuse(archive, name, "its directory resolves outside the destination")
        if out.exists() or out.is_symlink():
            raise _refuse(archive, name, "a file of that name is already there")
        fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o755 if mode & 0o111 else 0o644)
        with os.fdopen(fd, "wb") as f:
            assert stream is not None
            written = hash_stream(stream, dst=f, limit=size + 1)
        if written != size:
            raise _refuse(archive, name, f"it holds {written} bytes, not the {size} its header says")
    return count


def place_file(src: Path, dest_dir: Path) -> None:
    dest_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dest_dir / src.name)
