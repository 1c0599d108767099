"""PEP 740 provenance at lock time: each locked file's, from the URL its index page names, and the
comparison with the previous lock of the same build (``OUT/VERSION-VARIANT/provenance.json``).

A 404 or null means no attestations; an index whose pages have no ``provenance`` key offers nothing. An
answer is read bounded and strictly typed; what is recorded is the index's word, unverified."""

from __future__ import annotations

import dataclasses
import stat
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from pathlib import Path

import httpx

from lockbuild import documents, fsio
from lockbuild.errors import LockbuildError, RemoteError
from lockbuild.fetch.http import get_json
from lockbuild.fetch.index import IndexFile
from lockbuild.lock import LockedFile
from lockbuild.provenance import (
    MAX_ANSWER_BYTES,
    MAX_RECORD_BYTES,
    RECORD,
    Provenance,
    Recorded,
    changes,
    parse_answer,
    parse_provenance_record,
)

INTEGRITY_JSON = "application/vnd.pypi.integrity.v1+json"


def fetch_provenance(
    client: httpx.Client, listed: IndexFile, *, project: str, sha256: str | None = None
) -> Provenance | None:
    """The provenance of one file as its index entry offers it: None when the entry has no ``provenance``
    key, no attestations when it is null or its URL answers 404; RemoteError for any other answer that
    is not a bounded, well-typed PEP 740 provenance object, or that attests another file than the one
    with ``sha256`` (the locked file's)."""
    if not listed.offers_provenance:
        return None
    if listed.provenance_url is None:
        return Provenance()
    what = f"the provenance of {listed.filename} ({project})"
    missing = f"{what}: {listed.provenance_url} answered 404"
    try:
        data, _ = get_json(
            client,
            listed.provenance_url,
            what=f"asking for {what}",
            headers={"Accept": INTEGRITY_JSON},
            not_found=missing,
            limit=MAX_ANSWER_BYTES,
        )
    except RemoteError as exc:
        if exc.message == missing:  # the 404 get_json gives for this URL: the file has no attestations
            return Provenance()
        raise
    return parse_answer(data, what=f"{what} at {listed.provenance_url}", error=RemoteError, sha256=sha256)


def with_provenance(
    client: httpx.Client,
    files: Sequence[LockedFile],
    listed: Callable[[LockedFile], Sequence[IndexFile]],
    pool: Executor,
) -> tuple[LockedFile, ...]:
    """``files`` with each one's provenance, asked on ``pool``; ``listed(f)`` gives the index entries of
    f's release (a file from a recipe's URL has none, and gets no provenance)."""

    def one(f: LockedFile) -> LockedFile:
        if f.origin == "direct":
            return f
        entry = next((e for e in listed(f) if e.filename == f.filename), None)
        if entry is None:
            return f
        return dataclasses.replace(f, provenance=fetch_provenance(client, entry, project=f.name, sha256=f.sha256))

    return tuple(pool.map(one, files))


def recorded(files: Sequence[LockedFile]) -> tuple[Recorded, ...]:
    return tuple(Recorded(f.name, f.version, f.filename, f.provenance) for f in files)


NO_PREVIOUS = "no previous lock of this build to compare publishers with"


@dataclasses.dataclass(frozen=True)
class Comparison:
    """What comparing a new lock with the previous one said: its warnings, and a note (None when it was
    compared with a previous lock of the same build) saying why it was not."""

    warnings: tuple[str, ...] = ()
    note: str | None = None


def report(engine: str, build: str, previous_dir: Path, files: Sequence[LockedFile]) -> Comparison:
    """The provenance warnings of a new lock against the one ``previous_dir`` holds; the note says when it
    holds none (or one of another engine or build). A record another user could have written (the store
    and trust rule, ``fsio.owner_problem``, on it and the directories above it) or one that cannot be
    read is warned of once, and not compared with."""
    path = previous_dir / RECORD
    if not (path.exists() or path.is_symlink()):
        return Comparison(note=NO_PREVIOUS)
    where = f"the previous lock's {path}"
    for checked in (previous_dir.parent, previous_dir, path):
        try:
            st = checked.lstat() if checked == path else checked.stat()
            # the record itself only when it is a file (read_regular refuses anything else, a link included)
            problem = fsio.owner_problem(st) if checked != path or stat.S_ISREG(st.st_mode) else None
        except OSError as exc:
            problem = f"cannot be examined ({exc.strerror or exc})"
        if problem is not None:
            return Comparison(
                (
                    f"provenance: {checked} {problem}; another user could have written the previous lock's record, "
                    "so this lock is not compared with it (make it this user's and not group- or world-writable)",
                ),
                NO_PREVIOUS,
            )
    try:
        raw = fsio.read_regular(path, what="provenance record of the previous lock", max_size=MAX_RECORD_BYTES)
        data = documents.loads_json(raw, what=where, max_bytes=MAX_RECORD_BYTES, error=LockbuildError)
        was_engine, was_build, before = parse_provenance_record(data, where, LockbuildError)
    except (OSError, LockbuildError) as exc:
        message = exc.message if isinstance(exc, LockbuildError) else str(exc)
        return Comparison((f"provenance: {message.rstrip('.')}; this lock is not compared with it",), NO_PREVIOUS)
    if (was_engine, was_build) != (engine, build):
        return Comparison(note=f"{NO_PREVIOUS} ({path} is of {was_engine[:60]} {was_build[:60]})")
    return Comparison(tuple(changes(before, recorded(files))))
