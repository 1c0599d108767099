"""uv's resolutions, remembered: the same inputs give the same answer, so a warm lock need not run uv again.

The key is the sha256 of uv's inputs (argv, stdin or project, uv's version, the index without credentials);
the value is uv's lock text only. A remembered answer is a hint: the planner still looks up every pin live
and checks the closure, else uv resolves afresh. An entry that is not exactly what ``put`` writes is a miss."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import secrets
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from lockbuild import fsio
from lockbuild.digest import is_sha256
from lockbuild.errors import LockbuildError

FORMAT = 1  # of the key and of an entry: a new lockbuild that changes either changes this
MAX_ENTRY_BYTES = 16 << 20  # a lock text (vLLM's requirements.txt is about 0.3 MB)
MAX_ENTRIES = 256  # the oldest are removed beyond this
LockFormat = Literal["requirements.txt", "pylock.toml"]
_FORMATS: tuple[LockFormat, ...] = ("requirements.txt", "pylock.toml")


@dataclass(frozen=True)
class Remembered:
    format: LockFormat
    text: str


def resolution_key(
    *,
    uv_version: str,
    argv: Sequence[str],
    stdin: str | None,
    project: str | None,
    index_url: str,
    authenticated: bool,
) -> str:
    """The sha256 (hex) of a resolution's inputs. ``argv`` is uv's arguments without the binary, with the
    output and project paths replaced by fixed names; ``index_url`` carries no credentials, and
    ``authenticated`` says only whether some were given (an index may show more to a known user)."""
    doc = {
        "authenticated": authenticated,
        "format": FORMAT,
        "uv": uv_version,
        "argv": list(argv),
        "stdin": stdin,
        "project": project,
        "index": index_url,
    }
    canonical = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


def parse_entry(raw: bytes, key: str) -> Remembered | None:
    """An entry's content, or None unless it is exactly what ``put`` writes for ``key``."""
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(doc, dict) or set(doc) != {"format", "key", "lock-format", "text"}:
        return None
    fmt, text = doc["lock-format"], doc["text"]
    if doc["format"] != FORMAT or doc["key"] != key or not isinstance(text, str):
        return None
    for known in _FORMATS:
        if fmt == known:
            return Remembered(known, text)
    return None


class ResolutionMemo:
    """The remembered resolutions under one cache directory (``Cache.resolutions()``)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _path(self, key: str) -> Path:
        if not is_sha256(key):
            raise ValueError(f"not a resolution key: {key[:80]!r}")
        return self.root / key

    def get(self, key: str) -> Remembered | None:
        """The entry for ``key``, or None: absent, unreadable, not this user's own private regular file,
        too large, or damaged (then removed)."""
        path = self._path(key)
        try:
            f, size = fsio.open_regular(path, what="remembered resolution", max_size=MAX_ENTRY_BYTES)
        except (OSError, LockbuildError):  # absent, a link, not a regular file, too large: a miss
            return None
        try:
            with f:
                st = os.fstat(f.fileno())
                if st.st_uid != os.geteuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                    return None
                raw = fsio.bounded_read(f, size, what="a remembered resolution", grew=True)
        except (OSError, LockbuildError):
            return None
        got = parse_entry(raw, key)
        if got is None:
            self.discard(key)
        else:
            with contextlib.suppress(OSError):
                os.utime(path, follow_symlinks=False)  # the least recently used go first (_trim)
        return got

    def put(self, key: str, lock_format: LockFormat, text: str, *, secrets_held: Sequence[str] = ()) -> bool:
        """Remember ``text`` for ``key`` (atomically); False when it is not kept (too large, holds a
        secret, or the directory cannot be written: remembering is an optimisation, never an error)."""
        if any(s and s in text for s in secrets_held):
            return False
        doc: Mapping[str, object] = {"format": FORMAT, "key": key, "lock-format": lock_format, "text": text}
        body = json.dumps(doc, sort_keys=True, ensure_ascii=True).encode("ascii")
        if len(body) > MAX_ENTRY_BYTES:
            return False
        dest = self._path(key)
        tmp = self.root / f".{key}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        try:
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            with fsio.create_new(tmp, mode=0o600) as f:
                f.write(body)
            tmp.replace(dest)
        except OSError:
            with contextlib.suppress(OSError):
                tmp.unlink()
            return False
        self._trim()
        return True

    def discard(self, key: str) -> None:
        with contextlib.suppress(OSError):
            self._path(key).unlink()

    def _trim(self) -> None:
        """Keep the newest MAX_ENTRIES entries (by modification time); temporary files of writers that
        died are removed with the oldest."""
        try:
            entries = []
            with os.scandir(self.root) as it:
                for e in it:
                    with contextlib.suppress(OSError):
                        entries.append((e.stat(follow_symlinks=False).st_mtime, e.name))
        except OSError:
            return
        if len(entries) <= MAX_ENTRIES:
            return
        entries.sort(reverse=True)
        for _, name in entries[MAX_ENTRIES:]:
            try:
                (self.root / name).unlink()
            except OSError as exc:
                if exc.errno not in (errno.ENOENT, errno.EISDIR, errno.EPERM):
                    return
