"""Wheels and release archives are read in place as they enter the cache: each CUDA library's
architectures, kept per file sha256, so no file is read twice and ``lock`` reads only what is kept."""

from __future__ import annotations

import hashlib
import io
import tarfile
import zipfile
from pathlib import Path

import fatbinkit
import pytest

import lockbuild.fetch.kernelcache as kernelcache
from lockbuild.fetch.cache import Cache
from lockbuild.gpu.fatbin import BinaryError
from lockbuild.gpu.sharedobjects import read_archive


def wheel_bytes(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return buf.getvalue()


def tar_bytes(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


TORCH = {
    "torch/lib/libtorch_cuda.so": fatbinkit.cuda_so(("7.5", "8.0", "9.0")),
    "torch/lib/libc10.so": fatbinkit.elf_so({".text": b"\xc3"}),
    "torch/_C.cpython-312-x86_64-linux-gnu.so": fatbinkit.elf_so({".text": b"\xc3"}),
    "torch/__init__.py": b"# not read\n",
    "torch/lib/libfake.so.txt": fatbinkit.cuda_so(("5.0",)),  # not a shared object's name
}


def test_a_wheel_is_read_member_by_member() -> None:
    reading = read_archive(io.BytesIO(wheel_bytes(TORCH)), "torch-2.9.0-cp312-cp312-manylinux_2_28_x86_64.whl")
    assert reading is not None
    assert reading.to_json() == {
        "files": {"torch/lib/libtorch_cuda.so": {"sass": ["7.5", "8.0", "9.0"], "ptx": []}},
        "cudart": [],
    }


def test_a_release_archive_and_its_cuda_runtime() -> None:
    files = {
        "llama-b6000/lib/libggml-cuda.so": fatbinkit.cuda_so(("8.0", "8.6"), ("8.9",)),
        "llama-b6000/lib/libcudart.so.12.8.90": fatbinkit.elf_so({".text": b"\xc3"}),
        "llama-b6000/bin/llama-server": fatbinkit.cuda_so(("9.0",)),  # only .so members are read
    }
    reading = read_archive(io.BytesIO(tar_bytes(files)), "llama-b6000-bin-ubuntu-cuda-x64.tar.gz")
    assert reading is not None
    assert reading.to_json()["files"] == {"llama-b6000/lib/libggml-cuda.so": {"sass": ["8.0", "8.6"], "ptx": ["8.9"]}}
    assert reading.cudart == ("12.8.90",)


def test_an_sdist_is_not_read() -> None:
    assert read_archive(io.BytesIO(tar_bytes({"x-1.0/x.so": fatbinkit.cuda_so(("8.0",))})), "x-1.0.tar.gz") is None


def test_a_damaged_library_in_a_wheel_names_the_wheel_and_the_member() -> None:
    bad = fatbinkit.elf_so({".text": b"\xc3"}, shoff=1 << 40)
    with pytest.raises(BinaryError, match=r"^evil-1\.0-py3-none-any\.whl: evil/libx\.so: .*past the end"):
        read_archive(io.BytesIO(wheel_bytes({"evil/libx.so": bad})), "evil-1.0-py3-none-any.whl")


def _commit(cache: Cache, data: bytes, name: str) -> str:
    sha = hashlib.sha256(data).hexdigest()
    temp = cache.new_temp(sha)
    temp.write_bytes(data)
    cache.commit(temp, sha, name=name)
    return sha


def test_the_cache_keeps_each_reading_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = Cache(tmp_path / "cache")
    cache.check_owner()
    data = wheel_bytes(TORCH)
    sha = _commit(cache, data, "torch-2.9.0-cp312-cp312-manylinux_2_28_x86_64.whl")
    kept = kernelcache.kept_reading(cache, sha)
    assert kept is not None and [n for n, _ in kept.files] == ["torch/lib/libtorch_cuda.so"]

    def never(*_: object) -> None:
        raise AssertionError("read twice")

    monkeypatch.setattr(kernelcache, "read_archive", never)
    assert _commit(cache, data, "torch-2.9.0-cp312-cp312-manylinux_2_28_x86_64.whl") == sha  # kept: not read again


def test_a_damaged_kept_reading_is_a_miss_and_removed(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "cache")
    cache.check_owner()
    sha = _commit(cache, wheel_bytes(TORCH), "torch-2.9.0-cp312-cp312-manylinux_2_28_x86_64.whl")
    path = kernelcache.reading_path(cache, sha)
    path.write_bytes(path.read_bytes().replace(b"9.0", b"9.9"))
    assert kernelcache.kept_reading(cache, sha) is None
    assert not path.exists()


def test_fetching_a_wheel_with_a_damaged_library_stops(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "cache")
    cache.check_owner()
    bad = wheel_bytes({"evil/libx.so": fatbinkit.elf_so({".text": b"\xc3"}, shnum=60000)})
    with pytest.raises(BinaryError, match=r"evil-1\.0-py3-none-any\.whl: evil/libx\.so"):
        _commit(cache, bad, "evil-1.0-py3-none-any.whl")


def test_a_file_that_is_no_archive_is_left_unread() -> None:
    assert read_archive(io.BytesIO(b"not a tar"), "asset.tgz") is None
    assert read_archive(io.BytesIO(b"not a zip"), "x-1.0-py3-none-any.whl") is None
