"""Locks (``flock``) with deadlines: a lock waits up to a deadline and then fails with the caller's
``BusyError``; a lock file is opened without following a link."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import time
from collections.abc import Callable, Iterator

from lockbuild.errors import BusyError, LockbuildError


def open_lockfile(name: str, *, dir_fd: int | None = None) -> int:
    """A lock file's descriptor (created if absent), never through a link; a non-regular file is refused."""
    fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644, dir_fd=dir_fd)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, f"{name} is not a regular file")
    return fd


def flock_by(fd: int, *, exclusive: bool, deadline: float, busy: Callable[[], LockbuildError]) -> None:
    """Take ``flock`` on ``fd``, retrying until the monotonic ``deadline``; then raise ``busy()``."""
    mode = (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB
    delay = 0.02
    while True:
        try:
            fcntl.flock(fd, mode)
            return
        except BlockingIOError:
            left = deadline - time.monotonic()
            if left <= 0:
                raise busy() from None
            time.sleep(min(delay, left))
            delay = min(delay * 2, 0.2)


@contextlib.contextmanager
def flocked(fd: int, *, exclusive: bool, wait: float, busy: Callable[[], LockbuildError]) -> Iterator[None]:
    """Hold ``flock`` on ``fd``, waiting up to ``wait`` seconds; then raise ``busy()`` (a BusyError)."""
    flock_by(fd, exclusive=exclusive, deadline=time.monotonic() + wait, busy=busy)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)


def busy_error(message: str, tip: str) -> Callable[[], LockbuildError]:
    return lambda: BusyError(message, tip=tip)
