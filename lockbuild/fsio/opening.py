"""Opening and reading by descriptor: a file from outside is opened ``O_NOFOLLOW | O_NONBLOCK`` and judged
on its descriptor (``fstat``): a regular file of bounded size, never a link, FIFO, device or directory (a
FIFO would hang the reader, ``/dev/zero`` would never end, a link in a shared directory could point
anywhere); a directory is opened without following a link, and what is inside it is opened and listed
relative to that descriptor."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from lockbuild.errors import LockbuildError

FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
NEW_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def kind_of(mode: int) -> str:
    """What a non-regular file is, in words, for a message."""
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISLNK, "a symbolic link"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def open_regular(
    path: Path | str,
    *,
    what: str,
    max_size: int,
    error: type[LockbuildError] = LockbuildError,
    dir_fd: int | None = None,
    shown: str | None = None,
) -> tuple[BinaryIO, int]:
    """``path`` (relative to ``dir_fd`` when given) opened for reading, and its size; raise ``error``
    unless it is a regular file (not a symbolic link, FIFO, device or directory) of at most
    ``max_size`` bytes, decided on the open descriptor. ``FileNotFoundError`` passes through, so that
    callers can tell "absent" from "unreadable". ``shown``: the path as messages name it."""
    where = shown or str(path)
    tip = f"Give the path of the {what} itself: a plain file, not a link, pipe or device."
    try:
        fd = os.open(path, FILE_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise error(
                f"the {what} {where} is a symbolic link: expected a regular file.",
                tip=f"Copy the {what} into place instead of linking it.",
            ) from None
        raise error(f"cannot open the {what} {where}: {exc.strerror or exc}.", tip=tip) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise error(f"the {what} {where} is {kind_of(st.st_mode)}: expected a regular file.", tip=tip)
        if st.st_size > max_size:
            raise error(
                f"the {what} {where} is {st.st_size} bytes: expected at most {max_size}.",
                tip=f"Check that {where} is the {what} you meant.",
            )
        return os.fdopen(fd, "rb"), st.st_size
    except BaseException:
        os.close(fd)
        raise


def read_regular(
    path: Path | str,
    *,
    what: str,
    max_size: int,
    error: type[LockbuildError] = LockbuildError,
    dir_fd: int | None = None,
    shown: str | None = None,
) -> bytes:
    """The whole of a small regular file (see :func:`open_regular`); one that grows past the size it
    had when opened is refused."""
    f, size = open_regular(path, what=what, max_size=max_size, error=error, dir_fd=dir_fd, shown=shown)
    with f:
        return bounded_read(f, size, what=f"the {what} {shown or path}", error=error, grew=True)


def bounded_read(
    f: BinaryIO, limit: int, *, what: str, error: type[LockbuildError] = LockbuildError, grew: bool = False
) -> bytes:
    """At most ``limit`` bytes of ``f``; more is an error (``grew``: the file grew while it was read)."""
    try:
        data = f.read(limit + 1)
    except OSError as exc:
        raise error(f"cannot read {what}: {exc.strerror or exc}.") from None
    if len(data) > limit:
        why = f"grew while it was read: expected {limit} bytes" if grew else f"is over {limit} bytes"
        raise error(f"{what} {why}.")
    return data


def open_dir(path: Path | str, *, dir_fd: int | None = None, follow: bool = False) -> int:
    """A descriptor for a directory; a symbolic link at its last component is refused (ELOOP or
    ENOTDIR) unless ``follow``. The caller closes it."""
    flags = DIR_FLAGS & ~os.O_NOFOLLOW if follow else DIR_FLAGS
    return os.open(path, flags, dir_fd=dir_fd)


@contextlib.contextmanager
def opened_dir(path: Path | str, *, dir_fd: int | None = None, follow: bool = False) -> Iterator[int]:
    fd = open_dir(path, dir_fd=dir_fd, follow=follow)
    try:
        yield fd
    finally:
        os.close(fd)


def open_under(dir_fd: int, rel: str) -> int:
    """A descriptor for the directory ``rel`` (``a/b``; ``""`` for ``dir_fd`` itself) under an opened
    directory, walked one component at a time with O_NOFOLLOW: a link on the way is refused (ELOOP or
    ENOTDIR), never followed. The caller closes it."""
    fd = os.dup(dir_fd)
    try:
        for part in rel.split("/") if rel else ():
            nxt = open_dir(part, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def fd_path(dir_fd: int) -> Path:
    """A path that names the directory opened as ``dir_fd`` for as long as it stays open (Linux's
    ``/proc/self/fd``), for the calls that take a path: whatever is renamed or planted along the path the
    directory was opened by afterwards, what is made under this one lands in the directory opened."""
    return Path(f"/proc/self/fd/{dir_fd}")


def ancestry(dir_fd: int) -> list[tuple[int, int]]:
    """(st_dev, st_ino) of the directory opened as ``dir_fd`` and of every directory above it up to the
    root, walked by ``..`` from the descriptor (no path: a link, a bind mount or a rename cannot hide one)."""
    ids: list[tuple[int, int]] = []
    fd = os.dup(dir_fd)
    try:
        while len(ids) < 4096:
            st = os.fstat(fd)
            if ids and ids[-1] == (st.st_dev, st.st_ino):
                break  # the root is its own parent
            ids.append((st.st_dev, st.st_ino))
            up = os.open("..", DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = up
    finally:
        os.close(fd)
    return ids


def list_dir(dir_fd: int) -> list[str]:
    """The entries of a directory opened by descriptor, sorted."""
    return sorted(os.listdir(dir_fd))


def lstat_at(name: str, dir_fd: int) -> os.stat_result | None:
    """The entry ``name`` of an opened directory, not following a link; None when absent."""
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def read_link_at(name: str, dir_fd: int) -> str | None:
    """What the entry ``name`` of an opened directory points at (``readlinkat``), never following it;
    None when it is absent or not a symbolic link."""
    try:
        return os.readlink(name, dir_fd=dir_fd)
    except OSError:  # absent (ENOENT), or not a link (EINVAL)
        return None
