"""A download of this build was hashed as it arrived: the bundle writer packs it without hashing it again,
but only while its descriptor shows the very file that was hashed, unchanged (digest.HashedFile)."""

from __future__ import annotations

import hashlib
import os
import time
import types
from pathlib import Path
from typing import BinaryIO

import pytest
from conftest import Keys
from hostile import RECIPE, manifest, member
from test_build import build
from test_bundle_format import UV, pack, sample

import lockbuild.bundle.write as write
from lockbuild.bundle.write import Entry
from lockbuild.digest import FileIdentity, HashedFile
from lockbuild.errors import IntegrityError


def as_downloaded(entries: list[Entry], i: int) -> Path:
    """Entry ``i`` (a file) as the fetcher hands over a download: with its digest and identity."""
    src = entries[i].source
    assert isinstance(src, Path)
    entries[i] = Entry(entries[i].member, HashedFile(src, entries[i].member.sha256, FileIdentity.of(os.stat(src))))
    return src


def counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    made = [0]

    def sha256(data: bytes = b"") -> hashlib._Hash:
        made[0] += 1
        return hashlib.sha256(data)

    monkeypatch.setattr(write, "hashlib", types.SimpleNamespace(sha256=sha256))
    return made


def test_a_download_hashed_as_it_arrived_is_packed_without_a_second_hash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    m, entries = sample(tmp_path)
    made = counted(monkeypatch)
    plain = pack(m, entries)
    every = made[0]
    as_downloaded(entries, 1)
    made[0] = 0
    assert pack(m, entries) == plain  # the same bytes
    assert made[0] == every - 1  # that file's bytes hashed once only: as they arrived


@pytest.mark.parametrize("times", ["moved", "set-back"])
def test_a_download_changed_after_it_was_hashed_is_hashed_and_refused(tmp_path: Path, times: str) -> None:
    """Same size, other bytes, written after the download's hash; with ``set-back`` its modification
    time is restored too (only the status-change time, which no one can set back, still shows it)."""
    m, entries = sample(tmp_path)
    src = as_downloaded(entries, 1)
    before = os.stat(src)
    time.sleep(0.02)  # past the file system's clock tick
    src.write_bytes(b"B" + src.read_bytes()[1:])
    if times == "set-back":
        os.utime(src, ns=(before.st_atime_ns, before.st_mtime_ns))
    with pytest.raises(IntegrityError, match=f"{src} changed since it was verified: its sha256 is not"):
        pack(m, entries)


class _WrittenMidway:
    """A packed file whose second read comes after another process rewrote it (with the same bytes)."""

    def __init__(self, f: BinaryIO, path: Path) -> None:
        self.f, self.path, self.reads = f, path, 0

    def __enter__(self) -> _WrittenMidway:
        return self

    def __exit__(self, *exc: object) -> None:
        self.f.close()

    def fileno(self) -> int:
        return self.f.fileno()

    def read(self, n: int) -> bytes:
        self.reads += 1
        if self.reads == 2:
            time.sleep(0.02)
            self.path.write_bytes(self.path.read_bytes())
        return self.f.read(n)


def test_a_download_written_to_while_it_is_packed_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = bytes(range(256)) * (3 * write.READ_SIZE // 256)  # read in three pieces
    src = tmp_path / "big"
    src.write_bytes(data)
    entries = [
        Entry(member("recipe.toml", RECIPE, "recipe"), RECIPE),
        Entry(member("wheels/big.whl", data, "wheel"), src),
    ]
    entries.append(UV)
    m = manifest([e.member for e in entries])
    src = as_downloaded(entries, 1)
    real = write.open_regular

    def opened(path: Path | str, **kw: object) -> tuple[object, int]:
        f, size = real(path, **kw)  # type: ignore[arg-type]
        return (_WrittenMidway(f, src) if Path(path) == src else f), size

    monkeypatch.setattr(write, "open_regular", opened)
    with pytest.raises(IntegrityError, match=f"{src} changed while it was packed"):
        pack(m, entries)


def test_a_cold_build_packs_its_downloads_unhashed_and_a_warm_one_hashes_its_cache_hits(
    env: object, keys: Keys, toy_recipe: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same bundle either way; the cold build's writer hashed one file fewer per download (each was
    hashed as it arrived), the warm build's hashed every cache hit as it packed it."""
    proven: list[bool] = []
    real = write.same_file

    def spy(fd: int, identity: FileIdentity) -> bool:
        proven.append(real(fd, identity))
        return proven[-1]

    monkeypatch.setattr(write, "same_file", spy)
    cache = {"LOCKBUILD_CACHE_DIR": str(tmp_path / "cache")}
    cold = build(toy_recipe, keys.secret, tmp_path / "a", env=cache)
    downloads = len(proven)
    assert downloads >= 2 and all(proven)  # checked before the first byte and after the last
    proven.clear()
    warm = build(toy_recipe, keys.secret, tmp_path / "b", env=cache)
    assert proven == []  # cache hits: no HashedFile, hashed as they are packed
    assert cold.read_bytes() == warm.read_bytes()
