"""lockbuild.json: the marker in every installed environment, and listing what is installed.

A marker is trusted only in the directory it was written into: it records that directory's device and
inode, which the installer's swap keeps and a copy does not, so a look-alike filled with a copied marker
is not "installed"."""

from __future__ import annotations

import os
import stat
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from lockbuild.documents import loads_json
from lockbuild.errors import LockbuildError
from lockbuild.fsio import read_regular
from lockbuild.limits import MiB

MARKER = "lockbuild.json"
RECORD_DIR = "lockbuild"


@dataclass(frozen=True)
class Installed:
    engine: str
    version: str
    variant: str
    binary: str
    requirements: tuple[str, ...]
    exclude_newer: str
    uv: str
    installed: str
    bundle: str
    bundle_sha256: str
    serial: int
    signers: tuple[str, ...]
    python: str
    platform: str
    lockbuild: str
    dev: int = 0  # the environment directory's st_dev and st_ino when the marker was written
    ino: int = 0
    env: tuple[tuple[str, str], ...] = ()  # the engine's runtime settings ([engine.env])
    modulefiles: str = ""  # --modulefiles DIR the install wrote its module file into ("": none)
    modulefiles_format: str = ""  # its format, lua or tcl

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["requirements"] = list(self.requirements)
        d["signers"] = list(self.signers)
        d["env"] = dict(self.env)
        return d


def read_marker(env_dir: Path) -> Installed | None:
    """The marker of an installed environment; None where there is none, it is unreadable, or it was not
    written into this very directory (a symlink, or a directory that is not the one the installer made)."""
    try:
        st = os.lstat(env_dir)
        # a FIFO, link or device planted as the marker must not hang or mislead `list` or `doctor`
        raw = read_regular(env_dir / MARKER, what="marker", max_size=MiB)
        data = loads_json(raw, what=f"the marker {env_dir / MARKER}", max_bytes=MiB, error=LockbuildError)
        data["requirements"] = tuple(data["requirements"])
        data["signers"] = tuple(data["signers"])
        data["env"] = tuple(sorted((str(k), str(v)) for k, v in dict(data.get("env", {})).items()))
        marker = Installed(**data)
    except (OSError, ValueError, KeyError, TypeError, LockbuildError):
        return None
    if not stat.S_ISDIR(st.st_mode) or (marker.dev, marker.ino) != (st.st_dev, st.st_ino):
        return None
    return marker


def list_installed(root: Path) -> list[tuple[Path, Installed]]:
    """Every environment under ``root`` with its marker; a directory that cannot be read is an error
    naming it (never a traceback), since a listing that silently skips it would mislead."""
    out: list[tuple[Path, Installed]] = []
    if not root.is_dir():
        return out
    for engine_dir in sorted(p for p in _entries(root) if _plain_dir(p) and not p.name.startswith(".")):
        for env in sorted(p for p in _entries(engine_dir) if _plain_dir(p) and not p.name.endswith(".partial")):
            marker = read_marker(env)
            if marker is not None:
                out.append((env, marker))
    return out


def _entries(directory: Path) -> list[Path]:
    try:
        return list(directory.iterdir())
    except OSError as exc:
        raise LockbuildError(
            f"cannot list {directory}: {exc.strerror or exc}.",
            tip=f"Make {directory} readable by this user (or run as the user who installed).",
        ) from None


def _plain_dir(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink()
