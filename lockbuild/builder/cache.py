"""A content-addressed file cache: entries named by sha256, written under a temporary name, renamed once verified."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from lockbuild.digest import file_sha256


def default_cache_dir() -> Path:
    explicit = os.environ.get("LOCKBUILD_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "lockbuild"


class Cache:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.files = root / "sha256"
        self.tmp = root / "tmp"

    def path(self, sha256: str) -> Path:
        return self.files / sha256[:2] / sha256

    def lookup(self, sha256: str, size: int | None) -> Path | None:
        """The cached file for ``sha256`` if present and intact; a corrupt entry is removed."""
        p = self.path(sha256)
        try:
            st = p.stat()
        except FileNotFoundError:
            return None
        if (size is not None and st.st_size != size) or file_sha256(p) != sha256:
            p.unlink(missing_ok=True)
            return None
        return p

    def new_temp(self, sha256: str) -> Path:
        self.tmp.mkdir(parents=True, exist_ok=True)
        return self.tmp / f"{sha256}.{os.getpid()}.{secrets.token_hex(4)}.part"

    def commit(self, temp: Path, sha256: str) -> Path:
        dest = self.path(sha256)
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(temp, dest)
        return dest

    def uv_cache(self) -> Path:
        return self.root / "uv"
