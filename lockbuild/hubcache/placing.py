"""``install MODEL.lbz --models DIR``: a signed model bundle placed as the Hugging Face cache holds it.

The bundle passes the one trust decision and the one extraction into a staging folder; the snapshot is made
beside it and swapped in whole (``install/swap.py::swap_into_place``), so a kill leaves the previous
snapshot as it was, and ``HF_HUB_OFFLINE=1 HF_HUB_CACHE=DIR`` finds it."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lockbuild import fsio
from lockbuild.bundle.modelinfo import MODEL_DIR, MODEL_KIND, ModelTable
from lockbuild.choice.ranking import check_not_older
from lockbuild.errors import InstallError
from lockbuild.hubcache.cachewalk import RECORDS, current_build, kept_tables, remove_strays, snapshot_link, survey
from lockbuild.install.places import check_place, prepare
from lockbuild.install.swap import STAGING_SUFFIX, clean_stale, engine_lock, swap_into_place
from lockbuild.progress import Progress
from lockbuild.trust.opener import TrustedBundle
from lockbuild.trust.scheme import signature_path


@dataclass(frozen=True)
class InstalledModel:
    repo: str
    commit: str
    name: str
    snapshot: Path
    files: int
    size: int
    bundle_sha256: str
    signers: tuple[str, ...]
    removed: tuple[str, ...] = ()  # entries of the repo's folder no signed record listed, removed

    def to_json(self) -> dict[str, Any]:
        return {
            "repo": self.repo,
            "commit": self.commit,
            "name": self.name,
            "snapshot": str(self.snapshot),
            "files": self.files,
            "bytes": self.size,
            "bundle_sha256": self.bundle_sha256,
            "signers": list(self.signers),
            "removed": list(self.removed),
        }


def place_model(
    trusted: TrustedBundle,
    models: Path,
    *,
    wait: float = 0.0,
    progress: Progress | None = None,
    allow_downgrade: bool = False,
) -> InstalledModel:
    """Place a trusted model bundle under ``models``; the previous snapshot stays whole until the swap. A
    bundle of a lower signed serial (an older commit) than the one ``refs/main`` names is refused unless
    ``allow_downgrade``; afterwards nothing the kept records do not list is left in the repo's folder.

    The layout is what ``huggingface_hub.snapshot_download`` writes: ``models--ORG--NAME/blobs/<sha256 for
    LFS files, git sha1 for others>`` (read-only), ``snapshots/<commit>/<path>`` (relative links to the
    blobs) and ``refs/main`` (the commit, no newline); the signed manifest and the blocks that counted are
    kept in ``.lockbuild/<commit>.toml`` and ``.minisig`` for ``verify --models``."""
    m = trusted.manifest
    table = m.model
    if table is None:
        raise InstallError(
            f"{trusted.path.name} is an engine bundle ({m.engine} {m.version}-{m.variant}), not a "
            "model bundle; --models takes model bundles only.",
            tip="Install an engine with --root DIR (and --models DIR to point it at the models).",
        )
    repo_dir = prepare(models.absolute(), table.folder, what="--models")
    with engine_lock(repo_dir, wait=wait):
        clean_stale(repo_dir)
        for sub in ("blobs", "snapshots", "refs", RECORDS):
            fsio.make_dirs_under(repo_dir, sub)
            check_place(repo_dir / sub, f"the model cache's {sub}/")
        with fsio.opened_dir(repo_dir) as repo_fd:
            current = current_build(repo_fd)
        if current is not None and current[0] != table.commit:
            where = f"{repo_dir} ({table.repo} at {current[0]})"
            check_not_older(where, current[1], m.serial, allow_downgrade=allow_downgrade)
        staging = repo_dir / f"files-{table.commit}{STAGING_SUFFIX}"
        snapshot = repo_dir / f"snapshot-{table.commit}{STAGING_SUFFIX}"
        try:
            staging.mkdir(mode=0o700)
            snapshot.mkdir(mode=0o755)
            trusted.extract(staging, progress=progress, want=lambda mem: mem.kind == MODEL_KIND)
            _adopt_blobs(table, staging, repo_dir / "blobs")
            for f in table.files:
                fsio.symlink_under(snapshot, f.repo_path, snapshot_link(f.repo_path, f.cache_name))
            records = repo_dir / RECORDS
            fsio.write_replacing(records / f"{table.commit}.toml", trusted.manifest_bytes, mode=0o444)
            fsio.write_replacing(signature_path(records / table.commit), trusted.counted_signatures(), mode=0o444)
            swap_into_place(snapshot, repo_dir / "snapshots" / table.commit)
            fsio.write_replacing(repo_dir / "refs" / "main", table.commit.encode(), mode=0o444)
            with fsio.opened_dir(repo_dir) as repo_fd:
                kept, strays = kept_tables(repo_fd, table.folder)
                removed = remove_strays(repo_fd, strays + survey(repo_fd, kept))
        finally:
            fsio.remove_tree(staging)
            fsio.remove_tree(snapshot)
    return InstalledModel(
        table.repo,
        table.commit,
        m.engine,
        repo_dir / "snapshots" / table.commit,
        len(table.files),
        sum(f.size for f in table.files),
        trusted.sha256,
        trusted.signer_ids,
        tuple(removed),
    )


def _adopt_blobs(table: ModelTable, staging: Path, blobs: Path) -> None:
    """Each extracted (and checked) file, made read-only, renamed to its blob name: an existing blob of
    that name is replaced by the copy just checked, never trusted as found."""
    with fsio.opened_dir(blobs) as blobs_fd:
        for f in table.files:
            parent, _, leaf = (MODEL_DIR + f.repo_path).rpartition("/")
            with fsio.opened_dir(staging / parent) as fd:
                os.chmod(leaf, 0o444, dir_fd=fd)
                fsio.rename_at(fd, leaf, blobs_fd, f.cache_name)
