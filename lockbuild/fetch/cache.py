"""A content-addressed file cache: entries named by sha256, written under a temporary name, renamed once verified.

The cache is trusted only as far as its owner (``check_owner``). Entries are opened without following
symlinks, and a caller that reads an entry reads it from the descriptor that was hashed. A kept METADATA
or GPU reading is trusted exactly as far as the cache is, and names the entry it belongs to."""

from __future__ import annotations

import errno
import hashlib
import os
import secrets
import stat
from pathlib import Path
from typing import BinaryIO

from lockbuild import fsio
from lockbuild.digest import FileIdentity, HashedFile, Hasher, git_blob_hash, is_git_sha1, is_sha256, pump
from lockbuild.errors import FetchError, IntegrityError, LockbuildError
from lockbuild.fetch.kernelcache import keep_reading
from lockbuild.sdist.closure import MAX_METADATA_BYTES, wheel_metadata

GIT_KEY = "git-sha1:"  # a key that names an entry by its git blob id instead of its sha256
STALE_TEMP_SECONDS = 24 * 3600  # a .part file untouched this long belongs to a fetch that died


MAX_MADE = 64 << 20  # a file the builder makes itself (lockbuild's own wheel is 0.3 MB)
METADATA_MAGIC = b"lockbuild-wheel-metadata 1"  # the first line: MAGIC WHEEL-SHA256 METADATA-SHA256
_METADATA_HEAD = len(METADATA_MAGIC) + 2 * 65 + 1


def _unsafe(path: Path, st: os.stat_result) -> str | None:
    """Why ``path`` may not hold cache data, or None when it is this user's own private directory."""
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    if st.st_uid != os.geteuid():
        return f"is owned by uid {st.st_uid}, not by this user (uid {os.geteuid()})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"is writable by group or others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def entry_hash(key: str, size: int) -> Hasher:
    """The hash that names an entry of ``size`` bytes under ``key``: sha256, or the git blob sha1."""
    return git_blob_hash(size) if key.startswith(GIT_KEY) else hashlib.sha256()


def digest_of(key: str) -> str:
    """The hex digest a key names (the key without its ``git-sha1:`` prefix)."""
    return key.removeprefix(GIT_KEY)


class Cache:
    """The cache under ROOT: sha256/AB/ABCD… (the entries), git-sha1/AB/ABCD… (files known only by their
    git blob id, keyed ``git-sha1:ID``), metadata/AB/ABCD… (a wheel entry's METADATA: ``keep_metadata``),
    tmp/*.part (transfers in progress, never read as entries), gpu/ (kept GPU readings: ``kernelcache.py``),
    uv/ (uv's own cache) and resolutions/ (uv's answers by their inputs: ``memo.py``). Only ``commit``
    puts a file under sha256/, after the fetcher has checked it, and ``lookup`` re-hashes an entry before
    handing it out."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.files = root / "sha256"
        self.git_files = root / "git-sha1"
        self.tmp = root / "tmp"
        self.kept = root / "metadata"

    def path(self, sha256: str) -> Path:
        """The entry for a key: a sha256, or ``git-sha1:`` and a git blob id."""
        if sha256.startswith(GIT_KEY) and is_git_sha1(blob := sha256[len(GIT_KEY) :]):
            return self.git_files / blob[:2] / blob
        if not is_sha256(sha256):
            raise IntegrityError(f"expected a sha256 of 64 lowercase hex digits, found {sha256[:80]!r}.")
        return self.files / sha256[:2] / sha256

    def check_owner(self) -> None:
        """Create the cache (mode 0700) if missing; refuse one that another user could write to: a root (or
        one of its directories) that is a symlink, owned by another user or writable by group or others,
        since whoever can write there chooses what uv and the bundle read."""
        try:
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            dirs = (self.root, self.files, self.git_files, self.kept, self.tmp, self.uv_cache(), self.resolutions())
            for d in (*dirs, self.root / "gpu"):
                try:
                    st = d.lstat()
                except FileNotFoundError:
                    continue
                why = _unsafe(d, st)
                if why is not None:
                    raise FetchError(
                        f"the cache directory {d} {why}; expected a directory owned by this user and writable "
                        "by no one else, since whoever can write there chooses what is locked and bundled.",
                        tip=f"Fix it (chown $USER {d}; chmod go-w {d}), or set LOCKBUILD_CACHE_DIR to a "
                        "private directory.",
                    )
        except OSError as exc:
            raise FetchError(
                f"cannot use the cache directory {self.root}: {exc.strerror or exc}.",
                tip="Check the permissions there, or set LOCKBUILD_CACHE_DIR to another directory.",
            ) from None

    def open_entry(self, sha256: str, size: int | None, *, hashed: bool = True) -> BinaryIO | None:
        """The cached file for ``sha256``, opened (never through a symlink) and hashed from that same
        descriptor, positioned at its start; None (and a corrupt entry removed) if absent or wrong.

        ``hashed=False`` (only with a known ``size``) checks the type and size but not the digest: for a
        caller that hashes every byte it reads and refuses a mismatch itself (the bundle writer), so that a
        warm build hashes each byte once."""
        p = self.path(sha256)
        try:
            fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # a symlink where an entry should be: not ours, not used
                p.unlink(missing_ok=True)
                return None
            raise self._unreadable(p, exc) from None
        f = os.fdopen(fd, "rb")
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                f.close()
                return None
            if size is not None and st.st_size != size:
                f.close()
                p.unlink(missing_ok=True)
                return None
            if not hashed and size is not None:
                return f
            h = entry_hash(sha256, st.st_size)
            pump(f.read, h.update)
            if h.hexdigest() != digest_of(sha256):
                f.close()
                p.unlink(missing_ok=True)
                return None
            f.seek(0)
        except OSError as exc:
            f.close()
            raise self._unreadable(p, exc) from None
        return f

    def lookup(self, sha256: str, size: int | None, *, hashed: bool = True) -> Path | None:
        """The cached file for ``sha256`` if present and intact; a corrupt entry is removed.
        ``hashed=False``: see ``open_entry`` (the caller must hash what it reads)."""
        f = self.open_entry(sha256, size, hashed=hashed)
        if f is None:
            return None
        f.close()
        return self.path(sha256)

    @staticmethod
    def _unreadable(p: Path, exc: OSError) -> FetchError:
        return FetchError(
            f"cannot read the cache entry {p}: {exc.strerror or exc}.",
            tip="Check the permissions under LOCKBUILD_CACHE_DIR, or point it at another directory.",
        )

    def new_temp(self, sha256: str) -> Path:
        self.tmp.mkdir(mode=0o700, parents=True, exist_ok=True)
        return self.tmp / f"{digest_of(sha256)}.{os.getpid()}.{secrets.token_hex(4)}.part"

    def put(self, data: bytes, filename: str) -> tuple[str, Path]:
        """Keep ``data`` (a file made here, such as lockbuild's own wheel) as the entry of its sha256, and
        a copy named ``filename`` (uv reads a wheel by a path that ends in its name):
        ``(sha256, the named copy)``."""
        sha256 = hashlib.sha256(data).hexdigest()
        if self.lookup(sha256, len(data)) is None:
            self.commit(self._written(data, sha256), sha256, name=filename)
        named = self.root / "made" / sha256 / filename
        if self.open_named(named, sha256) is None:
            named.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._written(data, sha256).replace(named)
        return sha256, named

    def _written(self, data: bytes, sha256: str) -> Path:
        """``data`` in a fresh temp file (created O_EXCL|O_NOFOLLOW: never an existing file or link)."""
        temp = self.new_temp(sha256)
        with fsio.create_new(temp, mode=0o600) as f:
            f.write(data)
        return temp

    @staticmethod
    def open_named(path: Path, sha256: str) -> bytes | None:
        try:
            data = fsio.read_regular(path, what="a file made by the builder", max_size=MAX_MADE, error=FetchError)
        except (FileNotFoundError, FetchError):
            return None
        return data if hashlib.sha256(data).hexdigest() == sha256 else None

    def discard(self, sha256: str) -> None:
        """Remove an entry found damaged by a reader that hashed it (the next fetch downloads it again)."""
        self.path(sha256).unlink(missing_ok=True)
        if is_sha256(sha256):
            self._metadata_path(sha256).unlink(missing_ok=True)

    def commit(self, temp: Path, sha256: str, *, name: str | None = None) -> Path:
        """Rename the verified ``temp`` into the entry for ``sha256``. ``name``: the file's name; for a
        wheel (``*.whl``) its METADATA is taken out of ``temp`` first and kept (``keep_metadata``), so that
        no later lock opens the wheel to read it; its GPU code is read and kept too (``kernelcache.keep_reading``:
        a damaged library in it raises ``BinaryError``). Release assets are read when a plan's fit is measured."""
        if name is not None and name.endswith(".whl") and is_sha256(sha256):
            self._keep_from(temp, sha256, name)
        if name is not None and name.endswith(".whl"):
            keep_reading(self, temp, sha256, name)
        dest = self.path(sha256)
        dest.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        temp.replace(dest)
        return dest

    def _keep_from(self, temp: Path, sha256: str, name: str) -> None:
        """Keep the METADATA of the verified wheel at ``temp``; one that has none (or is no zip) keeps
        nothing: whoever needs it reads the wheel and gets the wheel's own error."""
        try:
            f, _ = fsio.open_regular(temp, what="a downloaded wheel", max_size=1 << 62, error=FetchError)
        except (OSError, FetchError):
            return
        with f:
            try:
                data = wheel_metadata(f, name)
            except IntegrityError:
                return
        self.keep_metadata(sha256, data)

    def _metadata_path(self, sha256: str) -> Path:
        if not is_sha256(sha256):
            raise IntegrityError(f"expected a sha256 of 64 lowercase hex digits, found {sha256[:80]!r}.")
        return self.kept / sha256[:2] / sha256

    def keep_metadata(self, sha256: str, data: bytes) -> bool:
        """Keep ``data``, the METADATA of the wheel whose sha256 is ``sha256`` (written to a new temp file
        and renamed: never through a link); False when it is not kept (too large, or the directory cannot
        be written: keeping is an optimisation, never an error)."""
        if len(data) > MAX_METADATA_BYTES:
            return False
        head = b" ".join((METADATA_MAGIC, sha256.encode(), hashlib.sha256(data).hexdigest().encode())) + b"\n"
        dest = self._metadata_path(sha256)
        temp = self.new_temp(sha256)
        try:
            with fsio.create_new(temp, mode=0o600) as f:
                f.write(head + data)
            dest.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            temp.replace(dest)
        except OSError:
            temp.unlink(missing_ok=True)
            return False
        return True

    def metadata(self, sha256: str) -> bytes | None:
        """The kept METADATA of the wheel entry ``sha256``, or None: absent, a link, not a regular file,
        owned by another user or writable by others, too large, or not what ``keep_metadata`` wrote for
        this wheel (then removed). Read without opening the wheel.

        Its first line names the wheel's sha256 and the METADATA's own, so a damaged, truncated or misplaced
        file (copied from another wheel's place) is a miss, and the METADATA is read from the wheel again."""
        p = self._metadata_path(sha256)
        try:
            f, size = fsio.open_regular(p, what="kept METADATA", max_size=_METADATA_HEAD + MAX_METADATA_BYTES)
        except (OSError, LockbuildError):  # absent, a link, not a regular file, too large: a miss
            return None
        try:
            with f:
                if fsio.owner_problem(os.fstat(f.fileno()), allow_root=False) is not None:
                    return None  # not written by us: not used, and left for its owner
                raw = fsio.bounded_read(f, size, what="kept METADATA", grew=True)
        except (OSError, LockbuildError):
            return None
        head, newline, data = raw.partition(b"\n")
        want = b" ".join((METADATA_MAGIC, sha256.encode(), hashlib.sha256(data).hexdigest().encode()))
        if not newline or head != want:
            p.unlink(missing_ok=True)
            return None
        return data

    def arrived(self, sha256: str, written: os.stat_result) -> HashedFile | None:
        """The entry just committed for ``sha256``, as a ``HashedFile``, when it is the inode the fetcher
        wrote and hashed (``written``: its ``fstat`` after the last byte) and unchanged since: the same
        device, inode, size and modification time. Its status-change time is taken now (the rename moved
        it), so a reader that finds the same identity on its descriptor reads exactly the bytes hashed."""
        try:
            st = self.path(sha256).lstat()
        except OSError:
            return None
        same = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns) == (
            written.st_dev,
            written.st_ino,
            written.st_size,
            written.st_mtime_ns,
        )
        return HashedFile(self.path(sha256), sha256, FileIdentity.of(st)) if same and stat.S_ISREG(st.st_mode) else None

    def sweep(self, *, older_than: float = STALE_TEMP_SECONDS) -> int:
        """Remove temp files left by fetches that died (untouched for ``older_than`` seconds); returns how many."""
        return fsio.sweep_stale(self.tmp, lambda name: name.endswith(".part"), older_than=older_than)

    def uv_cache(self) -> Path:
        return self.root / "uv"

    def resolutions(self) -> Path:
        """Where uv's resolutions are remembered by their inputs (``memo.ResolutionMemo``)."""
        return self.root / "resolutions"
