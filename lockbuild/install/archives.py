"""Safe extraction of an engine's source archive and release assets (tar.gz, tar.xz, zip).

The bundle reader's rules: regular files and directories only, relative normalised paths, no setuid bits,
no collisions; refused, never rewritten. Sizes are bounded by ``Limits``. Any failure of the
decompressors or the archive formats is an IntegrityError."""

from __future__ import annotations

import errno
import os
import stat
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from lockbuild import wheelfile
from lockbuild.bundle.paths import check_member_path, claim, collision_key
from lockbuild.digest import pump, reading_into
from lockbuild.errors import IntegrityError
from lockbuild.fsio import create_under, make_dirs_under, open_dir
from lockbuild.limits import DEFAULT_LIMITS, Limits

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar.xz", ".txz", ".tar.bz2", ".tar", ".zip")


def is_archive(name: str) -> bool:
    return name.endswith(ARCHIVE_SUFFIXES)


_UNSAFE = "The archive is unsafe; it was not unpacked."


def _refuse(archive: Path, name: str, why: str) -> IntegrityError:
    return IntegrityError(f"{archive.name}: refused entry {name[:120]!r}: {why}.", tip=_UNSAFE)


# What the archive modules and decompressors raise on damaged input (and the file system on a clash):
# the zip readers' list (lockbuild.wheelfile, one place), and tarfile's own.
_READ_ERRORS: tuple[type[Exception], ...] = (tarfile.TarError, *wheelfile.READ_ERRORS)


def _zip_kind(mode: int) -> str | None:
    """The refusal for a zip entry's Unix file type, or None for a regular file (or no type at all)."""
    if stat.S_ISLNK(mode):
        return "it is a symbolic link"
    if stat.S_IFMT(mode) and not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
        return "it is a device, FIFO or socket"
    return None


def _entries(
    archive: Path, links: list[tuple[str, str]] | None = None
) -> Iterator[tuple[str, str, int, int, BinaryIO | None]]:
    """(name, kind 'file'|'dir', size, mode, stream) for every entry; other kinds are refused, except
    that with ``links`` a tar's symbolic links are collected there as (name, target), not yielded."""
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
            elif ti.issym() and links is not None:
                links.append((ti.name, ti.linkname))
            else:
                kind = "a link" if ti.issym() or ti.islnk() else "a device or FIFO"
                raise _refuse(archive, ti.name, f"it is {kind}")


def unpack_archive(
    archive: Path,
    dest: Path,
    *,
    strip: str | None = None,
    limits: Limits = DEFAULT_LIMITS,
    within: Path | None = None,
    sibling_links: bool = False,
) -> int:
    """Unpack ``archive`` into ``dest``; with ``strip``, only that top directory's contents. Files are
    created O_CREAT|O_EXCL|O_NOFOLLOW and every directory is walked without following links, so two
    archives unpacked into one directory may not overwrite each other, and a link already in the
    destination (an environment has some) is never written through. With ``within``, ``dest`` is made
    under that directory the same way (the installer passes the environment it made).
    With ``sibling_links`` (a standalone interpreter's ``bin/python3 -> python3.12``), a tar's symbolic
    link is kept when it names a sibling in its own directory (a plain name, never ``..`` or a path);
    links are made after every file, so nothing is ever written through one.
    Returns the number of files written."""
    try:
        return _extract(archive, _base(dest, within), strip, limits, sibling_links)
    except _READ_ERRORS as exc:
        raise IntegrityError(
            f"{archive.name}: cannot unpack the archive: {exc}.",
            tip="The archive is damaged or unusual; it was checked against its digest, so report it to its publisher.",
        ) from None


def _base(dest: Path, within: Path | None) -> tuple[Path, str]:
    """The directory this installer made, and ``dest`` relative to it ("" for itself)."""
    if within is None:
        dest.mkdir(parents=True, exist_ok=True)
        return dest, ""
    rel = dest.relative_to(within).as_posix()
    if rel != ".":
        make_dirs_under(within, rel)
        return within, rel
    return within, ""


def _extract(archive: Path, base: tuple[Path, str], strip: str | None, limits: Limits, sibling_links: bool) -> int:
    kinds: dict[str, str] = {}
    total = 0
    count = 0
    links: list[tuple[str, str]] | None = [] if sibling_links else None
    for name, kind, size, mode, stream in _entries(archive, links):
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
        clash = claim(kinds, collision_key(rel), kind)
        if clash:
            raise _refuse(archive, name, clash + " in the archive")
        where = f"{base[1]}/{rel}" if base[1] else rel
        if kind == "dir":
            try:
                make_dirs_under(base[0], where)
            except OSError:
                raise _refuse(archive, name, "its directory is a link or a file in the destination") from None
            continue
        total += size
        count += 1
        if size > limits.max_member or total > limits.max_bundle or count > limits.max_members:
            raise _refuse(archive, name, "the archive is larger than the limits allow")
        if stream is None:
            raise _refuse(archive, name, "its contents cannot be read")
        place(stream, base[0], where, size=size, mode=mode, what=f"{archive.name}: refused entry {name[:120]!r}")
    for name, target in links or ():
        count += 1
        if count > limits.max_members:
            raise _refuse(archive, name, "the archive is larger than the limits allow")
        _sibling_link(archive, base, name, target, strip, kinds, limits)
    return count


def _sibling_link(
    archive: Path,
    base: tuple[Path, str],
    name: str,
    target: str,
    strip: str | None,
    kinds: dict[str, str],
    limits: Limits,
) -> None:
    """Make the link ``name -> target`` where ``target`` is a plain name in the link's own directory."""
    try:
        check_member_path(name, limits)
        check_member_path(target, limits)
    except IntegrityError as exc:
        raise _refuse(archive, name, exc.message) from None
    if "/" in target:
        raise _refuse(archive, name, f"it is a link to {target[:80]!r}, not to a file beside it")
    rel = name
    if strip is not None:
        if not name.startswith(strip + "/"):
            return
        rel = name[len(strip) + 1 :]
    clash = claim(kinds, collision_key(rel), "file")
    if clash:
        raise _refuse(archive, name, clash + " in the archive")
    where = f"{base[1]}/{rel}" if base[1] else rel
    parent, _, leaf = where.rpartition("/")
    if parent:
        make_dirs_under(base[0], parent)  # walked without following links; every one here is a real directory
    fd = open_dir(base[0] / parent if parent else base[0])
    try:
        os.symlink(target, leaf, dir_fd=fd)
    finally:
        os.close(fd)


def place(src: BinaryIO, base: Path, rel: str, *, size: int, mode: int = 0o644, what: str) -> None:
    """Write ``src`` (``size`` bytes) as a new file ``base/rel``: O_CREAT|O_EXCL|O_NOFOLLOW, every
    directory on the way walked without following a link; refused if the name is taken."""
    try:
        f = create_under(base, rel, 0o755 if mode & 0o111 else 0o644)
    except FileExistsError:
        raise IntegrityError(f"{what}: a file of that name is already there ({rel}).", tip=_UNSAFE) from None
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR, errno.EEXIST):
            raise
        raise IntegrityError(
            f"{what}: a directory on the way to {rel} is a link or a file; it would resolve outside the destination.",
            tip=_UNSAFE,
        ) from None
    with f:
        written = pump(reading_into(src), f.write, limit=size)
    if written != size:
        raise IntegrityError(f"{what}: it holds {written} bytes, not the {size} its header says.", tip=_UNSAFE)


def place_file(src: Path, base: Path, rel: str) -> None:
    """Copy the bundle member ``src`` to the new file ``base/rel`` (see :func:`place`)."""
    with src.open("rb") as f:
        place(f, base, rel, size=src.stat().st_size, what=f"refused asset {src.name!r}")
