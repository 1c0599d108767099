"""``lockbuild store index``: a static package index of the store's wheels and sdists, written whole
beside --out and swapped into place (the I/O; the pages are rendered by ``site/pyindex.py``).

Every file is checked against the signed manifest where it lies, nothing is written through a link, and a
reader sees the old index or the new one (:func:`export_index`)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from lockbuild import fsio, wheelfile
from lockbuild.digest import copy_with_hash
from lockbuild.errors import IntegrityError
from lockbuild.install.swap import swap_into_place
from lockbuild.site.exportout import MARKER, MARKER_TEXT, check_out, sweep_partials
from lockbuild.site.pyindex import (
    MAX_METADATA,
    METADATA_SUFFIX,
    SUMS,
    SUMS_SIGNATURE,
    Dist,
    ExportError,
    pages,
    project_of,
    requires_python,
    sums_text,
    trusted_comment,
)
from lockbuild.site.storage import Store
from lockbuild.site.storemodel import StoredBuild

KINDS = ("wheel", "sdist")
_TIP_DAMAGE = "Run `lockbuild store verify --store DIR` to list the damage, then import or pull the build again."


@dataclass(frozen=True)
class Signing:
    key: Path
    password: str | None
    allow_readable_key: bool = False


@dataclass(frozen=True)
class Exported:
    out: Path
    builds: tuple[str, ...]
    dists: tuple[Dist, ...]
    linked: int  # files hard-linked from the store (the rest were copied)
    signer: str | None

    @property
    def without_upload_time(self) -> tuple[str, ...]:
        return tuple(d.filename for d in self.dists if d.upload_time is None)


def chosen_builds(store: Store, refs: Sequence[str]) -> list[StoredBuild]:
    return [store.build(r) for r in dict.fromkeys(refs)] if refs else store.builds_all()


def _dists_of(builds: Sequence[StoredBuild]) -> list[tuple[Dist, str]]:
    """Each wheel and sdist once, with the build that lists it; one file name with two contents is refused."""
    seen: dict[str, tuple[Dist, str]] = {}
    for b in builds:
        uploaded = dict(b.manifest.upload_times)
        for m in b.manifest.members:
            if m.kind not in KINDS:
                continue
            filename = m.path.rpartition("/")[2]
            project, version = project_of(filename)
            d = Dist(filename, project, version, m.sha256, m.size, uploaded.get(m.path))
            if filename in seen:
                other, ref = seen[filename]
                if (other.sha256, other.size) != (d.sha256, d.size):
                    raise ExportError(
                        f"{b.ref} and {ref} both list {filename}, with different contents "
                        f"(sha256 {d.sha256[:16]}… and {other.sha256[:16]}…); an index holds one file "
                        "per name.",
                        tip="Export those builds into separate indexes (--build).",
                    )
                if other.upload_time is None and d.upload_time is not None:
                    seen[filename] = (d, b.ref)  # the same file: keep the time one of its builds recorded
                continue
            seen[filename] = (d, b.ref)
    return [seen[k] for k in sorted(seen)]


def _place(store: Store, dest: Path, d: Dist) -> tuple[BinaryIO, bool]:
    """The blob at ``dest/d.path``, linked or copied, opened for reading from its new name."""
    blobs, name = store.blob_at(d.sha256)
    linked = fsio.link_under(blobs, name, dest, d.path)
    if linked is not None:
        return linked, True
    with store.open_blob(d.sha256) as src, fsio.create_under(dest, d.path) as dst:
        copy_with_hash(src, dst, d.size)
    f, _ = fsio.open_regular(dest / d.path, what="exported file", max_size=d.size, error=IntegrityError)
    return f, False


def _check(f: BinaryIO, d: Dist, ref: str) -> None:
    f.seek(0)
    seen, sha = copy_with_hash(f, None, d.size)
    if (seen, sha) != (d.size, d.sha256):
        raise IntegrityError(
            f"the store's blob for {d.filename} ({ref}) is {seen} bytes with sha256 {sha}; its "
            f"signed manifest says {d.size} bytes, {d.sha256}. Nothing was exported.",
            tip=_TIP_DAMAGE,
        )


def _metadata(f: BinaryIO, d: Dist) -> bytes | None:
    """A wheel's METADATA (its one top-level ``*.dist-info/METADATA``, bounded: ``lockbuild.wheelfile``, the
    one reader of a wheel's members, so every way a wheel fails to read is an ExportError naming it); None
    for an sdist."""
    if not d.filename.endswith(".whl"):
        return None
    f.seek(0)
    tip = "Leave its build out of the index (--build), or rebuild the bundle."
    return wheelfile.metadata(f, d.filename, error=ExportError, tip=tip, limit=MAX_METADATA)


def _write(dest: Path, rel: str, data: bytes) -> None:
    with fsio.create_under(dest, rel) as f:
        f.write(data)


def _fill(store: Store, dest: Path, chosen: list[tuple[Dist, str]]) -> tuple[list[Dist], int, list[tuple[str, str]]]:
    """Write every file and page into ``dest``: (the dists as listed, how many were linked, (path, sha256))."""
    dists: list[Dist] = []
    listed: list[tuple[str, str]] = []
    linked = 0
    for d, ref in chosen:
        f, was_linked = _place(store, dest, d)
        with f:
            _check(f, d, ref)
            meta = _metadata(f, d)
        linked += was_linked
        listed.append((d.path, d.sha256))
        if meta is not None:
            meta_sha = hashlib.sha256(meta).hexdigest()
            _write(dest, d.path + METADATA_SUFFIX, meta)
            listed.append((d.path + METADATA_SUFFIX, meta_sha))
            d = Dist(d.filename, d.project, d.version, d.sha256, d.size, d.upload_time, requires_python(meta), meta_sha)
        dists.append(d)
    for rel, data in pages(dists):
        _write(dest, rel, data)
        listed.append((rel, hashlib.sha256(data).hexdigest()))
    return dists, linked, listed


def _sign(dest: Path, listed: list[tuple[str, str]], signing: Signing) -> str:
    from lockbuild.trust.sign import sign_in_fresh_process

    sums = sums_text(listed)
    _write(dest, SUMS, sums)
    comment = trusted_comment(hashlib.sha256(sums).hexdigest(), len(listed))
    signed = sign_in_fresh_process(
        signing.key,
        [(hashlib.blake2b(sums).digest(), comment)],
        password=signing.password,
        allow_readable_key=signing.allow_readable_key,
    )
    _write(dest, SUMS_SIGNATURE, signed.blocks[0].encode())
    return signed.key_id_hex


def export_index(
    store: Store, out: Path, *, refs: Sequence[str] = (), signing: Signing | None = None, wait: float = 0.0
) -> Exported:
    """Write the index of ``refs`` (every build when empty) at ``out``, whole, replacing an earlier export
    (or an empty directory) there; see ``site/exportout.py`` for which --out it takes.

    Every file is the store's blob, hard-linked where possible, else copied, and hashed where it lies
    against the signed manifest. The tree is made in a hidden directory beside --out and swapped in
    (``RENAME_EXCHANGE``). With a key, SHA256SUMS is signed last by the signing process, which alone reads
    the key; the trusted comment holds no time, so two exports are byte-identical."""
    found = check_out(out, store.root, store.fd)
    sweep_partials(out)  # what killed exports left beside --out
    staging = fsio.temp_beside(out)
    try:
        staging.mkdir(0o755)
        staging.chmod(0o755)  # whatever the umask: the index is served to others, read-only
        held = fsio.open_dir(staging)
    except OSError as exc:
        raise ExportError(
            f"cannot make {staging} beside --out: {exc.strerror or exc}.",
            tip="Check that the directory above --out exists and is writable.",
        ) from None
    try:
        fsio.flock_by(held, exclusive=True, deadline=0.0, busy=lambda: ExportError(f"{staging} is in use."))
        _write(staging, MARKER, MARKER_TEXT)  # first: a killed run's staging is known as the export's own
        with store.lock(exclusive=False, wait=wait):  # gc waits: no blob vanishes while it is linked
            builds = chosen_builds(store, refs)
            dists, linked, listed = _fill(store, staging, _dists_of(builds))
        listed.append((MARKER, hashlib.sha256(MARKER_TEXT).hexdigest()))
        signer = _sign(staging, listed, signing) if signing is not None else None
        if check_out(out, store.root, store.fd) != found:  # again, just before the swap
            raise ExportError(
                f"refused --out {out}: it was replaced while the index was written.",
                tip="Run `lockbuild store index` again once nothing else writes --out.",
            )
        swap_into_place(staging, out)
    except BaseException:
        fsio.remove_tree(staging)
        raise
    finally:
        os.close(held)
    return Exported(out, tuple(b.ref for b in builds), tuple(dists), linked, signer)
