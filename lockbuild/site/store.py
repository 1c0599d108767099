"""The site store: a directory that keeps every member once, by sha256, and per build the signed
manifest and its signature blocks.

Layout (docs/site-administrators.md, "Many nodes")::

    STORE/lockbuild-store                        marks the directory as a store (format 1)
    STORE/lock                                   flock: imports and gc exclusive, verify shared
    STORE/blobs/sha256/<hex>                     one file per distinct member, named by its sha256
    STORE/builds/<engine>/<version>-<variant>/   bundle.toml (the signed manifest) and bundle.toml.minisig
    STORE/tmp/                                   partial blobs and staging; never read as content

Every write lands under a temporary name in tmp/, is fsynced, checked, then renamed into place; a
build's directory appears last, after all its blobs. A killed import therefore leaves blobs that are
whole (or nothing) and no build naming missing blobs; the next import completes it.

Every path is walked from the store's root one component at a time with O_NOFOLLOW: a symbolic link
anywhere inside the store (a directory, a blob, a manifest) is refused, never followed. The store, and the
directories above it, follow --root's rules (``storecare.check_owner``, ``storecare.check_ancestors``);
files move only between directories the store holds open (``os.rename`` by ``src_dir_fd``/``dst_dir_fd``).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from lockbuild.bundle.manifest import Manifest
from lockbuild.bundle.manifestparse import parse_manifest
from lockbuild.digest import CHUNK
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
    read_regular,
)
from lockbuild.limits import DEFAULT_LIMITS, Limits
from lockbuild.site import storecare
from lockbuild.site.storemodel import (
    Damage,
    StoredBuild,
    StoreError,
    check_hex,
    check_name,
    list_names,
    merge_signatures,
    parse_ref,
)

MARK, MARK_TEXT = storecare.MARK, storecare.MARK_TEXT
MANIFEST_FILE = "bundle.toml"
SIGNATURE_FILE = "bundle.toml.minisig"
_TIP_DAMAGE = "Run `lockbuild store verify --store DIR` to list the damage, then import or pull the build again."


class Store:
    """An open store. Use as a context manager; its directory descriptors close with it."""

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

    # -- plumbing -----------------------------------------------------------------------------
    def _keep(self, fd: int) -> int:
        self._fds.append(fd)
        return fd

    def close(self) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds.clear()

    def __enter__(self) -> Store:
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
                f"the store {self.root} has no {name}/; it is not a store or is damaged.", tip=_TIP_DAMAGE
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
                tip=_TIP_DAMAGE,
            )
        return st.st_size

    def has_blob(self, sha256: str, size: int) -> bool:
        got = self.blob_size(sha256)
        if got is None:
            return False
        if got != size:
            raise IntegrityError(
                f"the blob {sha256} in {self.root} is {got} bytes; the manifest says {size}.", tip=_TIP_DAMAGE
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
            raise IntegrityError(f"the store {self.root} has no blob {sha256}.", tip=_TIP_DAMAGE) from None
        except IntegrityError as exc:
            raise IntegrityError(f"refused: {exc.message}", tip=_TIP_DAMAGE) from None
        return f

    def blob_at(self, sha256: str) -> tuple[int, str]:
        """A blob as (the opened ``blobs/sha256`` directory, its name there), for a hard link by descriptor."""
        return self.blobs, check_hex(sha256)

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

    def blob_names(self) -> list[str]:
        return list_names(self.blobs)

    def rehash(self, name: str) -> str:
        h = hashlib.sha256()
        with self.open_blob(name) as f:
            while chunk := f.read(CHUNK):
                h.update(chunk)
        return h.hexdigest()

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

    def _build_dir(self, engine_fd: int, name: str) -> int:
        return self._dir(engine_fd, name, False)

    def _read_file(self, dir_fd: int, name: str, limit: int, where: str) -> bytes:
        try:
            return read_regular(
                name, what="store file", max_size=limit, error=IntegrityError, dir_fd=dir_fd, shown=where
            )
        except FileNotFoundError:
            raise IntegrityError(f"refused: {where} is missing.", tip=_TIP_DAMAGE) from None
        except IntegrityError as exc:
            raise IntegrityError(f"refused: {exc.message}", tip=_TIP_DAMAGE) from None

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

    def build(self, ref: str) -> StoredBuild:
        return self._parse_build(ref, *self.build_files(ref))

    def build_files(self, ref: str) -> tuple[bytes, bytes]:
        """A build's manifest bytes and signature blocks, unparsed (an installer judges the signatures
        before it parses the manifest)."""
        engine, version, variant = parse_ref(ref)
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
            raise IntegrityError(f"the store's {ref} holds the manifest of {b.ref}; refused.", tip=_TIP_DAMAGE)
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
