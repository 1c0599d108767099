"""The site store: every member once, by sha256, and per build the signed manifest and its signature blocks
(layout: docs/site-administrators.md, "Many nodes"). Every write lands in tmp/, is fsynced, checked and
renamed, a build's directory last, so a killed import leaves no build naming missing blobs. Every path is
walked with O_NOFOLLOW: a link inside the store is refused. Reads: ``storeread``; care: ``storecare``."""

from __future__ import annotations

import contextlib
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from lockbuild.bundle.manifest import Manifest
from lockbuild.bundle.manifestparse import parse_manifest
from lockbuild.errors import IntegrityError
from lockbuild.fsio import (
    busy_error,
    create_new,
    flocked,
    fsync_dir,
    open_dir,
    open_lockfile,
    open_regular,
    open_under,
    open_writable,
)
from lockbuild.limits import DEFAULT_LIMITS, Limits
from lockbuild.site import storecare
from lockbuild.site.storemodel import Damage, StoreError, check_hex, check_name, merge_signatures
from lockbuild.site.storeread import MANIFEST_FILE, REPORT_FILE, REPORT_SIGNATURE_FILE, SIGNATURE_FILE, StoreReader

MARK, MARK_TEXT = storecare.MARK, storecare.MARK_TEXT


class Store(StoreReader):
    """An open store: its reads (:class:`StoreReader`), and its writes, which land whole or not at all. Use as
    a context manager; its directory descriptors close with it."""

    def __init__(self, root: Path, *, create: bool = False, limits: Limits = DEFAULT_LIMITS) -> None:
        self.root = root
        self.limits = limits
        self._fds: list[int] = []
        storecare.check_ancestors(root)  # before anything is made there
        if create:
            try:
                root.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreError(f"cannot make the store {root}: {exc.strerror or exc}.") from None
            storecare.check_ancestors(root)  # the directories just made too
        try:
            self.fd = self._keep(open_dir(root, follow=True))
        except OSError as exc:
            raise StoreError(
                f"cannot open the store {root}: {exc.strerror or exc}.",
                tip="Give --store the directory `lockbuild import` or `pull` made.",
            ) from None
        try:
            storecare.check_owner(root, os.fstat(self.fd), str(root))
            self._mark(create)
            self.blobs = self._dir(self._dir(self.fd, "blobs", create), "sha256", create)
            self.builds = self._dir(self.fd, "builds", create)
            self.tmp = self._dir(self.fd, "tmp", create)
        except BaseException:
            self.close()
            raise

    # -- writing ------------------------------------------------------------------------------
    def _mark(self, create: bool) -> None:
        self.created = storecare.check_mark(self.fd, self.root, create=create)  # True: this process made it

    def _write_new(self, dir_fd: int, name: str, data: bytes) -> None:
        """Write ``data`` to tmp/, fsync, and rename it to ``name`` in ``dir_fd``."""
        tmp = f"new-{os.getpid()}-{time.monotonic_ns()}"
        with create_new(tmp, dir_fd=self.tmp) as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, name, src_dir_fd=self.tmp, dst_dir_fd=dir_fd)
        fsync_dir(dir_fd)

    @contextlib.contextmanager
    def lock(self, *, exclusive: bool, wait: float = 0.0) -> Iterator[None]:
        """The store's lock: imports, pulls and gc hold it exclusively, verify shares it."""
        try:
            fd = open_lockfile("lock", dir_fd=self.fd)
        except OSError as exc:
            raise StoreError(f"cannot open the store's lock {self._where('lock')}: {exc.strerror or exc}.") from None
        busy = busy_error(
            f"another lockbuild process holds the store {self.root} (an import, pull or gc).",
            "Wait for it to finish, or pass --wait SECONDS.",
        )
        try:
            with flocked(fd, exclusive=exclusive, wait=wait, busy=busy):
                yield
        finally:
            os.close(fd)

    def partial(self, sha256: str) -> Path:
        """Where a blob being fetched is written (resumable: the same name each time)."""
        return self.root / "tmp" / f"{check_hex(sha256)}.partial"

    def open_partial(self, sha256: str, *, append: bool) -> BinaryIO:
        try:
            return open_writable(f"{check_hex(sha256)}.partial", dir_fd=self.tmp, append=append)
        except OSError as exc:
            raise StoreError(f"cannot write {self.partial(sha256)}: {exc.strerror or exc}.") from None

    def partial_size(self, sha256: str) -> int:
        try:
            st = os.stat(f"{check_hex(sha256)}.partial", dir_fd=self.tmp, follow_symlinks=False)
        except FileNotFoundError:
            return 0
        return st.st_size if stat.S_ISREG(st.st_mode) else 0

    def adopt(self, path: Path, sha256: str) -> None:
        """:meth:`adopt_at` for a file under tmp/ named by its path (a pull's partial blob)."""
        try:
            rel = path.relative_to(self.root / "tmp").as_posix()
        except ValueError:
            raise StoreError(f"internal: {path} is not under the store's tmp/.") from None
        self.adopt_at(self.tmp, rel, sha256, str(path))

    def adopt_at(self, dir_fd: int, rel: str, sha256: str, shown: str) -> None:
        """Move the checked file ``rel`` under the opened ``dir_fd`` into blobs/ as its sha256 (replacing a
        damaged copy): walked by descriptor (a link on the way is refused), fsynced, renamed between the two
        directories' descriptors, never through a path."""
        check_hex(sha256)
        parent, _, name = rel.rpartition("/")
        try:
            fd = open_under(dir_fd, parent)
        except OSError as exc:
            raise StoreError(f"internal: cannot reach the checked member {shown}: {exc.strerror or exc}.") from None
        try:
            try:
                f, _ = open_regular(
                    name,
                    what="checked member",
                    max_size=self.limits.max_member,
                    error=StoreError,
                    dir_fd=fd,
                    shown=shown,
                )
            except FileNotFoundError:
                raise StoreError(f"internal: the checked member {shown} is gone.") from None
            with f:
                os.fchmod(f.fileno(), 0o444)  # content-addressed: never edited in place
                os.fsync(f.fileno())
            os.rename(name, sha256, src_dir_fd=fd, dst_dir_fd=self.blobs)
        finally:
            os.close(fd)

    def sync(self) -> None:
        fsync_dir(self.blobs)

    # -- builds -------------------------------------------------------------------------------
    def put_build(self, manifest: Manifest, manifest_bytes: bytes, signatures: bytes) -> None:
        """Record a build whose blobs are all in place. The same manifest again adds the signature
        blocks the store lacks (a co-signature); a different manifest under the same name is refused."""
        for m in manifest.members:
            if not self.has_blob(m.sha256, m.size):
                raise IntegrityError(f"internal: {m.path} ({m.sha256}) is not in the store yet.")
        self.sync()
        engine = self._dir(self.builds, check_name(manifest.engine, "engine"), True, keep=False)
        try:
            name = f"{check_name(manifest.version, 'version')}-{check_name(manifest.variant, 'variant')}"
            existing = self._read_build(engine, name, manifest.engine)
            if existing is not None and existing[0] != manifest_bytes:
                raise IntegrityError(
                    f"the store already holds a different {manifest.engine}/{name} "
                    f"(serial {parse_manifest(existing[0]).serial}, this one {manifest.serial}).",
                    tip="Keep one store per site release train, or import into another store.",
                )
            if existing is None:
                staging = f"build-{os.getpid()}-{time.monotonic_ns()}"
                os.mkdir(staging, 0o755, dir_fd=self.tmp)
                fd = open_dir(staging, dir_fd=self.tmp)
                try:
                    self._write_new(fd, MANIFEST_FILE, manifest_bytes)
                    self._write_new(fd, SIGNATURE_FILE, signatures)
                finally:
                    os.close(fd)
                os.rename(staging, name, src_dir_fd=self.tmp, dst_dir_fd=engine)
            elif (merged := merge_signatures(existing[1], signatures)) != existing[1]:
                self._write_new(self._build_dir(engine, name), SIGNATURE_FILE, merged)
            fsync_dir(engine)
        finally:
            os.close(engine)

    def put_report(self, manifest: Manifest, report: bytes, signatures: bytes) -> None:
        """Keep a build's vulnerability report (checked by the caller) beside it, replacing an older one."""
        engine = self._dir(self.builds, check_name(manifest.engine, "engine"), False, keep=False)
        try:
            build = f"{check_name(manifest.version, 'version')}-{check_name(manifest.variant, 'variant')}"
            fd = self._dir(engine, build, False, keep=False)
            try:
                self._write_new(fd, REPORT_SIGNATURE_FILE, signatures)
                self._write_new(fd, REPORT_FILE, report)
            finally:
                os.close(fd)
        finally:
            os.close(engine)

    def _build_dir(self, engine_fd: int, name: str) -> int:
        return self._dir(engine_fd, name, False)

    # -- maintenance (lockbuild/site/storecare.py) ------------------------------------------------
    def clear_tmp(self) -> None:
        """Remove what killed imports left in tmp/ (hold the exclusive lock); partial blobs stay."""
        storecare.clear_tmp(self)

    def verify(self, *, remove: bool = False) -> list[Damage]:
        """Re-hash every blob and check every build; with ``remove``, delete damaged blobs."""
        return storecare.verify(self, remove=remove)

    def gc(self) -> tuple[int, int]:
        """Remove blobs no build references, and tmp/ leftovers: (blobs removed, bytes freed)."""
        return storecare.gc(self)
