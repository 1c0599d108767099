"""A content-addressed file cache: entries named by sha256, written under a temporary name, renamed once verified.

Layout: ROOT/sha256/AB/ABCD… (the entries), ROOT/tmp/*.part (transfers in progress, never read as
entries), ROOT/uv (uv's own cache). Only ``commit`` puts a file under sha256/, after the fetcher has
checked it, and ``lookup`` re-hashes an entry before handing it out.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import stat
import time
from pathlib import Path

from lockbuild.digest import file_sha256
from lockbuild.errors import FetchError, IntegrityError

STALE_TEMP_SECONDS = 24 * 3600  # a .part file untouched this long belongs to a fetch that died
_SHA256 = re.compile(r"[0-9a-f]{64}")


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
        if not _SHA256.fullmatch(sha256):
            raise IntegrityError(f"expected a sha256 of 64 lowercase hex digits, found {sha256[:80]!r}.")
        return self.files / sha256[:2] / sha256

    def lookup(self, sha256: str, size: int | None) -> Path | None:
        """The cached file for ``sha256`` if present and intact; a corrupt entry is removed."""
        p = self.path(sha256)
        try:
            st = p.stat()
            if not stat.S_ISREG(st.st_mode):
                return None
            if (size is not None and st.st_size != size) or file_sha256(p) != sha256:
                p.unlink(missing_ok=True)
                return None
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise FetchError(
                f"cannot read the cache entry {p}: {exc.strerror or exc}.",
                tip="Check the permissions under LOCKBUILD_CACHE_DIR, or point it at another directory.",
            ) from None
        return p

    def new_temp(self, sha256: str) -> Path:
        self.tmp.mkdir(parents=True, exist_ok=True)
        return self.tmp / f"{sha256}.{os.getpid()}.{secrets.token_hex(4)}.part"

    def commit(self, temp: Path, sha256: str) -> Path:
        dest = self.path(sha256)
        dest.parent.mkdir(parents=True, exist_ok=True)
        temp.replace(dest)
        return dest

    def sweep(self, *, older_than: float = STALE_TEMP_SECONDS) -> int:
        """Remove temp files left by fetches that died (untouched for ``older_than`` seconds); returns how many."""
        cutoff = time.time() - older_than
        removed = 0
        try:
            temps = list(self.tmp.glob("*.part"))
        except OSError:
            return 0
        for p in temps:
            with contextlib.suppress(OSError):
                if p.stat().st_mtime < cutoff:
                    p.unlink()
                    removed += 1
        return removed

    def uv_cache(self) -> Path:
        return self.root / "uv"
