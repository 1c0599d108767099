"""The safe streaming bundle reader.

Before anything is decompressed, the zstd frame's structure is walked (bundle/zstdframe.py). Then the
tar stream is read member by member by the strict reader (bundle/tar.py): each member must be a regular
file named exactly as the manifest's next entry, of the listed size and sha256. Links, devices, FIFOs,
directories, unlisted, missing, duplicate, reordered or oversized members, damaged headers, non-zero
padding and data after the archive's end fail the whole read; paths are refused, never rewritten
(bundle/paths.py). Format problems raise IntegrityError; a destination that cannot be written raises
the family's root, LockbuildError. docs/bundle-format.md describes the format.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO, NamedTuple

from lockbuild.bundle.manifest import MANIFEST, Manifest, Member, parse_manifest
from lockbuild.bundle.tar import MAX_TRAILER, TarHeader, TarReader, check_header, copy_member, stream_member
from lockbuild.bundle.zstdframe import TIP, Hashing, check_zstd_frame, decompressed
from lockbuild.digest import BackgroundHash
from lockbuild.errors import IntegrityError, LockbuildError
from lockbuild.fsio import create_under, open_regular
from lockbuild.limits import DEFAULT_LIMITS, Limits
from lockbuild.progress import Progress

# The strict reader's pieces, for the site wing's readers (a delta is read by the same rules).
_check_header = check_header
_copy = copy_member
__all__ = ["MAX_TRAILER", "Head", "TarReader", "_check_header", "_copy", "_create", "_open_tar", "check_zstd_frame",
           "read_bundle", "read_head", "read_head_raw"]  # fmt: skip


class Head(NamedTuple):
    """The first two members: the manifest (parsed, and the exact bytes the bundle carries, which is what
    a signature's manifest-sha256 covers) and the recipe."""

    manifest: Manifest
    manifest_bytes: bytes
    recipe: bytes


def _bad(message: str) -> IntegrityError:
    return IntegrityError(message, tip=TIP)


def _open_tar(f: BinaryIO | Hashing, limits: Limits) -> TarReader:
    """The decompressed tar stream, as a strict tar reader."""
    return TarReader(decompressed(f, limits))


def _create(dest: Path, path: str) -> BinaryIO:
    """A new file at ``path`` under ``dest``: every directory on the way is made here or is a plain
    directory already (never a link, walked by descriptor), and the file must not exist."""
    try:
        return create_under(dest, path)
    except FileExistsError:
        raise _bad(f"refused member {path!r}: {dest / path} already exists.") from None
    except (NotADirectoryError, IsADirectoryError) as exc:
        raise _bad(f"refused member {path!r}: {exc.filename or dest} is not a plain directory.") from None
    except OSError as exc:
        if exc.errno == 40:  # ELOOP: a link on the way
            raise _bad(f"refused member {path!r}: a directory on the way is a link, not a plain directory.") from None
        raise


def _open(path: Path, limits: Limits) -> BinaryIO:
    """The bundle, as a regular file of bounded size: a FIFO, a device or a link (say, one swapped in
    after the signatures were checked) is refused, never read."""
    try:
        f, _ = open_regular(path, what="bundle", max_size=limits.max_bundle, error=IntegrityError)
    except FileNotFoundError:
        raise LockbuildError(f"cannot read the bundle {path}: No such file or directory.") from None
    return f


def _read_manifest(tar: TarReader, limits: Limits) -> tuple[Manifest, bytes]:
    first = tar.next()
    if first is None or first.name != MANIFEST:
        found = repr(first.name) if first else "missing"
        raise _bad(f"the bundle's first member is {found}; expected {MANIFEST}.")
    check_header(first, limits)
    if first.size > limits.max_manifest:
        raise _bad(f"the manifest is {first.size} bytes; expected at most {limits.max_manifest}.")
    raw = io.BytesIO()
    copy_member(tar, first, raw, Progress.quiet())
    return parse_manifest(raw.getvalue(), limits), raw.getvalue()


def read_bundle(
    path: Path,
    *,
    dest: Path | None = None,
    limits: Limits = DEFAULT_LIMITS,
    progress: Progress | None = None,
    on_manifest: Callable[[Manifest, bytes], None] | None = None,
    expect_sha256: str | None = None,
) -> Manifest:
    """Check every member of the bundle against its manifest; with ``dest``, write them there.

    ``on_manifest`` runs once the manifest is read, before any other member, with the parsed manifest and
    its exact bytes (what a signed manifest-sha256 covers): a place to refuse early. With it, what the
    caller uses (the manifest, the members) is checked against what it trusts, whatever file is read.
    With ``expect_sha256``, the raw bytes read must also be that file, hashed again as they are read:
    for ``lockbuild sign``, whose signature asserts a file digest it computed on an earlier pass.
    The caller owns ``dest`` (an empty staging directory) and removes it if this raises.
    """
    progress = progress or Progress.quiet()
    if dest is not None:
        try:
            dest.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise LockbuildError(f"cannot make the destination {dest}: {exc.strerror or exc}.") from None
    with _open(path, limits) as raw_file, _Digests() as digests:
        check_zstd_frame(raw_file, limits)
        f = Hashing(raw_file) if expect_sha256 is not None else None
        tar = _open_tar(f or raw_file, limits)
        manifest, manifest_bytes = _read_manifest(tar, limits)
        if on_manifest is not None:
            on_manifest(manifest, manifest_bytes)
        progress.start("checking" if dest is None else "unpacking", total_bytes=manifest.unpacked_size,
                       files=len(manifest.members))  # fmt: skip
        listed = {m.path for m in manifest.members}
        done = {MANIFEST}
        for i, member in enumerate(manifest.members):
            h = tar.next()
            if h is None:
                missing = ", ".join(m.path for m in manifest.members[i : i + 3])
                raise _bad(f"the bundle ends before {len(manifest.members) - i} listed member(s): {missing}.")
            check_header(h, limits)
            if h.name != member.path:
                raise _bad(_misplaced(h.name, done, listed, f"expected {member.path!r} next"))
            if h.size != member.size:
                raise _bad(f"member {h.name!r} is {h.size} bytes; the manifest says {member.size}.")
            _extract_one(tar, h, member, dest, progress, digests)
            done.add(h.name)
            progress.file_done()
        extra = tar.next()
        if extra is not None:
            raise _bad(_misplaced(extra.name, done, listed, "expected the end of the archive"))
        got = f.finish() if f is not None else None
    if expect_sha256 is not None and got != expect_sha256:
        raise _bad(f"the bundle changed while it was read: sha256 {got}, expected {expect_sha256}.")
    progress.finish()
    return manifest


def _misplaced(name: str, done: set[str], listed: set[str], expected: str) -> str:
    if name in done:
        return f"refused member {name!r}: it appears twice in the bundle ({expected})."
    if name not in listed:
        return f"refused member {name!r}: it is not listed in the manifest ({expected})."
    return f"member {name!r} is out of order: {expected}."


class _Digests:
    """Members' sha256 computed on one worker thread, fed in order and at most DEPTH pieces behind the
    reader, so hashing overlaps decompression and writing (hashlib releases the GIL on large updates).
    The pieces are read-only views of the decompressor's chunks: nothing is copied for the hash."""

    DEPTH = 4  # 1 MiB pieces: what the hash may lag, and what it holds
    INLINE = 1 << 20  # a smaller member is hashed on the reader's thread

    def __enter__(self) -> _Digests:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lockbuild-sha256")
        return self

    def __exit__(self, *_: object) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def member(self, tar: TarReader, h: TarHeader, dst: BinaryIO | None, progress: Progress) -> str:
        """Stream one member to ``dst``; its sha256."""
        if h.size < self.INLINE:
            return copy_member(tar, h, dst, progress)
        sha = BackgroundHash("sha256", depth=self.DEPTH, pool=self._pool)
        stream_member(tar, h, dst, progress, sha.update)
        return sha.hexdigest()


def _extract_one(
    tar: TarReader, h: TarHeader, member: Member, dest: Path | None, progress: Progress, digests: _Digests
) -> None:
    if dest is None:
        digest = digests.member(tar, h, None, progress)
    else:
        try:
            with _create(dest, member.path) as out:
                digest = digests.member(tar, h, out, progress)
        except OSError as exc:
            raise LockbuildError(
                f"cannot write {member.path} into {dest}: {exc.strerror or exc}.",
                tip="Check the free space and permissions of the destination, then run it again.",
            ) from None
    if digest != member.sha256:
        raise _bad(f"member {member.path!r} has sha256 {digest}; the manifest says {member.sha256}.")


def read_head(path: Path, limits: Limits = DEFAULT_LIMITS) -> tuple[Manifest, bytes]:
    """The manifest and the recipe (the first two members, the recipe checked against its digest);
    the rest of the bundle is not read."""
    head = read_head_raw(path, limits)
    return head.manifest, head.recipe


def read_head_raw(path: Path, limits: Limits = DEFAULT_LIMITS) -> Head:
    """As :func:`read_head`, with the manifest's exact bytes."""
    with _open(path, limits) as f:
        check_zstd_frame(f, limits)
        tar = _open_tar(f, limits)
        manifest, manifest_bytes = _read_manifest(tar, limits)
        if not manifest.members or manifest.members[0].path != "recipe.toml":
            raise _bad("the manifest does not list recipe.toml first.")
        want = manifest.members[0]
        second = tar.next()
        if second is None or second.name != want.path or second.size != want.size or want.size > limits.max_manifest:
            raise _bad("the bundle's second member is not the recipe the manifest lists.")
        check_header(second, limits)
        recipe = io.BytesIO()
        if copy_member(tar, second, recipe, Progress.quiet()) != want.sha256:
            raise _bad("the bundle's recipe.toml does not match the manifest's sha256.")
        return Head(manifest, manifest_bytes, recipe.getvalue())
