"""The bundle format as written: member order, fixed tar metadata, zstd parameters, determinism
across thread counts, streaming, refusal of a source that changed, and readability by stock tools.
docs/bundle-format.md is the prose version of these tests."""

from __future__ import annotations

import errno
import hashlib
import io
import os
import shutil
import subprocess
import tarfile
import threading
import time
import tracemalloc
from pathlib import Path

import pytest
import zstandard
from hostile import AS_OF, RECIPE, SERIAL, UV_MEMBER, manifest, member, sha

from lockbuild.bundle.manifest import MANIFEST, Manifest, member_order
from lockbuild.bundle.manifestparse import parse_manifest
from lockbuild.bundle.read import check_zstd_frame, read_head
from lockbuild.bundle.write import JOB_SIZE, READ_AHEAD, READ_SIZE, ZSTD_LEVEL, DamagedSource, Entry, write_bundle
from lockbuild.errors import IntegrityError
from lockbuild.frames.framepool import in_flight
from lockbuild.frames.seektable import FRAME_SIZE, read_file_tables
from lockbuild.limits import DEFAULT_LIMITS
from lockbuild.trust.sign import read_unverified

LONG = "wheels/" + "ñ" * 70 + "-1.0-py3-none-any.whl"  # non-ASCII and over 100 bytes: needs a pax header


UV = Entry(member(UV_MEMBER, b"PK uv", "tool"), b"PK uv")  # every format-2 manifest names its uv wheel


def no_thread_left() -> bool:
    deadline = time.monotonic() + 10
    while any(t.name == "lockbuild-read" or t.name.startswith("lockbuild-zstd") for t in threading.enumerate()):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def sample(tmp_path: Path) -> tuple[Manifest, list[Entry]]:
    """A small bundle's manifest and entries: bytes and files, a long non-ASCII name, an empty file."""
    files = {
        "wheels/a-1.0-py3-none-any.whl": b"A" * 5000,
        LONG: b"long name",
        "assets/empty.bin": b"",
        "source/engine-1.2.tar.gz": bytes(range(256)) * 300,
    }
    entries = [Entry(member("recipe.toml", RECIPE, "recipe"), RECIPE)]
    for i, (path, data) in enumerate(sorted(files.items(), key=lambda kv: member_order(kv[0]))):
        src = tmp_path / f"src{i}"
        src.write_bytes(data)
        entries.append(Entry(member(path, data, "wheel" if path.startswith("wheels/") else "asset"), src))
    entries.append(UV)
    return manifest([e.member for e in entries]), entries


def pack(m: Manifest, entries: list[Entry], threads: int | None = 1, *, framed: bool = True) -> bytes:
    out = io.BytesIO()
    write_bundle(out, m, entries, threads=threads, framed=framed)
    return out.getvalue()


def untar(bundle: bytes) -> bytes:
    return zstandard.ZstdDecompressor().stream_reader(io.BytesIO(bundle)).read()


def test_members_in_manifest_order_with_fixed_metadata(tmp_path: Path) -> None:
    m, entries = sample(tmp_path)
    raw = untar(pack(m, entries))
    with tarfile.open(fileobj=io.BytesIO(raw), mode="r:") as tf:  # an independent reader
        infos = tf.getmembers()
        assert [ti.name for ti in infos] == [MANIFEST, *(e.member.path for e in entries)]
        for ti in infos:
            assert (ti.type, ti.mode, ti.mtime, ti.uid, ti.gid, ti.uname, ti.gname) == (
                tarfile.REGTYPE,
                0o644,
                SERIAL,
                0,
                0,
                "",
                "",
            ), ti.name
            assert set(ti.pax_headers) <= {"path"}, "no atime, ctime, mtime or other volatile pax records"
            assert bool(ti.pax_headers) == (ti.name == LONG)
        assert tf.extractfile(MANIFEST).read() == m.to_toml()  # type: ignore[union-attr]
    # POSIX ustar headers throughout; the archive ends in two zero blocks and fills its last record
    headers = [0]
    for ti in infos:
        headers.append(ti.offset)
        assert raw[ti.offset + 257 : ti.offset + 265] == b"ustar\x0000"
    assert len(raw) % 10240 == 0
    assert raw[-1024:] == bytes(1024)


def test_framed_layout(tmp_path: Path) -> None:
    """Independent frames of FRAME_SIZE (the last one shorter), each with its content size and a checksum
    and no dictionary, then the frame hash table and zstd's seek table, which end the file."""
    data = mixed(5)
    m = manifest([member("assets/big.bin", data), UV.member])
    bundle = tmp_path / m.bundle_name
    bundle.write_bytes(pack(m, [Entry(m.members[0], data), UV], threads=2))
    with bundle.open("rb") as f:
        table = read_file_tables(f, DEFAULT_LIMITS)
    raw = bundle.read_bytes()
    assert [fr.content for fr in table.frames] == [FRAME_SIZE, FRAME_SIZE, len(untar(raw)) - 2 * FRAME_SIZE]
    for fr in table.frames:
        piece = raw[fr.offset : fr.offset + fr.size]
        params = zstandard.get_frame_parameters(piece)
        assert (params.has_checksum, params.content_size, params.dict_id) == (True, fr.content, 0)
        assert hashlib.sha256(piece).digest() == fr.sha256
    tail = raw[table.tables_at :]
    assert tail[:4] == (0x184D2A5D).to_bytes(4, "little") and tail[-4:] == (0x8F92EAB1).to_bytes(4, "little")
    seek = tail[16 + 32 * 3 :]
    assert seek[:4] == (0x184D2A5E).to_bytes(4, "little")  # zstd's seekable format: the last frame
    assert seek[-9:-4] == (3).to_bytes(4, "little") + b"\x00"  # three frames, no checksums
    assert table.sha256 == hashlib.sha256(tail).hexdigest()


def test_zstd_frame_parameters(tmp_path: Path) -> None:
    """The layout of the bundles made before frames, which the readers still take: one frame, a content
    checksum, no content size, no dictionary, a window within the reader's cap."""
    m, entries = sample(tmp_path)
    data = pack(m, entries, threads=2, framed=False)
    params = zstandard.get_frame_parameters(data)
    assert params.has_checksum
    assert params.content_size == zstandard.CONTENTSIZE_UNKNOWN
    assert params.dict_id == 0
    assert params.window_size <= DEFAULT_LIMITS.zstd_window
    bundle = tmp_path / "b.lbz"
    bundle.write_bytes(data)
    with bundle.open("rb") as f:
        check_zstd_frame(f)
    assert (ZSTD_LEVEL, JOB_SIZE) == (-3, 2 << 20)  # as docs/bundle-format.md says


def mixed(n_mib: int) -> bytes:
    """Data that compresses unevenly (text, zeros, noise), larger than one zstd job."""
    seed = hashlib.sha256(b"seed").digest()
    noise = b"".join(hashlib.sha256(seed + i.to_bytes(4, "little")).digest() for i in range(1 << 14))  # 512 KiB
    piece = b"lockbuild " * 26214 + bytes(1 << 18) + noise[: 1 << 18] + noise[: 1 << 18]
    return (piece * n_mib)[: n_mib << 20]


def test_output_does_not_depend_on_the_thread_count() -> None:
    """A framed bundle's frames are compressed independently, so 1, 2 or 4 threads write the same bytes.
    The layout made before frames: zstd's multi-threaded mode (1 or more workers) writes the same bytes
    whatever the worker count; threads=0 is zstd's single-threaded mode, which cuts blocks differently:
    its output differs, which is why that writer always asks for at least one worker."""
    data = mixed(24)
    m = manifest([member("assets/big.bin", data), UV.member])
    entries = [Entry(m.members[0], data), UV]
    framed = {threads: hashlib.sha256(pack(m, entries, threads=threads)).hexdigest() for threads in (1, 2, 4)}
    assert len(set(framed.values())) == 1, framed
    outputs = {t: hashlib.sha256(pack(m, entries, threads=t, framed=False)).hexdigest() for t in (1, 2, 4)}
    assert len(set(outputs.values())) == 1, outputs
    assert pack(m, entries, threads=0, framed=False) == pack(m, entries, threads=1, framed=False)
    single = io.BytesIO()
    cctx = zstandard.ZstdCompressor(level=ZSTD_LEVEL, threads=0, write_checksum=True, write_content_size=False)
    with cctx.stream_writer(single, closefd=False) as w:
        w.write(untar(pack(m, entries)))
    assert hashlib.sha256(single.getvalue()).hexdigest() != outputs[1], "zstd threads=0 would not be reproducible"


def test_same_inputs_same_bytes_wherever_they_come_from(tmp_path: Path) -> None:
    """Bytes or a file, at any path, written twice: the same bundle."""
    m, entries = sample(tmp_path)
    moved = []
    for i, e in enumerate(entries):
        if isinstance(e.source, Path):
            other = tmp_path / "elsewhere" / f"copy{i}"
            other.parent.mkdir(exist_ok=True)
            shutil.copyfile(e.source, other)
            os.utime(other, (0, 0))
            moved.append(Entry(e.member, other.read_bytes() if i % 2 else other))
        else:
            moved.append(e)
    assert pack(m, entries, threads=1) == pack(m, moved, threads=2)


def test_tar_stream_is_pinned(tmp_path: Path) -> None:
    """The uncompressed tar of a fixed input, pinned: a change to headers, padding or the manifest's
    text changes every bundle's bytes and must be deliberate (and documented in docs/bundle-format.md).
    The compressed bytes are not pinned here: they also depend on the libzstd version."""
    data = b"payload\n"
    m = manifest([member("recipe.toml", RECIPE, "recipe"), member("assets/a.bin", data), UV.member])
    raw = untar(pack(m, [Entry(m.members[0], RECIPE), Entry(m.members[1], data), UV]))
    assert len(raw) == 10240
    assert sha(raw) == "b37f9483068d2b0c977614496882a333b83640e6295bd634b78ebf254d52c530", sha(raw)


def test_roundtrip(tmp_path: Path) -> None:
    m, entries = sample(tmp_path)
    bundle = tmp_path / m.bundle_name
    bundle.write_bytes(pack(m, entries))
    got = read_unverified(bundle, dest=tmp_path / "out", expect_sha256=sha(bundle.read_bytes()))
    assert got == m
    for e in entries:
        want = e.source if isinstance(e.source, bytes) else e.source.read_bytes()
        assert (tmp_path / "out" / e.member.path).read_bytes() == want
        assert (tmp_path / "out" / e.member.path).stat().st_mode & 0o7777 == 0o644
    assert read_head(bundle) == (m, RECIPE)
    assert parse_manifest(m.to_toml()) == m


def test_manifest_text_escapes_what_it_carries(tmp_path: Path) -> None:
    """Quotes, backslashes, non-ASCII and characters beyond the BMP (which JSON-style escaping would write
    as surrogate pairs, invalid in TOML) all survive the manifest's text. Control characters (DEL, a tab,
    an escape sequence) are refused in every text field: they would reach an operator's terminal."""
    odd = member('assets/quote"s, spaces, ü and \U0001f600.bin', b"x")
    odd = type(odd)(odd.path, odd.size, odd.sha256, "asset", 'https://h.invalid/a "b" \\c\u00e9\U0001f680')
    m = manifest([member("recipe.toml", RECIPE, "recipe"), odd, UV.member])
    assert parse_manifest(m.to_toml()) == m
    for bad in ("\x7f", "\t", "\x1b[31m"):
        worse = type(odd)(odd.path, odd.size, odd.sha256, "asset", "https://h.invalid/" + bad)
        with pytest.raises(IntegrityError, match="holds a control character"):
            parse_manifest(manifest([worse, UV.member]).to_toml())
    bundle = tmp_path / "b.lbz"
    bundle.write_bytes(pack(m, [Entry(m.members[0], RECIPE), Entry(odd, b"x"), UV]))
    assert read_unverified(bundle, dest=tmp_path / "out") == m
    assert (tmp_path / "out" / odd.path).read_bytes() == b"x"


def test_member_order() -> None:
    paths = [
        "assets/z",
        "source/s.tar.gz",
        "sdists/b.tar.gz",
        "wheels/a.whl",
        "python/cpython.tar.zst",
        "tools/uv.whl",
        "sbom.cdx.json",
        "lock/requirements.txt",
        "lock/pylock.toml",
        "recipe.toml",
    ]
    assert sorted(paths, key=member_order) == [
        "recipe.toml",
        "lock/pylock.toml",
        "lock/requirements.txt",
        "sbom.cdx.json",
        "tools/uv.whl",
        "python/cpython.tar.zst",
        "wheels/a.whl",
        "sdists/b.tar.gz",
        "source/s.tar.gz",
        "assets/z",
    ]


# --- refusals while writing -----------------------------------------------------------------------


def test_a_file_changed_since_it_was_verified_is_refused(tmp_path: Path) -> None:
    m, entries = sample(tmp_path)
    src = entries[1].source
    assert isinstance(src, Path)
    src.write_bytes(b"B" + src.read_bytes()[1:])  # same size, other bytes
    with pytest.raises(IntegrityError, match=f"{src} changed since it was verified: its sha256 is not"):
        pack(m, entries)


def test_a_file_that_changed_size_is_refused(tmp_path: Path) -> None:
    m, entries = sample(tmp_path)
    src = entries[1].source
    assert isinstance(src, Path)
    src.write_bytes(src.read_bytes() + b"more")
    with pytest.raises(IntegrityError, match="changed size since it was verified: expected 5000 bytes"):
        pack(m, entries)


def test_a_file_that_shrinks_while_packed_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The size was right when the file was opened (fstat), then it ran short."""
    m, entries = sample(tmp_path)
    src = entries[1].source
    assert isinstance(src, Path)
    src.write_bytes(b"A" * 100)
    real = os.fstat

    class Stat:
        st_size = 5000
        st_mode = 0o100644  # a regular file

    monkeypatch.setattr(os, "fstat", lambda fd: Stat() if fd > 2 else real(fd))
    with pytest.raises(IntegrityError, match="shrank while it was packed: expected 5000 bytes"):
        pack(m, entries)


def test_a_source_refused_on_the_reader_thread_stops_the_bundle_there(tmp_path: Path) -> None:
    """The reader reads and hashes ahead of the compressor: a damaged file is raised where the writer reaches
    it, after every member before it and before any member after it; no reader thread is left behind."""
    m, entries = sample(tmp_path)
    damaged = entries[3].source
    assert isinstance(damaged, Path)
    damaged.write_bytes(b"x" * m.members[3].size)  # same size, other bytes
    out = io.BytesIO()
    with pytest.raises(DamagedSource, match="changed since it was verified") as info:
        write_bundle(out, m, entries, threads=1)
    assert info.value.sha256 == m.members[3].sha256
    assert no_thread_left()


def test_an_output_error_stops_the_reader(tmp_path: Path) -> None:
    """The output fails (a full disk) while the reader is ahead: the error is the writer's, the reader ends."""
    data = mixed(24)
    big = tmp_path / "big.bin"
    big.write_bytes(data)
    m = manifest([member("assets/big.bin", data), UV.member])

    class FullDisk(io.BytesIO):
        def write(self, b: object) -> int:  # type: ignore[override]
            if self.tell() > 1 << 20:
                raise OSError(errno.ENOSPC, "No space left on device")
            return super().write(b)  # type: ignore[arg-type]

    with pytest.raises(OSError, match="No space left"):
        write_bundle(FullDisk(), m, [Entry(m.members[0], big), UV], threads=1)
    assert no_thread_left()


def test_bytes_that_do_not_match_their_member_are_refused(tmp_path: Path) -> None:
    m, entries = sample(tmp_path)
    entries[0] = Entry(entries[0].member, RECIPE + b"#")
    with pytest.raises(IntegrityError, match=r"recipe\.toml does not match its manifest entry"):
        pack(m, entries)


@pytest.mark.parametrize(
    ("path", "why"),
    [("../escape", "'..' path component"), ("wheels/A.whl", "one name after Unicode and case folding")],
)
def test_the_writer_refuses_what_the_reader_would(tmp_path: Path, path: str, why: str) -> None:
    """Nothing is written for a bundle the reader would refuse: a bad path, or colliding ones."""
    _, entries = sample(tmp_path)
    extra = [Entry(member(path, b"x"), b"x")]
    if path == "wheels/A.whl":
        extra.append(Entry(member("wheels/a.whl", b"y"), b"y"))
    out = io.BytesIO()
    with pytest.raises(IntegrityError, match=why):
        write_bundle(out, manifest([e.member for e in entries + extra]), entries + extra)
    assert out.getvalue() == b""


def test_entries_must_follow_the_manifest(tmp_path: Path) -> None:
    m, entries = sample(tmp_path)
    with pytest.raises(IntegrityError, match="do not follow the manifest's order"):
        pack(m, [entries[1], entries[0], *entries[2:]])


# --- streaming ------------------------------------------------------------------------------------


def test_writing_and_reading_stream_a_large_file(tmp_path: Path) -> None:
    """A 200 MB (sparse) file is packed and read back with at most a few MB of Python memory."""
    size = 200 << 20
    big = tmp_path / "big.bin"
    with big.open("wb") as f:
        f.truncate(size)
    h = hashlib.sha256()
    zeros = bytes(1 << 20)
    for _ in range(size >> 20):
        h.update(zeros)
    del zeros
    m = manifest(
        [
            member("recipe.toml", RECIPE, "recipe"),
            type(member("a", b""))("assets/big.bin", size, h.hexdigest(), "asset"),
            UV.member,
        ]
    )
    bundle = tmp_path / "big.lbz"
    tracemalloc.start()
    try:
        with bundle.open("wb") as out:
            write_bundle(out, m, [Entry(m.members[0], RECIPE), Entry(m.members[1], big), UV], threads=1)
        _, write_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        read_unverified(bundle)
        _, read_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # the writer's frames (in flight, the one being filled, its copy), and the reader's pieces: at most
    # READ_AHEAD queued, one it is reading and hashing, one being compressed; the reader's frames in flight
    # and the one being read
    frames = (in_flight(1) + 2) * FRAME_SIZE
    assert write_peak < frames + (READ_AHEAD + 2) * READ_SIZE, f"writing held {write_peak} bytes"
    assert read_peak < (in_flight(None) + 3) * FRAME_SIZE, f"reading held {read_peak} bytes"
    assert bundle.stat().st_size < 1 << 20


# --- other tools ----------------------------------------------------------------------------------


@pytest.mark.skipif(not (shutil.which("zstd") and shutil.which("tar")), reason="needs the zstd and tar programs")
def test_stock_zstd_and_tar_read_a_bundle(tmp_path: Path) -> None:
    m, entries = sample(tmp_path)
    bundle = tmp_path / m.bundle_name
    bundle.write_bytes(pack(m, entries))
    subprocess.run(["zstd", "-q", "-t", str(bundle)], check=True)
    listing = subprocess.run(
        f"zstd -dc '{bundle}' | tar -tf -", shell=True, check=True, capture_output=True, text=True
    ).stdout.splitlines()
    assert listing == [MANIFEST, *(e.member.path for e in entries)]
    out = tmp_path / "tar-out"
    out.mkdir()
    subprocess.run(f"zstd -dc '{bundle}' | tar -xf - -C '{out}'", shell=True, check=True)
    assert (out / MANIFEST).read_bytes() == m.to_toml()
    assert (out / LONG).read_bytes() == b"long name"


def test_as_of_and_serial() -> None:
    m = manifest([])
    assert m.serial == int(AS_OF.timestamp())
    assert b'as-of = "2025-01-06T00:00:00Z"' in m.to_toml()
