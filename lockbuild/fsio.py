"""The file primitives: the one module of the package that opens, lists, locks and deletes files.

Everything lockbuild reads from outside (a bundle, a signature file, a key, a store's blob, a part, a
delta, a registry answer) and every tree it deletes goes through these functions, so each rule lives
once:

- a file from outside is opened with ``O_NOFOLLOW | O_NONBLOCK`` and judged on its descriptor
  (``fstat``): a regular file of bounded size, never a link, FIFO, device or directory (a FIFO would
  hang the reader, ``/dev/zero`` would never end, a link in a shared directory could point anywhere);
- a directory is opened without following a link, and what is inside it is opened, listed and
  deleted *relative to that descriptor* (``openat``/``unlinkat``), never through a path built after a
  check (a directory another user can write could be swapped for a link between the two);
- reads are bounded, copies hash what they copy (JSON, parsed with a size and a nesting bound, is
  ``lockbuild.jsonio``);
- a lock waits up to a deadline and then fails; a directory is fsynced after a rename into it.
- a place lockbuild works in (``--root``, a store) is safe only when every directory above it is owned by
  root or this user and writable by no one else unless sticky (``ancestor_problem``, the one rule).

``tests/test_layout.py`` fails when library code outside this module calls ``os.open`` (or deletes a
tree by path) outside a short allow-list, each entry with its reason.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import secrets
import shutil
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol

from lockbuild.digest import CHUNK
from lockbuild.errors import BusyError, LockbuildError

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


# --- opening -----------------------------------------------------------------------------------


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


def create_new(name: Path | str, *, dir_fd: int | None = None, mode: int = 0o644) -> BinaryIO:
    """A new file, created ``O_EXCL|O_NOFOLLOW`` (nothing that exists, link or file, is written through).
    The one way lockbuild creates a file (``tests/test_layout.py`` holds every module to it)."""
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


def sweep_beside(final: Path, *, older_than: float = STALE_BESIDE_SECONDS, what: str = "partial") -> int:
    """Remove the files ``temp_beside(final)`` named that killed runs left (a bundle's is gigabytes)."""
    prefix, suffix = f".{final.name}.", f".{what}"

    def mine(name: str) -> bool:
        token = name[len(prefix) : -len(suffix)] if name.startswith(prefix) and name.endswith(suffix) else ""
        return len(token) == 16 and not token.strip("0123456789abcdef")

    return sweep_stale(final.parent, mine, older_than=older_than)


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


def open_lockfile(name: str, *, dir_fd: int | None = None) -> int:
    """A lock file's descriptor (created if absent), never through a link; a non-regular file is refused."""
    fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644, dir_fd=dir_fd)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, f"{name} is not a regular file")
    return fd


def create_under(dest: Path, rel: str, mode: int = 0o644) -> BinaryIO:
    """A new file at ``dest/rel``. Each directory on the way is made here or is already a plain
    directory, walked by descriptor with O_NOFOLLOW (a link planted in the tree is never followed);
    the file is created O_CREAT|O_EXCL|O_NOFOLLOW, so nothing that exists is overwritten.
    Raises FileExistsError (the name is taken) or NotADirectoryError/OSError (a link or file on the way)."""
    parts = rel.split("/")
    fd = _walk_making(dest, parts[:-1])
    try:
        out = os.open(parts[-1], NEW_FLAGS, mode, dir_fd=fd)
    finally:
        os.close(fd)
    return os.fdopen(out, "wb")


def _walk_making(dest: Path, parts: list[str]) -> int:
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


def link_file(src_dir_fd: int, src_name: str, dst_dir_fd: int, dst_name: str) -> None:
    """The one hard-link call: ``src_name`` of an opened directory, never followed if it is a link, under
    the new name ``dst_name`` of another opened directory (``linkat``, no AT_SYMLINK_FOLLOW)."""
    os.link(src_name, dst_name, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd, follow_symlinks=False)


def link_under(src_dir_fd: int, src_name: str, dest: Path, rel: str) -> BinaryIO | None:
    """A hard link at ``dest/rel`` (directories on the way made and walked as :func:`create_under` walks
    them) to the regular file ``src_name`` of an opened directory, opened for reading from its new name
    (O_NOFOLLOW): the caller checks the bytes it will use, through the name it will use them by.

    None, with nothing made, where a link cannot stand in for a copy: the source is absent, not a regular
    file, or not owned by this user (a link would give the environment a file someone else can change),
    or the file systems refuse (EXDEV: another file system; EPERM: protected hard links; EMLINK; a file
    system without hard links). The caller then copies. FileExistsError: the name is taken."""
    st = lstat_at(src_name, src_dir_fd)
    if st is None or not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
        return None
    parts = rel.split("/")
    fd = _walk_making(dest, parts[:-1])
    try:
        try:
            link_file(src_dir_fd, src_name, fd, parts[-1])
        except FileExistsError:
            raise
        except OSError:
            return None
        out = os.open(parts[-1], FILE_FLAGS, dir_fd=fd)
    finally:
        os.close(fd)
    return os.fdopen(out, "rb")


def symlink_under(dest: Path, rel: str, target: str) -> None:
    """A new symbolic link at ``dest/rel`` pointing at ``target`` (directories on the way made and walked
    as :func:`create_under` walks them; nothing that exists is replaced: FileExistsError)."""
    parts = rel.split("/")
    fd = _walk_making(dest, parts[:-1])
    try:
        os.symlink(target, parts[-1], dir_fd=fd)
    finally:
        os.close(fd)


def rename_at(src_dir_fd: int, src_name: str, dst_dir_fd: int, dst_name: str) -> None:
    """Rename an entry of one opened directory to a name in another (replacing a file there), by descriptor."""
    os.replace(src_name, dst_name, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)


def make_dirs_under(dest: Path, rel: str) -> None:
    """Make ``dest/rel`` directory by directory, never following a link on the way."""
    fd = open_dir(dest)
    try:
        for part in rel.split("/"):
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o755, dir_fd=fd)
            nxt = os.open(part, DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
    finally:
        os.close(fd)


def list_dir(dir_fd: int) -> list[str]:
    """The entries of a directory opened by descriptor, sorted."""
    return sorted(os.listdir(dir_fd))


def lstat_at(name: str, dir_fd: int) -> os.stat_result | None:
    """The entry ``name`` of an opened directory, not following a link; None when absent."""
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


# --- deleting ----------------------------------------------------------------------------------


def remove_at(dir_fd: int, name: str) -> None:
    """Delete the entry ``name`` of an opened directory: a file or link is unlinked (a link is never
    followed), a directory is removed with everything in it, walked by descriptor (``shutil.rmtree``
    with ``dir_fd``, which on Linux never follows a link inside the tree either). Absent is fine."""
    st = lstat_at(name, dir_fd)
    if st is None:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(name, dir_fd=dir_fd)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=dir_fd)


def remove_tree(path: Path, *, missing_ok: bool = True) -> None:
    """Delete ``path`` (a tree or a file) by descriptor from its parent: the parent is opened without
    following a link at its last component, then :func:`remove_at`. A tree another user can write
    inside cannot redirect the deletion elsewhere."""
    try:
        parent = open_dir(path.parent, follow=True)
    except FileNotFoundError:
        if missing_ok:
            return
        raise
    try:
        if not missing_ok and lstat_at(path.name, parent) is None:
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", str(path))
        remove_at(parent, path.name)
    finally:
        os.close(parent)


def fsync_dir(fd: int) -> None:
    """Make a rename into the directory ``fd`` durable (a file system that cannot is no error)."""
    with contextlib.suppress(OSError):
        os.fsync(fd)


def fsync_dir_path(path: Path) -> None:
    with contextlib.suppress(OSError), opened_dir(path, follow=True) as fd:
        os.fsync(fd)


# --- locks -------------------------------------------------------------------------------------


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


# --- copying and parsing -----------------------------------------------------------------------


class Writer(Protocol):
    def write(self, data: bytes, /) -> int: ...


def copy_with_hash(
    src: BinaryIO,
    dst: Writer | None,
    size: int,
    *,
    advance: Callable[[int], None] | None = None,
) -> tuple[int, str]:
    """Copy up to ``size`` bytes of ``src`` to ``dst`` (None: only hash), reading at most one byte
    more, so a longer source is seen without being copied: (bytes seen, sha256 of the first ``size``)."""
    h = hashlib.sha256()
    n = 0
    while chunk := src.read(min(CHUNK, size + 1 - n)):
        n += len(chunk)
        if n > size:
            break
        h.update(chunk)
        if dst is not None:
            dst.write(chunk)
        if advance is not None:
            advance(len(chunk))
    return n, h.hexdigest()


# --- ownership ---------------------------------------------------------------------------------


def owner_problem(st: os.stat_result, *, allow_root: bool = True) -> str | None:
    """Why a directory (or file) that decides what lockbuild trusts or writes is unsafe: owned by
    someone other than this user (or root, with ``allow_root``), or writable by its group or others.
    None when it is safe. The one rule for trust directories and stores."""
    owners = (os.geteuid(), 0) if allow_root else (os.geteuid(),)
    if st.st_uid not in owners:
        who = "neither this user" + (" nor root" if allow_root else "")
        return f"is owned by uid {st.st_uid}, {who} (this user is uid {os.geteuid()})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"is writable by its group or by others (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


@dataclass(frozen=True)
class Unsafe:
    """A directory above a place lockbuild works in that another user could use to swap that place."""

    directory: Path
    problem: str  # "is owned by uid N, ..." or "is writable by its group or by others and not sticky (...)"
    owner: bool  # True: owned by another user (no chmod helps); False: writable by others (chmod +t helps)


def ancestor_problem(path: Path) -> Unsafe | None:
    """The first directory above ``path`` (as named, and as it resolves) that is owned by neither root nor
    this user, or writable by its group or others without being sticky (like /tmp, where no one may rename
    another's entry); None when every one is safe. Otherwise another user could rename ``path`` (or a
    directory above it) away and put a tree of theirs in its place between the checks and the writes. The
    one rule for ``--root`` and for stores. Directories not made yet are passed over (check again once
    made); one that cannot be examined raises OSError."""
    absolute = Path(os.path.abspath(path))  # noqa: PTH100 (normalised, links kept: the path as named)
    for start in (absolute.parent, Path(os.path.realpath(absolute)).parent):
        for d in (start, *start.parents):
            try:
                st = os.lstat(d)
            except FileNotFoundError:
                continue
            if stat.S_ISLNK(st.st_mode):
                st = d.stat()  # the link itself sits in a checked directory; judge what it points to too
            if st.st_uid not in (0, os.geteuid()):
                return Unsafe(
                    d, f"is owned by uid {st.st_uid}, neither root nor this user (uid {os.geteuid()})", owner=True
                )
            if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
                return Unsafe(
                    d,
                    f"is writable by its group or by others and not sticky (mode {stat.S_IMODE(st.st_mode):04o})",
                    owner=False,
                )
    return None


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
