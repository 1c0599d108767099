"""`lockbuild import`: a signed bundle (a .lbz, or the part list of its media parts) into a store.

The bundle is checked exactly as install checks it (``trusted.extract_bundle``: signature policy
over the whole file before anything is decompressed, then every member against the manifest while
streaming) into a staging directory under the store's tmp/. Members the store lacks are fsynced and
renamed into blobs/; the build's manifest and signatures are recorded last. The whole import holds
the store's lock, so a gc cannot remove a blob the import is about to reference.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from lockbuild.progress import Progress
from lockbuild.site.delta import is_delta, read_delta
from lockbuild.site.parts import is_part_list, join_to
from lockbuild.site.store import Store
from lockbuild.site.trusted import extract_bundle


@dataclass(frozen=True)
class Imported:
    ref: str
    members: int
    added: int  # blobs new to the store
    added_bytes: int
    signers: tuple[str, ...]


def import_bundle(
    store: Store,
    bundle: Path,
    *,
    trust_dir: Path | None,
    threshold: int | None = None,
    progress: Progress | None = None,
    wait: float = 0.0,
) -> Imported:
    with store.lock(exclusive=True, wait=wait):
        store.clear_tmp()
        work = store.root / "tmp" / f"import-{os.getpid()}"
        work.mkdir()
        try:
            if is_delta(bundle):
                return _import_delta(store, bundle, work, trust_dir=trust_dir, threshold=threshold,
                                     progress=progress)  # fmt: skip
            source = bundle
            if is_part_list(bundle):
                source = join_to(bundle, work)
            staging = work / "members"
            trusted = extract_bundle(source, trust=trust_dir, threshold=threshold, dest=staging,
                                     progress=progress)  # fmt: skip
            added = added_bytes = 0
            for m in trusted.manifest.members:
                staged = staging / m.path
                if store.has_blob(m.sha256, m.size):
                    staged.unlink(missing_ok=True)  # already kept (or listed twice in this bundle)
                    continue
                store.adopt(staged, m.sha256)
                added += 1
                added_bytes += m.size
            store.sync()
            store.put_build(trusted.manifest, trusted.manifest_bytes, trusted.signatures)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    man = trusted.manifest
    return Imported(f"{man.engine}/{man.version}-{man.variant}", len(man.members), added, added_bytes,
                    trusted.signers)  # fmt: skip


def _import_delta(store: Store, delta: Path, work: Path, *, trust_dir: Path | None, threshold: int | None,
                  progress: Progress | None) -> Imported:  # fmt: skip
    staging = work / "blobs"
    info, written, _ = read_delta(delta, trust=trust_dir, threshold=threshold, staging=staging, store=store,
                               progress=progress)  # fmt: skip
    for m in written:
        store.adopt(staging / m.sha256, m.sha256)
    store.sync()
    store.put_build(info.manifest, info.manifest_bytes, info.signatures)
    man = info.manifest
    return Imported(f"{man.engine}/{man.version}-{man.variant}", len(man.members), len(written),
                    sum(m.size for m in written), info.signers)  # fmt: skip
