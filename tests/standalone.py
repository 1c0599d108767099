"""A relocatable CPython tree packed like python-build-standalone's ``install_only`` archives
(``python/bin/python3.X``, ``python/lib/python3.X/...``), made from this machine's Python."""

from __future__ import annotations

import gzip
import io
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

X_Y = f"{sys.version_info[0]}.{sys.version_info[1]}"
# What an interpreter needs to start, make a venv and run an engine; the rest is left out for speed.
_LEFT_OUT = (
    "test",
    "site-packages",
    "__pycache__",
    "idlelib",
    "tkinter",
    "turtledemo",
    "ensurepip",
    "lib2to3",
    "pydoc_data",
    "config-*",
    "*.pyc",
    "_test*",
    "_ctypes_test*",
    "_xxtest*",
    "xxlimited*",
)


def make_tree(dest: Path) -> Path:
    """``dest/python``: the binary, a ``python3`` link to it, and the standard library with lib-dynload."""
    base = Path(sys.base_prefix)
    top = dest / "python"
    (top / "bin").mkdir(parents=True)
    shutil.copy2(base / "bin" / f"python{X_Y}", top / "bin" / f"python{X_Y}")
    (top / "bin" / "python3").symlink_to(f"python{X_Y}")
    shutil.copytree(
        base / "lib" / f"python{X_Y}", top / "lib" / f"python{X_Y}", ignore=shutil.ignore_patterns(*_LEFT_OUT)
    )
    return top


def runs_from(top: Path) -> str:
    """sys.prefix as the copied interpreter sees it (it must be the copy, not this machine's Python)."""
    out = subprocess.run(
        [str(top / "bin" / f"python{X_Y}"), "-I", "-c", "import sys, json; print(sys.prefix)"],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin"},
    )
    return out.stdout.strip()


def pack(top: Path) -> bytes:
    """A deterministic .tar.gz of ``top`` (named ``python/`` inside): sorted, mtime 0, uid/gid 0."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for path in [top, *sorted(top.rglob("*"))]:
            info = tf.gettarinfo(
                str(path), arcname="python/" + path.relative_to(top).as_posix() if path != top else "python"
            )
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            info.mode = 0o755 if info.isdir() or info.mode & 0o111 else 0o644
            if info.isreg():
                with path.open("rb") as f:
                    tf.addfile(info, f)
            else:
                tf.addfile(info)
    return gzip.compress(raw.getvalue(), compresslevel=1, mtime=0)


def archive_name(tag: str = "20251014") -> str:
    micro = sys.version_info[2]
    return f"cpython-{X_Y}.{micro}+{tag}-x86_64-unknown-linux-gnu-install_only.tar.gz"
