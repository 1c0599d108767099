"""Opening a file that came from outside (a bundle, a signature, a key, a policy) safely.

Every such file must be a regular file of bounded size: a FIFO would hang the reader, a device
such as /dev/zero would never end, and a symlink in a shared directory could point anywhere. The
file is opened with ``O_NOFOLLOW | O_NONBLOCK`` (so neither a symlink nor a FIFO without a writer
can block or redirect the open), then ``fstat`` decides on the open descriptor, never on the name.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

from lockbuild.errors import LockbuildError


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def open_regular(
    path: Path, *, what: str, max_size: int, error: type[LockbuildError] = LockbuildError
) -> tuple[BinaryIO, int]:
    """``path`` opened for reading, and its size; raise ``error`` unless it is a regular file (not a
    symlink, FIFO, device or directory) of at most ``max_size`` bytes. ``FileNotFoundError`` passes
    through, so that callers can tell "absent" from "unreadable"."""
    tip = f"Give the path of the {what} itself: a plain file, not a link, pipe or device."
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if path.is_symlink():
            raise error(
                f"the {what} {path} is a symbolic link: expected a regular file.",
                tip=f"Copy the {what} into place instead of linking it.",
            ) from None
        raise error(f"cannot open the {what} {path}: {exc.strerror or exc}.", tip=tip) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise error(f"the {what} {path} is {_kind(st.st_mode)}: expected a regular file.", tip=tip)
        if st.st_size > max_size:
            raise error(
                f"the {what} {path} is {st.st_size} bytes: expected at most {max_size}.",
                tip=f"Check that {path} is the {what} you meant.",
            )
        return os.fdopen(fd, "rb"), st.st_size
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: Path, *, what: str, max_size: int, error: type[LockbuildError] = LockbuildError) -> bytes:
    """The whole of a small regular file (see :func:`open_regular`); a file that grows past the size
    it had when opened is refused."""
    f, size = open_regular(path, what=what, max_size=max_size, error=error)
    with f:
        try:
            data = f.read(size + 1)
        except OSError as exc:
            raise error(f"cannot read the {what} {path}: {exc.strerror or exc}.") from None
    if len(data) > size:
        raise error(f"the {what} {path} grew while it was read: expected {size} bytes.")
    return data
