"""Where the installer may write: --root, the engine directory and the target must belong to the
installing user alone: each is refused if it is a symbolic link, not a directory, owned by anyone else,
or writable by its group or others (else that user could plant a link where root will write). A team
shares a root by installing as one service account (docs/site-administrators.md)."""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from lockbuild.errors import InstallError
from lockbuild.fsio import ancestor_problem

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_TIP = (
    "--root, ROOT/ENGINE and every environment in it must be directories owned by the installing user "
    "and writable by no one else (chmod 755); see docs/site-administrators.md."
)


def check_place(path: Path, what: str) -> os.stat_result:
    """``path`` exists, is a real directory (not a link), owned by this user, writable by no one else."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        raise InstallError(f"cannot examine {what} {path}: {exc.strerror}.", tip=_TIP) from None
    problem = None
    if stat.S_ISLNK(st.st_mode):
        problem = "is a symbolic link"
    elif not stat.S_ISDIR(st.st_mode):
        problem = "is not a directory"
    elif st.st_uid != os.geteuid():
        problem = f"is owned by uid {st.st_uid}, not by the installing user (uid {os.geteuid()})"
    elif st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        problem = f"is writable by its group or by others (mode {stat.S_IMODE(st.st_mode):04o})"
    if problem:
        raise InstallError(f"refused {what} {path}: it {problem}.", tip=_TIP)
    return st


def check_ancestors(root: Path) -> None:
    """Every directory above ``root`` (as named, and as it resolves) must be owned by root or this user and
    writable by no one else, unless it is sticky (``fsio.ancestor_problem``, the rule stores share).
    Otherwise another user could rename --root away and put a link or a directory of theirs in its place
    between the checks and the writes, and every check made by name would be judged on the wrong tree."""
    try:
        found = ancestor_problem(root)
    except OSError as exc:
        raise InstallError(f"cannot examine {exc.filename}, above --root {root}: {exc.strerror}.", tip=_TIP) from None
    if found is None:
        return
    d = found.directory
    if found.owner:
        fix = "Put --root under directories owned by root or by the installing user"  # chmod cannot help
    else:
        fix = (
            "Put --root under directories only root (or the installing user) can write, or make the"
            f" shared one sticky (chmod +t {d})"
        )
    raise InstallError(
        f"refused --root {root}: the directory {d} above it {found.problem}, so another user could swap"
        " --root for a tree of theirs while lockbuild works in it.",
        tip=f"{fix}; see docs/site-administrators.md.",
    )


def prepare(root: Path, engine: str, *, what: str = "--root") -> Path:
    """Make (if absent) and check --root and ROOT/ENGINE; the engine directory is made by descriptor, so
    a link planted in its place is refused, never followed. Returns ROOT/ENGINE. ``what``: how messages
    name ``root`` (``--models`` for a models folder)."""
    check_ancestors(root)  # before anything is made there
    if not os.path.lexists(root):
        try:
            root.mkdir(parents=True, mode=0o755)
            root.chmod(0o755)
        except OSError as exc:
            raise InstallError(f"cannot create {what} {root}: {exc.strerror}.", tip=_TIP) from None
    check_ancestors(root)
    check_place(root, what)
    fd = os.open(root, _DIR_FLAGS)
    try:
        with contextlib.suppress(FileExistsError):
            os.mkdir(engine, 0o755, dir_fd=fd)
            made = os.open(engine, _DIR_FLAGS, dir_fd=fd)
            os.fchmod(made, 0o755)  # whatever the umask: a group-writable engine dir would refuse itself
            os.close(made)
    except OSError as exc:
        raise InstallError(f"cannot create the engine directory {root / engine}: {exc.strerror}.", tip=_TIP) from None
    finally:
        os.close(fd)
    engine_dir = root / engine
    check_place(engine_dir, "the engine directory")
    return engine_dir


def check_target(target: Path) -> None:
    """An existing environment must pass the same rule (one made by someone else is refused)."""
    if os.path.lexists(target):
        check_place(target, "the installed environment")
