"""The deterministic bundle writer: a POSIX tar with fixed metadata, streamed through zstd.

Members come in the manifest's order, each with mtime = the serial (the as-of time), uid/gid 0,
empty owner names and mode 0644. zstd runs in its multi-threaded mode with at least one worker,
whose output does not depend on the worker count, at a fixed level and with a content checksum.
"""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import zstandard

from lockbuild.bundle.manifest import MANIFEST, Manifest, Member
from lockbuild.digest import CHUNK
from lockbuild.errors import IntegrityError
from lockbuild.progress import Progress

ZSTD_LEVEL = 3


@dataclass(frozen=True)
class Entry:
    member: Member
    source: Path | bytes


def _tarinfo(path: str, size: int, mtime: int) -> tarfile.TarInfo:
    ti = tarfile.TarInfo(path)
    ti.size = size
    ti.mtime = mtime
    ti.mode = 0o644
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = ""
    ti.type = tarfile.REGTYPE
    return ti


class _Checked(io.RawIOBase):
    """Reads a source file while hashing it, so a file changed since it was verified is caught."""

    def __init__(self, f: BinaryIO, progress: Progress) -> None:
        self.f = f
        self.h = hashlib.sha256()
        self.progress = progress

    def readable(self) -> bool:
        return True

    def readinto(self, b: bytearray | memoryview) -> int:  # type: ignore[override]
        n = self.f.readinto(b)  # type: ignore[attr-defined]
        if n:
            self.h.update(memoryview(b)[:n])
            self.progress.advance(n)
        return int(n or 0)

    def read(self, size: int = -1) -> bytes:
        data = self.f.read(size)
        self.h.update(data)
        self.progress.advance(len(data))
        return data


def compressor(threads: int | None = None) -> zstandard.ZstdCompressor:
    workers = max(1, threads if threads is not None else (os.cpu_count() or 1))
    return zstandard.ZstdCompressor(level=ZSTD_LEVEL, threads=workers, write_checksum=True, write_content_size=False)


def write_bundle(
    out: BinaryIO,
    manifest: Manifest,
    entries: Sequence[Entry],
    *,
    threads: int | None = None,
    progress: Progress | None = None,
) -> None:
    """Stream the bundle to ``out``; every entry must match its manifest member byte for byte."""
    progress = progress or Progress.quiet()
    if [e.member for e in entries] != list(manifest.members):
        raise IntegrityError("internal: the entries do not follow the manifest's order.")
    mtime = manifest.serial
    progress.start("packing", total_bytes=manifest.unpacked_size, files=len(entries) + 1)
    writer = compressor(threads).stream_writer(out, closefd=False, write_size=CHUNK)
    with tarfile.open(fileobj=writer, mode="w|", format=tarfile.PAX_FORMAT, bufsize=CHUNK) as tf:
        head = manifest.to_toml()
        tf.addfile(_tarinfo(MANIFEST, len(head), mtime), io.BytesIO(head))
        for e in entries:
            m = e.member
            if isinstance(e.source, bytes):
                data = e.source
                if len(data) != m.size or hashlib.sha256(data).hexdigest() != m.sha256:
                    raise IntegrityError(f"internal: {m.path} does not match its manifest entry.")
                tf.addfile(_tarinfo(m.path, m.size, mtime), io.BytesIO(data))
            else:
                with e.source.open("rb") as f:
                    if os.fstat(f.fileno()).st_size != m.size:
                        raise IntegrityError(
                            f"{e.source} changed size since it was verified: expected {m.size} bytes.",
                            tip="Something is writing to the cache; run the build again.",
                        )
                    checked = _Checked(f, progress)
                    tf.addfile(_tarinfo(m.path, m.size, mtime), checked)  # type: ignore[arg-type]
                    if checked.h.hexdigest() != m.sha256:
                        raise IntegrityError(
                            f"{e.source} changed since it was verified: its sha256 is not {m.sha256}.",
                            tip="The cached file was modified; clear it from the cache and run the build again.",
                        )
            progress.file_done()
    writer.close()  # ends the one frame (with its checksum); closefd=False leaves ``out`` open
    progress.finish()
