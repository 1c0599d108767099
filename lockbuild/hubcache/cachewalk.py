"""One repo's folder of the Hugging Face cache against its signed records, walked by descriptor.

Every folder is opened ``O_NOFOLLOW`` from its parent's descriptor and every link read by ``readlinkat``:
a folder swapped for a link, a link to anything but the blob its record names, and any entry no record
lists (a planted ``pytorch_model.bin``, a ``refs/`` branch) is a ``Stray``."""

from __future__ import annotations

import contextlib
import os
import re
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from lockbuild.bundle.manifestparse import parse_manifest
from lockbuild.bundle.modelinfo import ModelTable
from lockbuild.errors import LockbuildError
from lockbuild.fsio import (
    kind_of,
    list_dir,
    lstat_at,
    open_dir,
    open_under,
    opened_dir,
    read_link_at,
    read_regular,
    remove_at,
)
from lockbuild.install.swap import LOCK_NAME, STAGING_SUFFIX
from lockbuild.limits import DEFAULT_LIMITS
from lockbuild.trust.scheme import SCHEME

RECORDS = ".lockbuild"
_TOP = frozenset(("blobs", "snapshots", "refs", RECORDS, LOCK_NAME))
_RECORD = re.compile(rf"([0-9a-f]{{40}})(\.toml|{re.escape(SCHEME.suffix)})")


def snapshot_link(repo_path: str, cache_name: str) -> str:
    """The relative link a snapshot file is: from snapshots/<commit>/<path> to blobs/<name>."""
    return "../" * (2 + repo_path.count("/")) + "blobs/" + cache_name


@dataclass(frozen=True)
class Stray:
    """An entry of the repo's folder that its signed records do not account for."""

    rel: str  # its path under models--ORG--NAME
    problem: str  # what it is, and what the records say instead
    present: bool = True  # False: something the records list is missing (nothing to remove)


def _open(name: str, dir_fd: int) -> int | str:
    """A folder of an opened folder, never through a link; else what it is instead, in words."""
    st = lstat_at(name, dir_fd)
    if st is None:
        return "is missing"
    if not stat.S_ISDIR(st.st_mode):
        return f"is {kind_of(st.st_mode)}, not a folder"
    try:
        return open_dir(name, dir_fd=dir_fd)
    except OSError as exc:  # swapped for a link since the lstat, or unreadable
        return f"cannot be opened as a folder ({exc.strerror or exc})"


@contextlib.contextmanager
def _folder(name: str, dir_fd: int, rel: str, strays: list[Stray]) -> Iterator[int | None]:
    """The folder ``name`` opened by descriptor, or None with why it is not one recorded in ``strays``."""
    fd = _open(name, dir_fd)
    if isinstance(fd, str):
        strays.append(Stray(rel, fd, present=fd != "is missing"))
        yield None
        return
    try:
        yield fd
    finally:
        os.close(fd)


def kept_tables(repo_fd: int, folder: str) -> tuple[list[ModelTable], list[Stray]]:
    """The [model] tables of the records kept in ``.lockbuild/`` (read by descriptor, not judged: a caller
    that needs trust judges each record), and the entries there that are no record of this repo."""
    tables: list[ModelTable] = []
    strays: list[Stray] = []
    with _folder(RECORDS, repo_fd, RECORDS, strays) as records:
        for name in _entries(records):
            rel = f"{RECORDS}/{name}"
            m = _RECORD.fullmatch(name)
            if m is None:
                strays.append(Stray(rel, "is not in any signed record"))
            elif m.group(2) == ".toml" and records is not None:
                why = _record_problem(name, m.group(1), records, folder, tables)
                if why:
                    strays.append(Stray(rel, why))
    return tables, strays


def _entries(fd: int | None) -> list[str]:
    return list_dir(fd) if fd is not None else []


def _record_problem(name: str, commit: str, records: int, folder: str, tables: list[ModelTable]) -> str | None:
    try:
        data = read_regular(name, what="kept record", max_size=DEFAULT_LIMITS.max_manifest, dir_fd=records)
        table = parse_manifest(data).model
    except (OSError, LockbuildError) as exc:
        return f"is not a model bundle's manifest ({str(exc)[:160]})"
    if table is None or table.commit != commit:
        return "is not the record of the commit it is named by"
    if table.folder != folder:
        return f"is the record of {table.repo}, whose folder is {table.folder}, not {folder}"
    tables.append(table)
    return None


def survey(repo_fd: int, tables: Sequence[ModelTable]) -> list[Stray]:
    """Every entry of the repo's folder (opened as ``repo_fd``) that ``tables`` do not account for, parents
    before what is under them: the folder's own entries, ``blobs/``, ``refs/`` and each snapshot."""
    strays: list[Stray] = []
    commits = {t.commit: t for t in tables}
    for name in list_dir(repo_fd):
        if name not in _TOP and not name.endswith(STAGING_SUFFIX):
            strays.append(Stray(name, "is not in any signed record"))
    blobs = {f.cache_name for t in tables for f in t.files}
    with _folder("blobs", repo_fd, "blobs", strays) as fd:
        for name in _entries(fd):
            st = lstat_at(name, fd) if fd is not None else None
            if name not in blobs:
                strays.append(Stray(f"blobs/{name}", "is not in any signed record (the blob of no file)"))
            elif st is not None and not stat.S_ISREG(st.st_mode):
                strays.append(Stray(f"blobs/{name}", f"is {kind_of(st.st_mode)}, not a regular file"))
    with _folder("refs", repo_fd, "refs", strays) as fd:
        for name in _entries(fd):
            if name != "main":
                strays.append(Stray(f"refs/{name}", "is not in any signed record (only refs/main is written)"))
            elif fd is not None:
                strays += _main_problem(fd, commits)
    with _folder("snapshots", repo_fd, "snapshots", strays) as fd:
        if fd is not None:
            for name in list_dir(fd):
                if name not in commits:
                    strays.append(Stray(f"snapshots/{name}", "is not in any signed record (no record of that commit)"))
            for commit, table in sorted(commits.items()):
                rel = f"snapshots/{commit}"
                with _folder(commit, fd, rel, strays) as snap:
                    if snap is not None:
                        _walk(snap, rel, "", _links(table), strays)
    return strays


def _main_problem(refs: int, commits: dict[str, ModelTable]) -> list[Stray]:
    try:
        ref = read_regular("main", what="refs/main", max_size=64, dir_fd=refs).decode("ascii", "replace")
    except (OSError, LockbuildError) as exc:
        return [Stray("refs/main", f"cannot be read as a commit ({str(exc)[:160]})")]
    if ref not in commits:
        return [Stray("refs/main", f"names {ref[:64]!r}, a commit of no signed record")]
    return []


def _links(table: ModelTable) -> dict[str, str]:
    return {f.repo_path: snapshot_link(f.repo_path, f.cache_name) for f in table.files}


def _walk(fd: int, top: str, under: str, links: dict[str, str], strays: list[Stray]) -> None:
    """The snapshot folder ``fd`` (``under`` inside it): each link readlinkat-ed and compared, each folder
    opened O_NOFOLLOW, anything else a stray; then what the record lists that is not there."""
    prefix = f"{under}/" if under else ""
    folders = {p[len(prefix) :].partition("/")[0] for p in links if p.startswith(prefix) and "/" in p[len(prefix) :]}
    names = list_dir(fd)
    for name in names:
        path, rel = prefix + name, f"{top}/{prefix}{name}"
        if path in links:
            got = read_link_at(name, fd)
            if got != links[path]:
                st = lstat_at(name, fd)
                what = f"a link to {got!r}" if got is not None else _kind(st.st_mode) if st else "missing"
                strays.append(Stray(rel, f"is {what}; its record says a link to {links[path]!r}"))
        elif name in folders:
            with _folder(name, fd, rel, strays) as sub:
                if sub is not None:
                    _walk(sub, top, path, links, strays)
        else:
            strays.append(Stray(rel, "is not in the signed record"))
    for path in sorted(p for p in links if p.startswith(prefix) and "/" not in p[len(prefix) :]):
        if path[len(prefix) :] not in names:
            strays.append(Stray(f"{top}/{path}", f"is missing; its record says a link to {links[path]!r}", False))
    for name in sorted(folders - set(names)):
        strays.append(Stray(f"{top}/{prefix}{name}", "is missing; its record lists files in it", False))


def _kind(mode: int) -> str:
    return "a regular file" if stat.S_ISREG(mode) else kind_of(mode)


def remove_strays(repo_fd: int, strays: Sequence[Stray]) -> list[str]:
    """Remove each present stray, relative to its parent folder walked from ``repo_fd`` without following a
    link (a stray's parents are folders the survey opened); the paths removed."""
    removed = []
    for s in strays:
        if not s.present:
            continue
        parent, _, leaf = s.rel.rpartition("/")
        try:
            fd = open_under(repo_fd, parent)
        except OSError:
            continue  # under a stray removed already
        try:
            remove_at(fd, leaf)
        finally:
            os.close(fd)
        removed.append(s.rel)
    return removed


def current_build(repo_fd: int) -> tuple[str, int] | None:
    """The commit ``refs/main`` names and the signed serial its kept record holds (None when either is
    absent or unreadable: nothing installed to compare with)."""
    try:
        with opened_dir("refs", dir_fd=repo_fd) as refs:
            commit = read_regular("main", what="refs/main", max_size=64, dir_fd=refs).decode("ascii")
        if not _RECORD.fullmatch(commit + ".toml"):
            return None
        with opened_dir(RECORDS, dir_fd=repo_fd) as records:
            data = read_regular(
                f"{commit}.toml", what="kept record", max_size=DEFAULT_LIMITS.max_manifest, dir_fd=records
            )
        return commit, parse_manifest(data).serial
    except (OSError, UnicodeError, LockbuildError):
        return None
