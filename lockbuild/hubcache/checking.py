"""``verify --models DIR`` and ``list --models DIR``: the installed models against their kept records.

Each kept record is a source behind the one port: ``verify`` re-hashes every blob through the one
extraction (with ``--trust``, after the one trust decision), once the record is of its folder's repo and the
folder has been walked by descriptor (a stray fails with exit 4). Nothing here writes."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, BinaryIO

from lockbuild.bundle.extract import AbsentPiece, FilePiece, Piece
from lockbuild.bundle.manifest import Manifest
from lockbuild.bundle.manifestparse import parse_manifest
from lockbuild.bundle.modelinfo import MODEL_VARIANT, ModelTable
from lockbuild.errors import InstallError, IntegrityError, SignatureError
from lockbuild.fsio import lstat_at, open_dir, open_regular, read_regular
from lockbuild.hubcache.cachewalk import RECORDS, kept_tables, survey
from lockbuild.limits import DEFAULT_LIMITS, Limits
from lockbuild.trust.opener import open_source, recheck_kept
from lockbuild.trust.policy import FileDigests
from lockbuild.trust.scheme import signature_path
from lockbuild.trust.source import SizeCheck, Stream
from lockbuild.trust.truststore import TrustStore

_TIP = "Install the model bundle again (lockbuild install MODEL.lbz --models DIR): it replaces every file whole."


class KeptRecord:
    """An installed model as a source: the kept blocks and manifest, and the installed blobs as members."""

    def __init__(self, repo_dir: Path, commit: str) -> None:
        self.repo_dir = repo_dir
        self.commit = commit
        self.record = repo_dir / RECORDS / f"{commit}.toml"
        self.label = str(self.record)
        self.where = f"the installed model {repo_dir.name} at {commit}"
        self.file_name: str | None = None
        self.expect_ref: str | None = None
        self.subject = f"the kept manifest {self.record.name}"
        self.absent_tip = _TIP
        self.damage_tip = _TIP
        self.partial = False

    def signature_blocks(self, limits: Limits = DEFAULT_LIMITS) -> bytes:
        return read_regular(
            signature_path(self.repo_dir / RECORDS / self.commit),
            what="kept signature record",
            max_size=limits.max_signature_file,
            error=SignatureError,
        )

    def check_frames(self, limits: Limits = DEFAULT_LIMITS) -> None:
        """No frame tables: the members are checked."""
        return

    def file_digests(self, check: SizeCheck, limits: Limits = DEFAULT_LIMITS) -> FileDigests | None:
        return None

    def manifest_bytes(self, limits: Limits = DEFAULT_LIMITS, signed_sha256: str | None = None) -> bytes:
        return read_regular(
            self.record, what="kept manifest record", max_size=limits.max_manifest, error=IntegrityError
        )

    def members(self, limits: Limits = DEFAULT_LIMITS) -> AbstractContextManager[Stream]:
        return self._members(limits)

    @contextmanager
    def _members(self, limits: Limits) -> Iterator[Stream]:
        manifest = parse_manifest(self.manifest_bytes(limits), limits)
        with opened_repo(self.repo_dir) as repo_fd:
            try:
                blobs_fd = open_dir("blobs", dir_fd=repo_fd)
            except OSError as exc:
                raise IntegrityError(
                    f"{self.repo_dir / 'blobs'} cannot be opened as a folder ({exc.strerror or exc}).", tip=_TIP
                ) from None
            try:
                yield Stream(None, self.pieces(manifest, blobs_fd))
            finally:
                os.close(blobs_fd)

    def pieces(self, manifest: Manifest, blobs_fd: int) -> Iterator[Piece]:
        """The installed blob of each model file, opened from the descriptor of ``blobs/`` (its size as
        found; the recipe is not kept: absent)."""
        table = _table(manifest, self.record)
        by_member = {f.member: f for f in table.files}
        for m in manifest.members:
            f = by_member.get(m.path)
            if f is None:
                yield AbsentPiece(m.path, m.size)
                continue
            blob = self.repo_dir / "blobs" / f.cache_name
            st = lstat_at(f.cache_name, blobs_fd)
            if st is None or not stat.S_ISREG(st.st_mode):
                raise IntegrityError(
                    f"{f.repo_path} of {table.repo} at {table.commit}: its blob {blob} is "
                    f"{'missing' if st is None else 'not a regular file'}.",
                    tip=_TIP,
                )
            yield FilePiece(m.path, st.st_size, partial(_open_blob, f.cache_name, blobs_fd, blob, st.st_size))


def _open_blob(name: str, blobs_fd: int, shown: Path, size: int) -> BinaryIO:
    f, _ = open_regular(
        name, what="installed model file", max_size=size + 1, error=IntegrityError, dir_fd=blobs_fd, shown=str(shown)
    )
    return f


@contextmanager
def opened_repo(repo_dir: Path) -> Iterator[int]:
    """The repo's folder opened by descriptor: the models folder as named, the repo folder never through a link."""
    try:
        models = open_dir(repo_dir.parent, follow=True)
        try:
            fd = open_dir(repo_dir.name, dir_fd=models)
        finally:
            os.close(models)
    except OSError as exc:
        raise IntegrityError(
            f"{repo_dir} cannot be opened as a folder, not through a link ({exc.strerror or exc}).", tip=_TIP
        ) from None
    try:
        yield fd
    finally:
        os.close(fd)


def _table(manifest: Manifest, where: Path) -> ModelTable:
    if manifest.model is None or manifest.variant != MODEL_VARIANT:
        raise IntegrityError(f"{where} is not a model bundle's manifest.", tip=_TIP)
    return manifest.model


@dataclass(frozen=True)
class CheckedModel:
    repo: str
    commit: str
    name: str
    files: int
    size: int
    current: bool  # refs/main names this commit
    signers: tuple[str, ...]  # with --trust: the keys that counted

    def to_json(self) -> dict[str, Any]:
        return {
            "repo": self.repo,
            "commit": self.commit,
            "name": self.name,
            "files": self.files,
            "bytes": self.size,
            "current": self.current,
            "signers": list(self.signers),
        }


def installed(models: Path, repo: str | None = None) -> list[KeptRecord]:
    """The kept records under ``models`` (of one repo ORG/NAME, when named), in order."""
    if repo is not None:
        folders = ["models--" + repo.replace("/", "--")]
        if not (models / folders[0] / RECORDS).is_dir():
            raise InstallError(
                f"no model {repo} is installed under {models}; expected {models / folders[0]}.",
                tip=f"lockbuild list --models {models} shows what is.",
            )
    else:
        folders = sorted(p.name for p in (models.iterdir() if models.is_dir() else []) if p.name.startswith("models--"))
    out = []
    for folder in folders:
        records = models / folder / RECORDS
        if records.is_dir():
            out += [
                KeptRecord(models / folder, p.name[: -len(".toml")])
                for p in sorted(records.iterdir())
                if p.name.endswith(".toml")
            ]
    return out


def describe(rec: KeptRecord, signers: tuple[str, ...] = ()) -> CheckedModel:
    m = parse_manifest(rec.manifest_bytes())
    table = _table(m, rec.record)
    try:
        ref = read_regular(rec.repo_dir / "refs" / "main", what="refs/main", max_size=64, error=IntegrityError)
    except (OSError, IntegrityError):
        ref = b""
    current = ref == table.commit.encode()
    return CheckedModel(
        table.repo, table.commit, m.engine, len(table.files), sum(f.size for f in table.files), current, signers
    )


def verify_model(rec: KeptRecord, store: TrustStore | None, *, threshold: int | None = None) -> CheckedModel:
    """Every installed file of ``rec`` against its record: the record is of this folder's repo, the folder
    holds exactly what its records list (links, folders, blobs, refs), then each blob's size and sha256
    through the one extraction (with ``store``: after the record passed the one trust decision)."""
    if store is not None:
        trusted = open_source(rec, store, threshold=threshold)
        manifest, signers = trusted.manifest, trusted.signer_ids
    else:
        manifest, signers = parse_manifest(rec.manifest_bytes()), ()
    table = _table(manifest, rec.record)
    if table.folder != rec.repo_dir.name:
        raise IntegrityError(
            f"{rec.record} is the record of {table.repo}, whose folder is {table.folder}; it sits in "
            f"{rec.repo_dir.name}: another model's files in this repo's place.",
            tip=_TIP,
        )
    if table.commit != rec.commit:
        raise IntegrityError(f"{rec.record} records commit {table.commit}, not {rec.commit}.", tip=_TIP)
    with opened_repo(rec.repo_dir) as repo_fd:
        others, strays = kept_tables(repo_fd, rec.repo_dir.name)
        strays += survey(repo_fd, [t for t in others if t.commit != table.commit] + [table])
    if strays:
        shown = "; ".join(f"{rec.repo_dir / s.rel} {s.problem}" for s in strays[:5])
        more = f" (and {len(strays) - 5} more)" if len(strays) > 5 else ""
        raise IntegrityError(f"{rec.repo_dir.name} holds what its signed records do not: {shown}{more}.", tip=_TIP)
    recheck_kept(rec, manifest)
    return describe(rec, signers)
