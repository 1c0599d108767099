"""The GPU code of each cached file, read once as the file enters the cache and kept beside it.

The reading is kept as ROOT/gpu/AB/SHA256, under a first line naming the file's sha256 and the reading's
own, like a kept METADATA. ``lock`` and ``build`` take readings from here (:func:`kept_reading`), so no file
is read twice and ``lock`` downloads nothing."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from lockbuild import fsio
from lockbuild.digest import is_sha256
from lockbuild.documents import loads_json
from lockbuild.errors import LockbuildError
from lockbuild.gpu.sharedobjects import Reading, read_archive

if TYPE_CHECKING:
    from lockbuild.fetch.cache import Cache

MAGIC = b"lockbuild-gpu-reading 1"  # the first line: MAGIC FILE-SHA256 READING-SHA256
MAX_READING = 16 << 20
MAX_ARCHIVE = 1 << 62


def reading_path(cache: Cache, sha256: str) -> Path:
    return cache.root / "gpu" / sha256[:2] / sha256


def keep_reading(cache: Cache, path: Path, sha256: str, name: str) -> Reading | None:
    """Read the file at ``path`` (whose sha256 is ``sha256``, named ``name``) and keep its reading; None
    for a file that is no wheel or release archive. A damaged ELF or fatbin raises ``BinaryError``."""
    if not is_sha256(sha256):
        return None
    kept = kept_reading(cache, sha256)
    if kept is not None:
        return kept
    f, _ = fsio.open_regular(path, what="a fetched file", max_size=MAX_ARCHIVE)
    with f:
        reading = read_archive(f, name)
    if reading is None:
        return None
    data = json.dumps(reading.to_json(), sort_keys=True, separators=(",", ":")).encode()
    head = b" ".join((MAGIC, sha256.encode(), hashlib.sha256(data).hexdigest().encode())) + b"\n"
    dest = reading_path(cache, sha256)
    temp = cache.new_temp(sha256)
    try:
        with fsio.create_new(temp, mode=0o600) as out:
            out.write(head + data)
        dest.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        temp.replace(dest)
    except OSError:
        temp.unlink(missing_ok=True)  # keeping is an optimisation: the next fetch reads it again
    return reading


def kept_reading(cache: Cache, sha256: str) -> Reading | None:
    """The kept reading of the cached file ``sha256``, or None: absent, not this user's private regular
    file, too large, or not what :func:`keep_reading` wrote for this file (then removed)."""
    if not is_sha256(sha256):
        return None
    p = reading_path(cache, sha256)
    try:
        f, size = fsio.open_regular(p, what="kept GPU reading", max_size=len(MAGIC) + 132 + MAX_READING)
    except (OSError, LockbuildError):
        return None
    try:
        with f:
            if fsio.owner_problem(os.fstat(f.fileno()), allow_root=False) is not None:
                return None
            raw = fsio.bounded_read(f, size, what="kept GPU reading", grew=True)
    except (OSError, LockbuildError):
        return None
    head, newline, data = raw.partition(b"\n")
    if not newline or head != b" ".join((MAGIC, sha256.encode(), hashlib.sha256(data).hexdigest().encode())):
        p.unlink(missing_ok=True)
        return None
    try:
        reading = Reading.from_json(
            loads_json(data, what="kept GPU reading", max_bytes=MAX_READING, error=LockbuildError)
        )
    except LockbuildError:
        reading = None
    if reading is None:
        p.unlink(missing_ok=True)
    return reading
