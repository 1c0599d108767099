"""Ownership and ancestor safety: the one rule for trust directories and stores (``owner_problem``), for
the directories above a place lockbuild works in (``ancestor_problem``), and for a program of the node's
that lockbuild runs and records, the interpreter (``program_problem``: both rules, on every link of its
way)."""

from __future__ import annotations

import errno
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

    directory: Path  # for program_problem: the directory, link or file that is unsafe
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


MAX_LINKS = 40  # as the kernel's own bound (ELOOP)


def resolution(path: Path) -> tuple[tuple[Path, ...], Path]:
    """How ``path`` resolves, component by component as the kernel does: every symbolic link read on the
    way (each named by its place, the directories before it already resolved) and the path it ends at.
    OSError when a component is missing or the links loop."""
    links: list[Path] = []
    pending = [p for p in reversed(os.fspath(Path.cwd() / path).split("/")) if p not in ("", ".")]
    here = Path("/")
    while pending:
        part = pending.pop()
        if part == "..":
            here = here.parent
            continue
        step = here / part
        if not stat.S_ISLNK(os.lstat(step).st_mode):
            here = step
            continue
        links.append(step)
        if len(links) > MAX_LINKS:
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), str(path))
        target = os.fspath(step.readlink())
        if target.startswith("/"):
            here = Path("/")
        pending += [p for p in reversed(target.split("/")) if p not in ("", ".")]
    return tuple(links), here


def program_problem(path: Path) -> Unsafe | None:
    """Why a program of the node's that lockbuild runs as this user and names in what it writes (the
    interpreter: ``pyvenv.cfg`` records it) could be swapped by another user; None when it cannot. The
    ``--root`` rules on every step of its way: the directories above it as named, above every symbolic link
    its resolution reads and above the file it resolves to pass ``ancestor_problem``; every such link is
    owned by root or this user (in a sticky directory its owner may replace it); the file passes
    ``owner_problem``. ``lockbuild/bundle/bootstrap.sh`` (its ``program_problem``) holds the same rule.
    OSError when it cannot be examined."""
    links, real = resolution(path)
    for place in (Path(os.path.abspath(path)), *links, real):  # noqa: PTH100 (as named, links kept)
        found = ancestor_problem(place)
        if found is not None:
            return found
    for link in links:
        uid = os.lstat(link).st_uid
        if uid not in (0, os.geteuid()):
            who = f"neither root nor this user (uid {os.geteuid()})"
            return Unsafe(link, f"is a symbolic link owned by uid {uid}, {who}", owner=True)
    st = real.stat()
    problem = owner_problem(st)
    if problem is not None:
        return Unsafe(real, problem, owner=st.st_uid not in (0, os.geteuid()))
    return None
