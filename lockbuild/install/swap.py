"""Placing an environment: one installer per engine (a lock file), stale staging cleanup, atomic swap."""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import fcntl
import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from lockbuild.errors import BusyError, InstallError

STAGING_SUFFIX = ".partial"
LOCK_NAME = ".lockbuild.lock"
_RENAME_EXCHANGE = 2


@contextmanager
def engine_lock(engine_dir: Path, *, wait: float = 0.0) -> Iterator[None]:
    """Hold ``<root>/<engine>/.lockbuild.lock``; wait up to ``wait`` seconds for another installer."""
    engine_dir.mkdir(parents=True, exist_ok=True)
    path = engine_dir / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
                    raise BusyError(
                        f"another lockbuild (pid {holder}) is installing or removing {engine_dir.name} under "
                        f"{engine_dir.parent}; only one may run per engine.",
                        tip="Wait for it to finish, or pass --wait SECONDS to queue behind it.",
                    ) from None
                time.sleep(0.2)
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def clean_stale(engine_dir: Path) -> list[str]:
    """Remove staging directories left by killed runs (call only while holding the engine lock)."""
    removed = []
    for p in sorted(engine_dir.glob(f"*{STAGING_SUFFIX}")):
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
        removed.append(p.name)
    return removed


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _exchange(a: Path, b: Path) -> bool:
    """renameat2(RENAME_EXCHANGE): swap two paths atomically. False where the system cannot."""
    libc_name = ctypes.util.find_library("c")
    if libc_name is None:
        return False
    libc = ctypes.CDLL(libc_name, use_errno=True)
    fn = getattr(libc, "renameat2", None)
    if fn is None:
        return False
    at_fdcwd = -100
    rc = fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), _RENAME_EXCHANGE)
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise InstallError(f"cannot swap {a} and {b}: {os.strerror(err)}.")


def swap_into_place(staged: Path, target: Path, *, after_exchange: Callable[[], None] | None = None) -> None:
    """Put ``staged`` at ``target``. At every instant ``target`` is the old or the new environment.

    With an existing target the two are exchanged atomically (renameat2); the old one, now under the
    staging name, is then removed. A kill before the removal leaves a stale staging dir, cleaned next run.
    """
    _fsync_dir(staged)
    if not target.exists():
        staged.rename(target)
    elif _exchange(staged, target):
        pass
    else:  # pragma: no cover - filesystems without RENAME_EXCHANGE
        aside = target.with_name(target.name + ".old" + STAGING_SUFFIX)
        target.rename(aside)
        staged.rename(target)
        staged = aside
    _fsync_dir(target.parent)
    if after_exchange is not None:
        after_exchange()
    if staged.exists():
        shutil.rmtree(staged, ignore_errors=True)
