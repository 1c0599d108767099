"""Links, renames, removals and trees, each by descriptor: a hard link never follows a link, a tree is
deleted relative to its opened parent (``unlinkat``), never through a path built after a check (a directory
another user can write could be swapped for a link between the two); a directory is fsynced after a rename
into it."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import stat
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from lockbuild.fsio.creating import is_beside, walk_making
from lockbuild.fsio.opening import FILE_FLAGS, list_dir, lstat_at, open_dir, opened_dir


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
    fd = walk_making(dest, parts[:-1])
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
    fd = walk_making(dest, parts[:-1])
    try:
        os.symlink(target, parts[-1], dir_fd=fd)
    finally:
        os.close(fd)


def rename_at(src_dir_fd: int, src_name: str, dst_dir_fd: int, dst_name: str) -> None:
    """Rename an entry of one opened directory to a name in another (replacing a file there), by descriptor."""
    os.replace(src_name, dst_name, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)


def make_dirs_under(dest: Path, rel: str) -> None:
    """Make ``dest/rel`` directory by directory, never following a link on the way."""
    os.close(walk_making(dest, rel.split("/")))


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


def sweep_dirs_beside(final: Path, ours: Callable[[int], bool], *, what: str = "partial") -> int:
    """Remove the directories ``temp_beside(final)`` named that killed runs left: each a directory (not a
    link) of this user's, that no running process holds locked (``flock``: a run holds its own for as long
    as it works in it) and that ``ours`` recognises by its opened descriptor; removed by descriptor
    (:func:`remove_at`). A user's own file or directory of a look-alike name is never touched. Returns how
    many; a directory that cannot be read is left alone."""
    removed = 0
    try:
        parent = open_dir(final.parent, follow=True)
    except OSError:
        return 0
    try:
        for name in list_dir(parent):
            if not is_beside(final, name, what):
                continue
            try:
                fd = open_dir(name, dir_fd=parent)
            except OSError:
                continue  # a link, a file, gone
            try:
                if os.fstat(fd).st_uid != os.geteuid() or not ours(fd):
                    continue
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # a run is still working in it
                st, now = os.fstat(fd), lstat_at(name, parent)
                if now is None or (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
                    continue  # renamed meanwhile: judge it next time
                with contextlib.suppress(OSError):
                    remove_at(parent, name)
                    removed += 1
            finally:
                os.close(fd)
    finally:
        os.close(parent)
    return removed


def fsync_dir(fd: int) -> None:
    """Make a rename into the directory ``fd`` durable (a file system that cannot is no error)."""
    with contextlib.suppress(OSError):
        os.fsync(fd)


def fsync_dir_path(path: Path) -> None:
    with contextlib.suppress(OSError), opened_dir(path, follow=True) as fd:
        os.fsync(fd)
