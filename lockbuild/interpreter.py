"""A standalone interpreter carried in a bundle (a python-build-standalone ``install_only`` archive):
the pure rules the builder and the installer share. No I/O here.

Its major.minor must be the build's ``python``: the builder reads it from the file name and the archive's
entries (``python/bin/python3.X``), and the installer runs the extracted executable to check it again."""

from __future__ import annotations

import re
from collections.abc import Iterable

DEFAULT_REPO = "astral-sh/python-build-standalone"
SUFFIXES = (".tar.gz", ".tgz", ".tar.xz", ".txz", ".tar.bz2")  # what lockbuild.install.archives unpacks
_FILE = re.compile(r"cpython-(\d+)\.(\d+)\.")
_EXE = re.compile(r"(?:\./)?python/bin/python(\d+)\.(\d+)")


def executable(version: str) -> str:
    """The interpreter's path inside the unpacked archive, e.g. ``python/bin/python3.12``."""
    return f"python/bin/python{version}"


def version_from_filename(name: str) -> str | None:
    """``3.12`` for ``cpython-3.12.12+20251014-...``; None when the name does not say."""
    m = _FILE.match(name)
    return f"{m[1]}.{m[2]}" if m else None


def versions_in(names: Iterable[str]) -> set[str]:
    """The X.Y of every ``python/bin/pythonX.Y`` entry among an archive's entry names."""
    return {f"{m[1]}.{m[2]}" for m in map(_EXE.fullmatch, names) if m}
