"""The one extraction: every member of a signed manifest, from any source, checked the same way.

For each listed member in turn, a piece of exactly that name and size whose bytes have exactly its sha256;
unlisted, missing, repeated, reordered, longer or shorter members are refused, whatever the source. Files
are made only through ``fsio`` (a store's blob hard-linked where it can be, and hashed as linked)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol, TypeVar, runtime_checkable

from lockbuild.bundle.manifest import Manifest, Member
from lockbuild.digest import BackgroundHash, pump, reading_into
from lockbuild.errors import IntegrityError, LockbuildError
from lockbuild.fsio import create_under, link_under
from lockbuild.limits import MiB
from lockbuild.progress import Progress

TIP = "The bundle is damaged or was altered; do not install it. Fetch it again from its publisher."
INLINE = MiB  # a smaller member is hashed on the reader's thread; a larger one beside it
DEPTH = 4  # 1 MiB pieces a background hash may lag behind the reader
LINKED_AHEAD = 64  # linked members (each an open file) whose hash may still be running
HASHERS = min(os.cpu_count() or 1, 16)  # threads hashing linked members (more outrun any disk)

Update = Callable[[bytes | memoryview], None]
T = TypeVar("T")


class Piece(Protocol):
    """One member as a source holds it. ``absent``: the source knows the member but does not hold its
    bytes (a delta's member that neither it nor the store carries)."""

    @property
    def name(self) -> str: ...

    @property
    def size(self) -> int: ...

    @property
    def absent(self) -> bool: ...

    def pump(self, dst: BinaryIO | None, update: Update, advance: Callable[[int], None]) -> int:
        """Feed the member's bytes to ``update`` (and ``dst``): the count seen, at most ``size + 1``."""
        ...

    def skip(self) -> None:
        """Pass over the member unread (a stream source reads past it)."""
        ...


@runtime_checkable
class Linkable(Protocol):
    """A piece held as a whole regular file that may be hard-linked into the destination."""

    def link_from(self) -> tuple[int, str] | None:
        """The file as (an opened directory, its name there); None: copy it."""
        ...


@dataclass(frozen=True)
class Extracted:
    manifest: Manifest
    written: tuple[Member, ...]  # members written under ``dest``
    absent: tuple[Member, ...]  # members the source does not hold (only with ``allow_absent``)


def _bad(message: str, tip: str = TIP) -> IntegrityError:
    return IntegrityError(message, tip=tip)


def misplaced(name: str, done: set[str], listed: set[str], expected: str) -> str:
    if name in done:
        return f"refused member {name!r}: it appears twice in the bundle ({expected})."
    if name not in listed:
        return f"refused member {name!r}: it is not listed in the manifest ({expected})."
    return f"member {name!r} is out of order: {expected}."


def make_dest(dest: Path | None) -> None:
    """The (staging) directory members are written into, made if absent."""
    if dest is None:
        return
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LockbuildError(f"cannot make the destination {dest}: {exc.strerror or exc}.") from None


def _create(dest: Path, path: str) -> BinaryIO:
    return _making(dest, path, lambda: create_under(dest, path))


def _making(dest: Path, path: str, make: Callable[[], T]) -> T:
    """``make()`` a member's file under ``dest`` (created or linked), its failures said the one way."""
    try:
        return make()
    except FileExistsError:
        raise _bad(f"refused member {path!r}: {dest / path} already exists.") from None
    except (NotADirectoryError, IsADirectoryError) as exc:
        raise _bad(f"refused member {path!r}: {exc.filename or dest} is not a plain directory.") from None
    except OSError as exc:
        if exc.errno == 40:  # ELOOP: a link on the way
            raise _bad(f"refused member {path!r}: a directory on the way is a link, not a plain directory.") from None
        raise LockbuildError(
            f"cannot write {path} into {dest}: {exc.strerror or exc}.",
            tip="Check the free space and permissions of the destination, then run it again.",
        ) from None


def extract(
    manifest: Manifest,
    pieces: Iterator[Piece],
    *,
    dest: Path | None = None,
    want: Callable[[Member], bool] | None = None,
    progress: Progress | None = None,
    allow_absent: bool = False,
    absent_tip: str = TIP,
    damage_tip: str = TIP,
    where: str = "the bundle",
    checked: Callable[[Member], None] | None = None,
) -> Extracted:
    """Check every member of ``manifest`` against ``pieces``; with ``dest``, write each member that
    ``want`` accepts (all, without ``want``) at its path under ``dest``. A member ``want`` declines is
    passed over unread (its bytes are not used). ``checked`` is told each written member once it is
    held to the manifest (its size and sha256), in order, while the rest are still being checked.
    The caller owns ``dest`` and removes it on failure."""
    progress = progress or Progress.quiet()
    listed = {m.path for m in manifest.members}
    done: set[str] = {"bundle.toml"}
    written: list[Member] = []
    absent: list[Member] = []
    linked = _Linked(damage_tip, progress, checked)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="lockbuild-sha256") as pool:
        try:
            for i, member in enumerate(manifest.members):
                piece = next(pieces, None)
                if piece is None:
                    left = manifest.members[i : i + 3]
                    raise _bad(
                        f"{where} ends before {len(manifest.members) - i} listed member(s): "
                        + ", ".join(m.path for m in left)
                        + "."
                    )
                if piece.name != member.path:
                    raise _bad(misplaced(piece.name, done, listed, f"expected {member.path!r} next"))
                if piece.size != member.size:
                    raise _bad(f"member {piece.name!r} is {piece.size} bytes; the manifest says {member.size}.")
                done.add(member.path)
                if piece.absent:
                    absent.append(member)
                    continue
                if want is not None and not want(member):
                    piece.skip()
                    progress.advance(member.size)
                    progress.file_done()
                    continue
                if dest is not None and isinstance(piece, Linkable) and linked.link(piece, member, dest):
                    written.append(member)  # checked by linked.check() below, before anything returns
                    continue
                out = _create(dest, member.path) if dest is not None else None
                try:
                    n, digest = _pump(piece, out, member.size, pool, progress.advance)
                finally:
                    if out is not None:
                        out.close()
                _check(member, n, digest, damage_tip)
                if dest is not None:
                    written.append(member)
                    if checked is not None:
                        checked(member)
                progress.file_done()
            extra = next(pieces, None)
            if extra is not None:
                raise _bad(misplaced(extra.name, done, listed, "expected the end of the archive"))
            linked.check()
        finally:
            linked.close()
    if absent and not allow_absent:
        more = f" and {len(absent) - 5} more" if len(absent) > 5 else ""
        raise IntegrityError(
            f"{where} needs {len(absent)} member(s) the store lacks: "
            + ", ".join(m.path for m in absent[:5])
            + more
            + ".",
            tip=absent_tip,
        )
    return Extracted(manifest, tuple(written), tuple(absent))


def _check(member: Member, n: int, digest: str, damage_tip: str) -> None:
    """A member's bytes as seen (their count and sha256) against the signed manifest."""
    if n != member.size:
        raise _bad(
            f"member {member.path!r} is {'longer' if n > member.size else 'shorter'} than the"
            f" {member.size} bytes the signed manifest says.",
            damage_tip,
        )
    if digest != member.sha256:
        raise _bad(f"member {member.path!r} has sha256 {digest}; the manifest says {member.sha256}.", damage_tip)


def _hash_file(f: BinaryIO, size: int) -> tuple[int, str]:
    """(bytes seen, at most ``size + 1``; sha256 of the first ``size``) of an open file, which it closes.
    hashlib and the reads release the GIL on 1 MiB buffers, so threads hash in parallel."""
    with f:
        h = hashlib.sha256()
        n = pump(reading_into(f), h.update, limit=size)
        return n, h.hexdigest()


class _Linked:
    """The members :func:`extract` hard-linked into its destination, each hashed on a pool across the
    cores from the linked file itself; :meth:`check` holds each to the manifest, in the manifest's order."""

    def __init__(self, damage_tip: str, progress: Progress, checked: Callable[[Member], None] | None) -> None:
        self.damage_tip = damage_tip
        self.progress = progress
        self.told = checked
        self.pool: ThreadPoolExecutor | None = None
        self.pending: list[tuple[Member, Future[tuple[int, str]], BinaryIO]] = []
        self.checked = 0  # pending[:checked] are held to the manifest already

    def link(self, piece: Linkable, member: Member, dest: Path) -> bool:
        """Link the piece's file at the member's path under ``dest`` and start hashing it; False: not
        linked (nothing was made), the caller copies it."""
        src = piece.link_from()
        if src is None:
            return False
        f = _making(dest, member.path, lambda: link_under(src[0], src[1], dest, member.path))
        if f is None:
            return False
        if self.pool is None:
            self.pool = ThreadPoolExecutor(max_workers=HASHERS, thread_name_prefix="lockbuild-linked")
        self.pending.append((member, self.pool.submit(_hash_file, f, member.size), f))
        self.check(leave=LINKED_AHEAD)  # bounded: open files and unchecked work
        return True

    def check(self, leave: int = 0) -> None:
        """Hold the linked members to the manifest, in order, until at most ``leave`` are unchecked."""
        while len(self.pending) - self.checked > leave:
            member, fut, _ = self.pending[self.checked]
            self.checked += 1
            try:
                n, digest = fut.result()
            except OSError as exc:
                raise LockbuildError(
                    f"cannot read {member.path} as linked: {exc.strerror or exc}.",
                    tip="Check the destination's file system, then run it again.",
                ) from None
            _check(member, n, digest, self.damage_tip)
            if self.told is not None:
                self.told(member)
            self.progress.advance(member.size)
            self.progress.file_done()

    def close(self) -> None:
        """Stop what has not started (after a refusal) and close what it would have read."""
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
        for _, fut, f in self.pending:
            if fut.cancelled():
                f.close()


def _pump(
    piece: Piece, out: BinaryIO | None, size: int, pool: ThreadPoolExecutor, advance: Callable[[int], None]
) -> tuple[int, str]:
    try:
        if size < INLINE:
            h = hashlib.sha256()
            n = piece.pump(out, h.update, advance)
            return n, h.hexdigest()
        sha = BackgroundHash("sha256", depth=DEPTH, pool=pool)
        n = piece.pump(out, sha.update, advance)
        return n, sha.hexdigest()
    except OSError as exc:
        raise LockbuildError(
            f"cannot write {piece.name}: {exc.strerror or exc}.",
            tip="Check the free space and permissions of the destination, then run it again.",
        ) from None


@dataclass
class FilePiece:
    """A member held as a whole file (a store's blob): opened lazily, read at most ``size + 1`` bytes."""

    name: str
    size: int
    opener: Callable[[], BinaryIO]
    absent: bool = False
    link: tuple[int, str] | None = None  # the same file as (an opened directory, its name), to hard-link

    def link_from(self) -> tuple[int, str] | None:
        return self.link

    def pump(self, dst: BinaryIO | None, update: Update, advance: Callable[[int], None]) -> int:
        try:
            f = self.opener()
        except LockbuildError as exc:  # named by the member it was to be
            raise type(exc)(f"{self.name}: {exc.message}", tip=exc.tip) from None
        with f:
            return pump(f.read, update, *(() if dst is None else (dst.write,)), limit=self.size, advance=advance)

    def skip(self) -> None:
        return None


@dataclass
class AbsentPiece:
    name: str
    size: int
    absent: bool = True

    def pump(self, dst: BinaryIO | None, update: Update, advance: Callable[[int], None]) -> int:
        raise IntegrityError(f"internal: {self.name} is absent and has no bytes to read.")

    def skip(self) -> None:
        return None
