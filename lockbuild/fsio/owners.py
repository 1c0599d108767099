"""Ownership and ancestor safety: the one rule for trust directories and stores (``owner_problem``) and for
the directories above a place lockbuild works in (``ancestor_problem``)."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path


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
