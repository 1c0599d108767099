"""The GPU code in a wheel (zip) or a release archive (tar, zip): each ``.so`` member read in place by
:func:`lockbuild.gpu.fatbin.read_kernels`, without unpacking the archive or downloading it again. A
deflated zip member or a tar member is inflated once into an anonymous temporary file (an ELF is read
backwards). Only CUDA libraries are recorded."""

from __future__ import annotations

import re
import shutil
import tarfile
import tempfile
import zipfile
import zlib
from dataclasses import dataclass, field
from typing import IO, Any, BinaryIO

from lockbuild.digest import CHUNK
from lockbuild.gpu.fatbin import BinaryError, Kernels, read_kernels
from lockbuild.gpu.vocab import parse_arch

SHARED_OBJECT = re.compile(r"[^/]\.so(?:\.\d{1,6})*\Z")
CUDART = re.compile(r"(?:^|/)libcudart\.so\.(\d{1,3}(?:\.\d{1,6}){0,2})\Z")
MAX_LIBRARIES = 100_000  # shared objects in one archive


@dataclass(frozen=True)
class Reading:
    """What an archive's shared objects carry: each CUDA library's kernels, by member path, and the
    version in the name of each CUDA runtime library it holds (``libcudart.so.13`` -> ``13``)."""

    files: tuple[tuple[str, Kernels], ...] = ()
    cudart: tuple[str, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        return {"files": {name: k.to_json() for name, k in self.files}, "cudart": list(self.cudart)}

    @classmethod
    def from_json(cls, data: Any) -> Reading | None:
        """A reading written by :meth:`to_json`; None for anything else (a damaged cache entry)."""
        if not isinstance(data, dict) or not isinstance(data.get("files"), dict):
            return None
        cudart = data.get("cudart")
        if not isinstance(cudart, list) or not all(isinstance(v, str) for v in cudart):
            return None
        files = []
        for name, k in sorted(data["files"].items()):
            if not isinstance(k, dict) or set(k) != {"sass", "ptx"}:
                return None
            sass = [parse_arch(a) for a in k["sass"]] if isinstance(k["sass"], list) else [None]
            ptx = [parse_arch(a) for a in k["ptx"]] if isinstance(k["ptx"], list) else [None]
            if None in sass or None in ptx:
                return None
            files.append((name, Kernels(tuple(a for a in sass if a), tuple(a for a in ptx if a))))
        return cls(tuple(files), tuple(cudart))


def _is_library(name: str) -> bool:
    return SHARED_OBJECT.search(name) is not None


def _collect(found: list[tuple[str, Kernels]], cudart: list[str], name: str, kernels: Kernels) -> None:
    if len(found) + len(cudart) >= MAX_LIBRARIES:
        raise BinaryError(f"{name}: the archive holds over {MAX_LIBRARIES} shared objects; expected fewer.")
    if (m := CUDART.search(name)) is not None:
        cudart.append(m[1])
    if not kernels.empty:
        found.append((name, kernels))


def read_zip(f: BinaryIO, label: str) -> Reading | None:
    """The CUDA libraries of the zip (a wheel) open as ``f``; ``label`` names it in messages."""
    found: list[tuple[str, Kernels]] = []
    cudart: list[str] = []
    try:
        with zipfile.ZipFile(f) as zf:
            for info in zf.infolist():
                if info.is_dir() or not _is_library(info.filename):
                    continue
                shown = f"{label}: {info.filename}"
                with zf.open(info) as member:
                    if info.compress_type == zipfile.ZIP_STORED:  # seeks are cheap: read in place
                        kernels = read_kernels(member, info.file_size, shown)
                    else:  # one pass of inflating, not one per backward seek
                        kernels = _read_copied(member, info.file_size, shown)
                _collect(found, cudart, info.filename, kernels)
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, ValueError, OSError):
        return None  # not a readable zip: left unread (whatever unpacks it refuses it), never taken as no kernels
    return Reading(tuple(sorted(found)), tuple(sorted(set(cudart))))


def _read_copied(source: IO[bytes], size: int, shown: str) -> Kernels:
    """Read the archive member ``source`` from an anonymous temporary copy, inflated once."""
    with tempfile.TemporaryFile(prefix="lockbuild-so-") as copy:
        shutil.copyfileobj(source, copy, CHUNK)
        if copy.tell() != size:
            raise BinaryError(f"{shown}: the tar member says it has {size} bytes and holds {copy.tell()}.")
        return read_kernels(copy, size, shown)


def read_tar(f: BinaryIO, label: str) -> Reading | None:
    """The CUDA libraries of the tar (plain or compressed) open as ``f``; members stream in order."""
    found: list[tuple[str, Kernels]] = []
    cudart: list[str] = []
    try:
        with tarfile.open(fileobj=f, mode="r|*") as tf:
            for info in tf:
                if not info.isreg() or not _is_library(info.name):
                    continue
                member = tf.extractfile(info)
                if member is None:
                    continue
                kernels = _read_copied(member, info.size, f"{label}: {info.name}")
                _collect(found, cudart, info.name, kernels)
    except (tarfile.TarError, zlib.error, EOFError, OSError, ValueError):
        return None  # as for a zip
    return Reading(tuple(sorted(found)), tuple(sorted(set(cudart))))


def read_archive(f: BinaryIO, name: str, label: str | None = None) -> Reading | None:
    """The reading of the archive ``name`` (a wheel or a release archive) open as ``f``; None for a file
    of another kind (an sdist is source: it is read once built into a wheel) or that does not open as
    the archive its name says (left unread: never taken as a file without kernels)."""
    label = label or name
    if name.endswith((".whl", ".zip")):
        return read_zip(f, label)
    if name.endswith((".tar.gz", ".tgz", ".tar.xz", ".tar.bz2", ".tar")) and not _looks_like_sdist(name):
        return read_tar(f, label)
    return None


def _looks_like_sdist(name: str) -> bool:
    """An sdist (NAME-VERSION.tar.gz of Python source) has no binaries worth reading."""
    return re.fullmatch(r"[A-Za-z0-9_.]+-\d[A-Za-z0-9_.!+]*\.tar\.gz", name.rsplit("/", 1)[-1]) is not None
