"""Where a self-test keeps its files: a private directory under a known parent that the next run sweeps.
(The engine itself runs in :mod:`lockbuild.proc.sandbox`, bubblewrap.)"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from lockbuild.errors import LockbuildError

_RUN = re.compile(r"run-(\d+)-[A-Za-z0-9_]+")


def parent_dir(base: Path | None = None) -> Path:
    """``$TMPDIR/lockbuild-selftest-<uid>``: made 0700 here, and refused if anyone else owns or can write it."""
    parent = (base or Path(tempfile.gettempdir())) / f"lockbuild-selftest-{os.geteuid()}"
    with contextlib.suppress(FileExistsError):
        parent.mkdir(mode=0o700)
    st = os.lstat(parent)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
        raise LockbuildError(
            f"{parent} is not a private directory of this user (a link, another owner, or open to others).",
            tip="Remove it, or set TMPDIR to a directory only you can write.",
        )
    return parent


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _force_remove(path: Path) -> None:
    def retry(func: Callable[..., Any], p: str, _exc: Any) -> None:
        with contextlib.suppress(OSError):
            Path(p).parent.chmod(0o700)  # a directory the engine made read-only
            func(p)

    handler: dict[str, Any] = {"onexc" if sys.version_info >= (3, 12) else "onerror": retry}  # 3.12 renamed it
    shutil.rmtree(path, **handler)


def sweep(parent: Path) -> list[Path]:
    """Remove what killed runs left: every ``run-<pid>-*`` whose process is gone."""
    removed = []
    for entry in sorted(parent.iterdir()):
        m = _RUN.fullmatch(entry.name)
        if m and not entry.is_symlink() and entry.is_dir() and not _alive(int(m[1])):
            _force_remove(entry)
            removed.append(entry)
    return removed


@contextlib.contextmanager
def workdir(base: Path | None = None) -> Iterator[Path]:
    parent = parent_dir(base)
    sweep(parent)
    work = Path(tempfile.mkdtemp(prefix=f"run-{os.getpid()}-", dir=parent))
    try:
        yield work
    finally:
        if work.exists():
            _force_remove(work)
