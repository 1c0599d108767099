"""Reading a site store: its blobs and its builds, every path walked from the store's root one component
at a time with O_NOFOLLOW (a symbolic link anywhere inside the store is refused, never followed).

:class:`StoreReader` is the reading half of :class:`lockbuild.site.storage.Store`, which opens the store and
writes and looks after it; the layout is described there.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import stat
from pathlib import Path
from typing import BinaryIO, Self

from lockbuild.bundle.manifestparse import parse_manifest
from lockbuild.digest import pump
from lockbuild.errors import IntegrityError
from lockbuild.fsio import open_dir, open_regular, read_regular
from lockbuild.limits import Limits
from lockbuild.site import storecare
from lockbuild.site.storemodel import StoredBuild, StoreError, check_hex, list_names, parse_build_ref
from lockbuild.trust.scheme import SCHEME

MANIFEST_FILE = "bundle.toml"
SIGNATURE_FILE = MANIFEST_FILE + SCHEME.suffix  # bundle.toml.minisig: the blocks that counted, as bytes
REPORT_FILE = "vulns.cdx.json"  # the build's vulnerability report, kept by import (its signature file beside it)
REPORT_SIGNATURE_FILE = REPORT_FILE + SCHEME.suffix
TIP_DAMAGE = "Run `lockbuild store verify --store DIR` to list the damage, then import or pull the build again."


class StoreReader:
    """An open store's reads. Use as a context manager; its directory descriptors close with it."""

    root: Path
    limits: Limits
    fd: int  # the store's root
    blobs: int  # blobs/sha256
    builds: int
    tmp: int
    _fds: list[int]

    # -- plumbing -----------------------------------------------------------------------------
    def _keep(self, fd: int) -> int:
        self._fds.append(fd)
        return fd

    def close(self) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds.clear()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _where(self, *parts: str) -> str:
        return str(self.root.joinpath(*parts))

    def _dir(self, parent: int, name: str, create: bool, *, keep: bool = True) -> int:
        """A subdirectory, opened without following links; a link or a file there is refused."""
        if create:
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o755, dir_fd=parent)
        try:
            fd = open_dir(name, dir_fd=parent)
        except FileNotFoundError:
            raise StoreError(
                f"the store {self.root} has no {name}/; it is not a store or is damaged.", tip=TIP_DAMAGE
            ) from None
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise StoreError(
                    f"refused: {name!r} in the store {self.root} is a symbolic link or not a directory; "
                    "a store holds only plain directories and files.",
                    tip="Remove the link; a store must not point outside itself.",
                ) from None
            raise StoreError(f"cannot open {name!r} in the store {self.root}: {exc.strerror or exc}.") from None
        try:
            storecare.check_owner(self.root, os.fstat(fd), f"its directory {name}/")
        except BaseException:
            os.close(fd)
            raise
        return self._keep(fd) if keep else fd

    # -- blobs --------------------------------------------------------------------------------
    def blob_size(self, sha256: str) -> int | None:
        """The stored blob's size, or None if absent; a link or non-file under its name is refused."""
        try:
            st = os.stat(check_hex(sha256), dir_fd=self.blobs, follow_symlinks=False)
        except FileNotFoundError:
            return None
        if not stat.S_ISREG(st.st_mode):
            raise IntegrityError(
                f"refused: the blob {self._where('blobs', 'sha256', sha256)} is a link or not a plain file.",
                tip=TIP_DAMAGE,
            )
        return st.st_size

    def has_blob(self, sha256: str, size: int) -> bool:
        got = self.blob_size(sha256)
        if got is None:
            return False
        if got != size:
            raise IntegrityError(
                f"the blob {sha256} in {self.root} is {got} bytes; the manifest says {size}.", tip=TIP_DAMAGE
            )
        return True

    def open_blob(self, sha256: str) -> BinaryIO:
        """A blob, opened by descriptor as a regular file (a link, FIFO or device is refused, never
        waited on)."""
        try:
            f, _ = open_regular(
                check_hex(sha256),
                what="blob",
                max_size=self.limits.max_member,
                error=IntegrityError,
                dir_fd=self.blobs,
                shown=self._where("blobs", "sha256", sha256),
            )
        except FileNotFoundError:
            raise IntegrityError(f"the store {self.root} has no blob {sha256}.", tip=TIP_DAMAGE) from None
        except IntegrityError as exc:
            raise IntegrityError(f"refused: {exc.message}", tip=TIP_DAMAGE) from None
        return f

    def blob_at(self, sha256: str) -> tuple[int, str]:
        """A blob as (the opened ``blobs/sha256`` directory, its name there), for a hard link by descriptor."""
        return self.blobs, check_hex(sha256)

    def blob_names(self) -> list[str]:
        return list_names(self.blobs)

    def rehash(self, name: str) -> str:
        h = hashlib.sha256()
        with self.open_blob(name) as f:
            pump(f.read, h.update)
        return h.hexdigest()

    # -- builds -------------------------------------------------------------------------------
    def _read_file(self, dir_fd: int, name: str, limit: int, where: str) -> bytes:
        try:
            return read_regular(
                name, what="store file", max_size=limit, error=IntegrityError, dir_fd=dir_fd, shown=where
            )
        except FileNotFoundError:
            raise IntegrityError(f"refused: {where} is missing.", tip=TIP_DAMAGE) from None
        except IntegrityError as exc:
            raise IntegrityError(f"refused: {exc.message}", tip=TIP_DAMAGE) from None

    def _read_build(self, engine_fd: int, name: str, engine: str = "") -> tuple[bytes, bytes] | None:
        try:
            st = os.stat(name, dir_fd=engine_fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        if not stat.S_ISDIR(st.st_mode):
            raise StoreError(f"refused: the build {name!r} in {self.root} is a link or not a directory.")
        fd = self._dir(engine_fd, name, False, keep=False)
        try:
            where = self._where("builds", engine, name) if engine else self._where("builds", name)
            manifest = self._read_file(fd, MANIFEST_FILE, self.limits.max_manifest, f"{where}/{MANIFEST_FILE}")
            sigs = self._read_file(fd, SIGNATURE_FILE, self.limits.max_signature_file, f"{where}/{SIGNATURE_FILE}")
        finally:
            os.close(fd)
        return manifest, sigs

    def report_path(self, ref: str) -> Path:
        """Where the build's kept vulnerability report lies (read by the one trust decision, by path)."""
        engine, version, variant = parse_build_ref(ref)
        return self.root / "builds" / engine / f"{version}-{variant}" / REPORT_FILE

    def build(self, ref: str) -> StoredBuild:
        return self._parse_build(ref, *self.build_files(ref))

    def build_files(self, ref: str) -> tuple[bytes, bytes]:
        """A build's manifest bytes and signature blocks, unparsed (an installer judges the signatures
        before it parses the manifest)."""
        engine, version, variant = parse_build_ref(ref)
        try:
            efd = self._dir(self.builds, engine, False, keep=False)
        except StoreError:
            efd = -1
        try:
            got = self._read_build(efd, f"{version}-{variant}", engine) if efd >= 0 else None
        finally:
            if efd >= 0:
                os.close(efd)
        if got is None:
            raise StoreError(
                f"the store {self.root} holds no {ref}.", tip="`lockbuild store list --store DIR` shows what it holds."
            )
        return got

    def _parse_build(self, ref: str, manifest_bytes: bytes, signatures: bytes) -> StoredBuild:
        manifest = parse_manifest(manifest_bytes, self.limits)
        b = StoredBuild(manifest, manifest_bytes, signatures)
        if b.ref != ref:
            raise IntegrityError(f"the store's {ref} holds the manifest of {b.ref}; refused.", tip=TIP_DAMAGE)
        return b

    def refs(self) -> list[str]:
        out = []
        for engine in list_names(self.builds):
            efd = self._dir(self.builds, engine, False, keep=False)
            try:
                out += [f"{engine}/{name}" for name in list_names(efd)]
            finally:
                os.close(efd)
        return out

    def builds_all(self) -> list[StoredBuild]:
        return [self.build(ref) for ref in self.refs()]
