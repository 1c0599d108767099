"""Where a self-test runs: a private directory under a known parent that the next run sweeps, and a new
network namespace (``unshare -n`` as root, ``unshare -rn`` otherwise: an unprivileged user-and-network
namespace). The namespace has only its own loopback, down: nothing the test runs can reach another host."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import subprocess
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


def namespace(user: bool | None = None) -> list[str]:
    """The command prefix that runs a program in a new network namespace; raises where none can be made.
    ``user``: also a new user namespace (``unshare -rn``); default: only when not root."""
    exe = shutil.which("unshare")
    if exe is None:
        raise LockbuildError(
            "the self-test needs a network namespace, and unshare (util-linux) is not installed.",
            tip="Install util-linux; the self-test never runs an engine with the network in reach.",
        )
    argv = [exe, "-r", "-n"] if (os.geteuid() != 0 if user is None else user) else [exe, "-n"]
    proc = subprocess.run([*argv, "true"], capture_output=True, text=True, timeout=60, check=False)
    if proc.returncode != 0:
        raise LockbuildError(
            f"cannot make a network namespace with {' '.join(argv)}: {proc.stderr.strip()[-200:]}",
            tip="Allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, or "
            "user.max_user_namespaces > 0), or run the self-test as root.",
        )
    return argv
