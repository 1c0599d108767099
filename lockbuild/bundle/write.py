"""The deterministic bundle writer: a POSIX tar with fixed metadata, streamed through zstd.

Members in the manifest's order with mtime = the serial, uid/gid 0 and mode 0644; the stream framed in
fixed-size zstd frames compressed in parallel (the bytes do not depend on the thread count); sources
streamed a few pieces ahead and, where already hashed as downloaded and unchanged since, not hashed again."""

from __future__ import annotations

import hashlib
import os
import stat
import tarfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import zstandard

from lockbuild.bundle.manifest import MANIFEST, Manifest, Member
from lockbuild.bundle.manifestparse import parse_manifest
from lockbuild.bundle.modelformat import is_weight
from lockbuild.digest import CHUNK, FileIdentity, HashedFile, pump, same_file
from lockbuild.errors import IntegrityError, LockbuildError
from lockbuild.frames.framepool import FramedWriter
from lockbuild.fsio import open_regular
from lockbuild.proc.channel import Channel, End, start
from lockbuild.progress import Progress

# Level -3 (a fast level: fewer match searches, literals stored): a bundle is mostly wheels, already
# deflated. On vLLM's 4.93 GB of members level 1 saves 10.2 MB, -3 saves 6.4 MB (+0.08 % of bundle) for
# ~30 % less of zstd's CPU (the whole write: 28.0 -> 26.3 s of CPU, 15.4 -> 14.4 s); level 3 gained ~1 %
# more than 1 on torch's wheel at 2.5x the CPU. Jobs of 2 MiB keep zstd's buffers small (~18 MB with two
# workers instead of ~48 MB); the bytes depend on both, never on workers.
ZSTD_LEVEL = -3
JOB_SIZE = 2 << 20
# Sources are read on a thread of their own, hashed there, and handed to the compressor in pieces of
# READ_SIZE (digest.pump's reads), at most READ_AHEAD pieces ahead: reading and hashing overlap the
# compression. (2 MiB pieces and deeper queues cost ~20 MB more of peak RSS on the vLLM bundle, for no
# speed-up this machine showed.)
READ_SIZE = CHUNK
READ_AHEAD = 4


class DamagedSource(IntegrityError):
    """A source file's bytes are not the ones its member names (a cache entry changed on disk)."""

    def __init__(self, message: str, *, sha256: str, tip: str | None = None) -> None:
        super().__init__(message, tip=tip)
        self.sha256 = sha256


@dataclass(frozen=True)
class Entry:
    """One member and its bytes: in memory, a file, or a file still arriving (called when the writer
    reaches it, in manifest order: a build packs while its downloads complete)."""

    member: Member
    source: Path | bytes | HashedFile | Callable[[], Path | HashedFile]


BLOCK = 512
RECORD = 20 * BLOCK  # tar's default blocking factor: the archive is padded to a whole record


def tar_header(path: str, size: int, mtime: int) -> bytes:
    """The header block(s) of one regular file: a pax header first when the name needs one."""
    ti = tarfile.TarInfo(path)
    ti.size = size
    ti.mtime = mtime
    ti.mode = 0o644
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = ""
    ti.type = tarfile.REGTYPE
    return ti.tobuf(tarfile.PAX_FORMAT, "utf-8", "strict")


def compressor(threads: int | None = None) -> zstandard.ZstdCompressor:
    workers = max(1, threads if threads is not None else (os.cpu_count() or 1))
    params = zstandard.ZstdCompressionParameters.from_level(
        ZSTD_LEVEL, threads=workers, job_size=JOB_SIZE, write_checksum=True, write_content_size=False
    )
    return zstandard.ZstdCompressor(compression_params=params)


# A stored frame (model weights, which do not compress): a zstd frame of raw blocks, no checksum (the
# member's sha256 covers its bytes), a 128 KiB window: magic, a frame header descriptor of 0, the window.
STORED_BLOCK = 128 << 10
STORED_HEADER = b"\x28\xb5\x2f\xfd\x00" + bytes([(17 - 10) << 3])


def is_stored(m: Member) -> bool:
    """Whether a member is written in a stored frame: a model's weights (docs/bundle-format.md)."""
    return m.kind == "model-file" and is_weight(m.path)


class _Frames:
    """The bundle's zstd frames, in order: compressed frames (each opened when something is written
    after a stored frame, or at the start) and stored frames of raw blocks."""

    def __init__(self, out: BinaryIO, threads: int | None) -> None:
        self.out = out
        self.threads = threads
        self.z: zstandard.ZstdCompressionWriter | None = None
        self.pending: bytearray | None = None  # a stored frame's bytes not yet in a block

    def write(self, data: bytes | memoryview) -> None:
        if self.pending is None:
            if self.z is None:
                self.z = compressor(self.threads).stream_writer(self.out, closefd=False, write_size=CHUNK)
            self.z.write(data)
            return
        self.pending += data
        done = 0
        while len(self.pending) - done > STORED_BLOCK:  # the last block waits: it carries the frame's end
            self._block(memoryview(self.pending)[done : done + STORED_BLOCK], last=False)
            done += STORED_BLOCK
        del self.pending[:done]

    def _block(self, data: memoryview | bytearray, *, last: bool) -> None:
        self.out.write(((len(data) << 3) | int(last)).to_bytes(3, "little"))  # block type 0: raw
        self.out.write(data)

    def begin_stored(self) -> None:
        self._end_compressed()
        self.out.write(STORED_HEADER)
        self.pending = bytearray()

    def end_stored(self) -> None:
        if self.pending is not None:
            self._block(self.pending, last=True)
            self.pending = None

    def _end_compressed(self) -> None:
        if self.z is not None:
            self.z.close()  # type: ignore[no-untyped-call]  # ends the frame (with its checksum); closefd=False
            self.z = None

    def close(self) -> None:
        self.end_stored()
        self._end_compressed()
        return


class _TarWriter:
    """Writes tar blocks to the frames and keeps count, so the end can be padded to a record."""

    def __init__(self, out: _Frames | FramedWriter, progress: Progress) -> None:
        self.out = out
        self.offset = 0
        self.progress = progress

    def _write(self, data: bytes | memoryview) -> None:
        self.out.write(data)
        self.offset += len(data)

    def add_bytes(self, path: str, data: bytes, mtime: int) -> None:
        self._write(tar_header(path, len(data), mtime))
        self._write(data)
        self._pad(len(data))

    def add_file(self, m: Member, source: Channel[bytes | _Verified], mtime: int) -> None:
        """The member's bytes as the reader thread hands them on; they end with its word that the file was
        read whole and has the member's sha256 (or the reader's error is raised here). A model's weights
        go in a stored frame of their own, header and padding with them."""
        stored = is_stored(m)
        if stored:
            self.out.begin_stored()
        self._write(tar_header(m.path, m.size, mtime))
        while not isinstance(piece := source.get(), _Verified):
            if isinstance(piece, End):
                raise IntegrityError(f"internal: the reader ended before {m.path}.")
            self._write(piece)
            self.progress.advance(len(piece))
        self._pad(m.size)
        if stored:
            self.out.end_stored()

    def _pad(self, size: int) -> None:
        if size % BLOCK:
            self._write(bytes(BLOCK - size % BLOCK))

    def close(self) -> None:
        """Two zero blocks end the archive; zeros then fill the last record."""
        self._write(bytes(2 * BLOCK))
        if self.offset % RECORD:
            self._write(bytes(RECORD - self.offset % RECORD))


def write_bundle(
    out: BinaryIO,
    manifest: Manifest,
    entries: Sequence[Entry],
    *,
    threads: int | None = None,
    progress: Progress | None = None,
    framed: bool = True,
) -> str | None:
    """Stream the bundle to ``out``; every entry must match its manifest member byte for byte. ``framed``
    (every bundle this lockbuild makes): independent frames of a fixed size, compressed on ``threads``
    threads, and the frame tables at the end (lockbuild/frames/); returns the tables' sha256, which the
    statement signs. ``framed=False``: the single-stream layout of the bundles made before (None)."""
    progress = progress or Progress.quiet()
    if [e.member for e in entries] != list(manifest.members):
        raise IntegrityError("internal: the entries do not follow the manifest's order.")
    head = manifest.to_toml()
    parse_manifest(head)  # the reader's rules (paths, collisions, names): what it would refuse is never written
    mtime = manifest.serial
    progress.start("packing", total_bytes=manifest.unpacked_size, files=len(entries) + 1)
    sources: Channel[bytes | _Verified] = Channel(READ_AHEAD)
    reader = start("lockbuild-read", lambda out: _read_sources(entries, out), sources)
    frames: _Frames | FramedWriter = FramedWriter(out, threads) if framed else _Frames(out, threads)
    try:
        tar = _TarWriter(frames, progress)
        tar.add_bytes(MANIFEST, head, mtime)
        for e in entries:
            m = e.member
            if isinstance(e.source, bytes):
                if len(e.source) != m.size or hashlib.sha256(e.source).hexdigest() != m.sha256:
                    raise IntegrityError(f"internal: {m.path} does not match its manifest entry.")
                tar.add_bytes(m.path, e.source, mtime)
            else:
                tar.add_file(m, sources, mtime)
            progress.file_done()
        tar.close()
        tables = frames.close()  # ends the last frame (and writes the tables); ``out`` stays open
    except BaseException:
        if isinstance(frames, FramedWriter):
            frames.discard()  # the frames being compressed are dropped, the pool's threads end
        raise
    finally:
        sources.stop()  # after a failure, the reader ends at its next hand-off (it is not waited for)
    reader.join()
    progress.finish()
    return tables


class _Verified:
    """The reader's word, after a file's last piece, that it was read whole and has the member's sha256."""


VERIFIED = _Verified()


def _read_sources(entries: Sequence[Entry], out: Channel[bytes | _Verified]) -> None:
    """On the reader thread: every file entry's bytes in order, each file followed by VERIFIED."""
    for e in entries:
        if not isinstance(e.source, bytes):
            _read_file(e.member, e.source if isinstance(e.source, (Path, HashedFile)) else e.source(), out)


def _read_file(m: Member, given: Path | HashedFile, out: Channel[bytes | _Verified]) -> None:
    """Hand ``source`` on in pieces and hash it: this digest is what proves the packed bytes are the ones
    the manifest names (the cache checks only sizes for a build), so a mismatch is refused. Each piece is
    immutable ``bytes``: the compressor packs exactly the bytes that were hashed.

    A ``HashedFile`` of the member's sha256 (a download of this build, hashed as it arrived) is not hashed
    again when the descriptor opened here is that file unchanged: the same device and inode (the file
    the fetcher wrote and hashed, not one put in its place), the same size, modification and status-change
    times, checked before the first byte is read and again after the last, so a write to it at any time
    after the hash (which moves the status-change time, which no unprivileged process can set back) is
    refused as a damaged source. Any other file, or one whose identity differs, is hashed as it is read."""
    source = given.path if isinstance(given, HashedFile) else given
    try:
        f, _ = open_regular(source, what="file to pack", max_size=1 << 62)
    except (OSError, LockbuildError) as exc:
        why = exc.message if isinstance(exc, LockbuildError) else f"cannot read {source}: {exc.strerror or exc}."
        raise DamagedSource(why, sha256=m.sha256) from None
    with f:
        fd = f.fileno()
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size != m.size:
            raise DamagedSource(
                f"{source} changed size since it was verified: expected {m.size} bytes.",
                sha256=m.sha256,
                tip="Something is writing to the cache; run the build again.",
            )
        proven: FileIdentity | None = None
        if isinstance(given, HashedFile) and given.sha256 == m.sha256 and same_file(fd, given.identity):
            proven = given.identity
        h = None if proven is not None else hashlib.sha256()

        def read(n: int) -> bytes:
            try:
                return f.read(n)
            except OSError as exc:
                raise DamagedSource(f"cannot read {source}: {exc.strerror or exc}.", sha256=m.sha256) from None

        # h hashes each piece while the compressor takes the same piece on the main thread
        sinks = (out.put,) if h is None else (out.put, h.update)
        if pump(read, *sinks, limit=m.size, peek=False) < m.size:
            raise DamagedSource(
                f"{source} shrank while it was packed: expected {m.size} bytes.",
                sha256=m.sha256,
                tip="Something is writing to the cache; run the build again.",
            )
        if proven is not None and not same_file(fd, proven):
            raise DamagedSource(
                f"{source} changed while it was packed (its size or times moved since it was downloaded).",
                sha256=m.sha256,
                tip="Something is writing to the cache; run the build again.",
            )
    if h is not None and h.hexdigest() != m.sha256:
        raise DamagedSource(
            f"{source} changed since it was verified: its sha256 is not {m.sha256}.",
            sha256=m.sha256,
            tip="The cached file was modified; clear it from the cache and run the build again.",
        )
    out.put(VERIFIED)
