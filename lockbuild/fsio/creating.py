"""Creating and writing new files: ``O_CREAT|O_EXCL|O_NOFOLLOW`` (nothing that exists, link or file, is
written through), unguessable temporary names beside a result, and sweeping what killed runs left."""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from lockbuild.fsio.opening import DIR_FLAGS, NEW_FLAGS, kind_of, list_dir, lstat_at, open_dir, opened_dir


def create_new(name: Path | str, *, dir_fd: int | None = None, mode: int = 0o644) -> BinaryIO:
    """A new file, created ``O_EXCL|O_NOFOLLOW`` (nothing that exists, link or file, is written through).
    The one way lockbuild creates a file (``tests/structure/test_layout.py`` holds every module to it)."""
    return os.fdopen(os.open(name, NEW_FLAGS, mode, dir_fd=dir_fd), "wb")


def write_new(name: Path, data: bytes, *, mode: int = 0o644, sync: bool = False) -> None:
    """``data`` as a new file (``create_new``): never through a link, never over a file that exists."""
    with create_new(name, mode=mode) as f:
        f.write(data)
        if sync:
            f.flush()
            os.fsync(f.fileno())


def temp_beside(final: Path, what: str = "partial") -> Path:
    """A name beside ``final`` for the file that will be renamed onto it: hidden, and unguessable, so
    another user who can write the directory can neither plant a link there nor take the name first."""
    return final.with_name(f".{final.name}.{secrets.token_hex(8)}.{what}")


STALE_BESIDE_SECONDS = 3600  # a temp file beside a result, untouched this long, belongs to a run that was killed


def write_replacing(final: Path, data: bytes, *, mode: int = 0o644) -> None:
    """``final`` replaced whole by ``data``: written and synced under a temporary name beside it
    (O_EXCL|O_NOFOLLOW), then renamed over it; a reader sees the old file or the new one."""
    tmp = temp_beside(final)
    try:
        write_new(tmp, data, mode=mode, sync=True)
        tmp.replace(final)
    finally:
        tmp.unlink(missing_ok=True)


def sweep_stale(directory: Path, matches: Callable[[str], bool], *, older_than: float) -> int:
    """Remove the entries of ``directory`` that ``matches`` names and killed runs left: regular files of
    this user untouched for ``older_than`` seconds (a run still writing touches its own), listed and
    unlinked by the directory's descriptor, never a link's target or a directory. Returns how many; a
    directory that cannot be read is left alone."""
    cutoff, removed = time.time() - older_than, 0
    try:
        with opened_dir(directory) as fd:
            for name in list_dir(fd):
                if not matches(name):
                    continue
                st = lstat_at(name, fd)
                if st is None or not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mtime >= cutoff:
                    continue
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=fd)  # by descriptor: never through a link, never a directory
                    removed += 1
    except OSError:
        return 0
    return removed


def is_beside(final: Path, name: str, what: str = "partial") -> bool:
    """Whether ``name`` is one :func:`temp_beside` gives for ``final`` (``.NAME.<16 hex>.WHAT``)."""
    prefix, suffix = f".{final.name}.", f".{what}"
    token = name[len(prefix) : -len(suffix)] if name.startswith(prefix) and name.endswith(suffix) else ""
    return len(token) == 16 and not token.strip("0123456789abcdef")


def sweep_beside(final: Path, *, older_than: float = STALE_BESIDE_SECONDS, what: str = "partial") -> int:
    """Remove the files ``temp_beside(final)`` named that killed runs left (a bundle's is gigabytes)."""
    return sweep_stale(final.parent, lambda name: is_beside(final, name, what), older_than=older_than)


def open_writable(name: str, *, dir_fd: int, append: bool, mode: int = 0o644) -> BinaryIO:
    """A file of ours to (re)write or extend, never through a link; a non-regular file is refused."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    fd = os.open(name, flags | (os.O_APPEND if append else 0), mode, dir_fd=dir_fd)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, f"{name} is {kind_of(st.st_mode)}")
    if not append:
        os.ftruncate(fd, 0)
    return os.fdopen(fd, "ab" if append else "wb")


def create_under(dest: Path, rel: str, mode: int = 0o644) -> BinaryIO:
    """A new file at ``dest/rel``. Each directory on the way is made here or is already a plain
    directory, walked by descriptor with O_NOFOLLOW (a link planted in the tree is never followed);
    the file is created O_CREAT|O_EXCL|O_NOFOLLOW, so nothing that exists is overwritten.
    Raises FileExistsError (the name is taken) or NotADirectoryError/OSError (a link or file on the way)."""
    parts = rel.split("/")
    fd = walk_making(dest, parts[:-1])
    try:
        out = os.open(parts[-1], NEW_FLAGS, mode, dir_fd=fd)
    finally:
        os.close(fd)
    return os.fdopen(out, "wb")


def walk_making(dest: Path, parts: list[str]) -> int:
    """A descriptor for ``dest/parts...``, each directory made here or already a plain directory, walked
    with O_NOFOLLOW. The caller closes it."""
    fd = open_dir(dest)
    try:
        for part in parts:
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o755, dir_fd=fd)
            nxt = os.open(part, DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def append_existing(path: Path, text: str) -> bool:
    """Append ``text`` to an existing regular file, never through a link; False when it does not exist."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    with os.fdopen(fd, "a", encoding="utf-8") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, f"{path} is {kind_of(os.fstat(fd).st_mode)}")
        f.write(text)
    return True
