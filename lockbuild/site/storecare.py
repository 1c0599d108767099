"""Looking after a site store: who may own it and the directories above it, re-hash and check it
(verify), drop what nothing references (gc), and clear what killed imports left behind. The caller holds
the store's lock for the last three."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from lockbuild.errors import LockbuildError
from lockbuild.fsio import (
    ancestor_problem,
    create_new,
    fsync_dir,
    list_dir,
    lstat_at,
    owner_problem,
    read_regular,
    remove_at,
)
from lockbuild.site.storemodel import HEX, Damage, StoreError

if TYPE_CHECKING:
    from lockbuild.site.storage import Store

MARK = "lockbuild-store"
MARK_TEXT = b"lockbuild store 1\n"


def check_mark(fd: int, root: Path, *, create: bool) -> bool:
    """Check the store's mark, or write it in an empty directory (True: this call wrote it). Nodes that
    share one store may all create it at once: a mark another process is writing (a prefix of the text)
    is read again, for up to 2 s, until it is whole."""
    for _ in range(100):
        try:
            text = read_regular(
                MARK, what="store mark", max_size=64, error=StoreError, dir_fd=fd, shown=str(root / MARK)
            )
        except FileNotFoundError:
            if not create or [n for n in list_dir(fd) if n != MARK]:
                raise StoreError(
                    f"{root} is not a lockbuild store (no {MARK} file).",
                    tip="Give --store an empty directory (import makes the store) or one lockbuild made.",
                ) from None
            with contextlib.suppress(FileExistsError), create_new(MARK, dir_fd=fd) as f:
                f.write(MARK_TEXT)
                os.fsync(f.fileno())
                return True
            continue  # another process made it first: read what it wrote
        if text == MARK_TEXT:
            return False
        if not (create and MARK_TEXT.startswith(text)):
            break
        time.sleep(0.02)
    raise StoreError(f"{root / MARK} is not a format-1 lockbuild store mark.")


def check_owner(root: Path, st: os.stat_result, where: str) -> None:
    """The rule --root has: a store (and each directory in it) is owned by this user or root and
    writable by no one else, or another user could plant, swap or delete what nodes install."""
    problem = owner_problem(st)
    if problem:
        raise StoreError(
            f"refused the store {root}: {where} {problem}, so another user could change what it holds.",
            tip=f"Make {where} owned by the user running lockbuild (or root) and writable by "
            "no one else (chown, chmod go-w).",
        )


def check_ancestors(root: Path) -> None:
    """The rule --root has for the directories above it (``fsio.ancestor_problem``): owned by root or
    this user, writable by no one else unless sticky. Otherwise another user could rename the store
    away and put a tree of theirs in its place while lockbuild imports into it or installs from it."""
    try:
        found = ancestor_problem(root)
    except OSError as exc:
        raise StoreError(f"cannot examine {exc.filename}, above the store {root}: {exc.strerror or exc}.") from None
    if found is None:
        return
    fix = (
        "Put the store under directories owned by root or by the user running lockbuild"
        if found.owner
        else "Put the store under directories only root (or the user running lockbuild) can write, or make the "
        f"shared one sticky (chmod +t {found.directory})"
    )
    raise StoreError(
        f"refused the store {root}: the directory {found.directory} above it {found.problem}, so "
        "another user could swap the store for a tree of theirs while lockbuild works in it.",
        tip=f"{fix}; see docs/site-administrators.md.",
    )


def clear_tmp(store: Store) -> None:
    """Remove what killed imports left in tmp/ (hold the exclusive lock); partial blobs stay,
    so an interrupted pull resumes. Listed and deleted relative to tmp/'s descriptor: a tmp/ swapped
    for a link after it was opened cannot redirect the deletion elsewhere."""
    for name in list_dir(store.tmp):
        if not name.endswith(".partial"):
            remove_at(store.tmp, name)


def verify(store: Store, *, remove: bool = False) -> list[Damage]:
    """Re-hash every blob; check every build's manifest and that its blobs are all present.
    With ``remove`` (hold the exclusive lock), a damaged blob is deleted, so that importing or pulling
    the build again puts it back (they fetch only what is missing)."""
    damage: list[Damage] = []
    for name in store.blob_names():
        rel = f"blobs/sha256/{name}"
        if not HEX.fullmatch(name):
            damage.append(Damage(rel, "a file that is not named by a sha256"))
            continue
        try:
            got = store.rehash(name)
        except LockbuildError as exc:
            damage.append(Damage(rel, exc.message))
            got = ""
        if got != name:
            if got:
                damage.append(Damage(rel, f"its content has sha256 {got}"))
            if remove:
                _remove_blob(store, name)
    for ref in store.refs():
        try:
            b = store.build(ref)
        except LockbuildError as exc:
            damage.append(Damage(f"builds/{ref}", exc.message))
            continue
        for m in b.manifest.members:
            try:
                if not store.has_blob(m.sha256, m.size):
                    damage.append(Damage(f"builds/{ref}", f"missing blob {m.sha256} for {m.path}"))
            except LockbuildError as exc:
                damage.append(Damage(f"builds/{ref}", f"{m.path}: {exc.message}"))
    return damage


def _remove_blob(store: Store, name: str) -> None:
    remove_at(store.blobs, name)  # by descriptor: a file, or a directory planted under a blob's name


def gc(store: Store) -> tuple[int, int]:
    """Remove blobs no build references, and tmp/ leftovers (hold the exclusive lock).
    Returns (blobs removed, bytes freed). Refuses if any build cannot be read: a build that
    cannot be read cannot say which blobs it needs."""
    keep: set[str] = set()
    for b in store.builds_all():
        keep.update(m.sha256 for m in b.manifest.members)
    removed = freed = 0
    for name in store.blob_names():
        if name in keep:
            continue
        st = lstat_at(name, store.blobs)
        remove_at(store.blobs, name)
        removed += 1
        freed += st.st_size if st is not None else 0
    for name in list_dir(store.tmp):
        remove_at(store.tmp, name)  # by descriptor, never by a path built after the listing
    fsync_dir(store.blobs)
    return removed, freed
