"""Placing an environment: one installer per engine (a lock file), stale staging cleanup, atomic swap."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import os
import shutil
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from lockbuild.errors import BusyError, InstallError
from lockbuild.fsio import flock_by, fsync_dir_path, list_dir, open_lockfile, opened_dir, remove_at

STAGING_SUFFIX = ".partial"
LOCK_NAME = ".lockbuild.lock"
_RENAME_EXCHANGE = 2


def _same(path: Path, st: os.stat_result) -> bool:
    try:
        now = path.lstat()
    except FileNotFoundError:
        return False
    return (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino)


def open_lock(path: Path) -> tuple[int, os.stat_result]:
    """The lock file, opened without following a link and without truncating anything; refused unless
    it is a regular file of the installing user (another user's file is never written to)."""
    try:
        fd = open_lockfile(str(path))
    except OSError as exc:
        raise InstallError(
            f"cannot open the lock file {path}: {exc.strerror} (a symbolic link or another user's file?).",
            tip="Remove it; only the installing user may create files under --root.",
        ) from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_nlink != 1:
        os.close(fd)
        raise InstallError(
            f"the lock file {path} is not a regular file of the installing user with one name (uid {st.st_uid}, "
            f"{st.st_nlink} links); refused.",
            tip="Remove it; only the installing user may create files under --root.",
        )
    return fd, st


@contextmanager
def engine_lock(engine_dir: Path, *, wait: float = 0.0) -> Iterator[None]:
    """Hold ``<root>/<engine>/.lockbuild.lock``; wait up to ``wait`` seconds for another installer.

    The holder unlinks the file before it lets go, so nothing is left behind. A waiter that then gets
    the lock holds a file no longer in the directory: it checks that the path still names the inode it
    locked, and starts again if not.
    """
    path = engine_dir / LOCK_NAME
    deadline = time.monotonic() + wait
    while True:
        fd, st = open_lock(path)
        try:
            _acquire(fd, engine_dir, deadline)
        except BaseException:
            os.close(fd)
            raise
        if _same(path, st):
            break
        os.close(fd)  # the holder removed it as we waited: lock the file that is there now
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        try:
            if _same(path, st):
                path.unlink()
        finally:
            os.close(fd)  # closing releases the lock


def _acquire(fd: int, engine_dir: Path, deadline: float) -> None:
    def busy() -> BusyError:
        holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
        return BusyError(
            f"another lockbuild (pid {holder}) is installing or removing {engine_dir.name} under "
            f"{engine_dir.parent}; only one may run per engine.",
            tip="Wait for it to finish, or pass --wait SECONDS to queue behind it.",
        )

    flock_by(fd, exclusive=True, deadline=deadline, busy=busy)


def clean_stale(engine_dir: Path) -> list[str]:
    """Remove staging directories left by killed runs (call only while holding the engine lock). Links
    are never followed: a planted link is removed as a link, a directory's tree by descriptor."""
    removed = []
    with opened_dir(engine_dir) as dfd:  # listed and deleted relative to the directory, never by path
        for name in list_dir(dfd):
            if name.endswith(STAGING_SUFFIX):
                with contextlib.suppress(OSError):
                    remove_at(dfd, name)
                removed.append(name)
    return removed


_fsync_dir = fsync_dir_path


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
