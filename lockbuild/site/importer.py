"""`lockbuild import`: a signed bundle, from any source, into a store.

The source is named the one way (``site.sources.named_source``), judged by the one trust decision and read
by the one extraction into the store's tmp/; each member is renamed into blobs/ under its sha256, and the
manifest and the blocks that counted are recorded last, all under the store's lock (no gc in between)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from lockbuild.bundle.manifest import Member
from lockbuild.fsio import fd_path, open_dir, remove_at
from lockbuild.progress import Progress
from lockbuild.site.sources import DeltaFile, StoreBuild, named_source, report_place
from lockbuild.site.storage import Store
from lockbuild.trust import load_trust_store, open_source
from lockbuild.trust import trust_dir as default_trust_dir
from lockbuild.vulns.cdx import report_name
from lockbuild.vulns.signed import signed_report

MEMBERS = "members"  # the extraction's directory under the import's own work directory in tmp/


@dataclass(frozen=True)
class Imported:
    ref: str
    members: int
    added: int  # blobs new to the store (or repaired)
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
        name = f"import-{os.getpid()}"
        os.mkdir(name, 0o700, dir_fd=store.tmp)
        wfd = open_dir(name, dir_fd=store.tmp)
        try:
            # Everything of the import is reached from descriptors: the work directory by the one just
            # opened (a path through /proc/self/fd), each member's rename from its directory's descriptor
            # to blobs/'. A tmp/ renamed away, or a link planted in its place, redirects nothing.
            work = fd_path(wfd)
            with named_source(bundle, store=store.root, work=work) as source:
                trust = load_trust_store(default_trust_dir(trust_dir))
                trusted = open_source(source, trust, threshold=threshold)
                seen: set[str] = set()

                def want(m: Member) -> bool:
                    # a delta's members already in the store are not read again (their digest was
                    # checked when they were adopted); a .lbz's are, and replace a damaged copy
                    if m.sha256 in seen or (isinstance(source, DeltaFile) and store.blob_size(m.sha256) is not None):
                        return False
                    seen.add(m.sha256)
                    return True

                done = trusted.extract(work / MEMBERS, progress=progress, want=want, action="importing")
                where = report_place(source) if not isinstance(source, StoreBuild) else None
                name_ = report_name(trusted.manifest.bundle_name)
                kept = signed_report(where, name_, trust, trusted.sha256) if where is not None else None
            added = added_bytes = 0
            shown = store.root / "tmp" / name / MEMBERS
            for m in done.written:
                fresh = store.blob_size(m.sha256) is None
                store.adopt_at(wfd, f"{MEMBERS}/{m.path}", m.sha256, str(shown / m.path))
                if fresh:
                    added += 1
                    added_bytes += m.size
            store.sync()
            store.put_build(trusted.manifest, trusted.manifest_bytes, trusted.counted_signatures())
            if kept is not None:  # the report beside the bundle, judged by the one decision like the bundle
                store.put_report(trusted.manifest, kept.data, kept.signatures)
        finally:
            os.close(wfd)
            remove_at(store.tmp, name)  # by tmp/'s descriptor
    return Imported(trusted.ref, len(trusted.manifest.members), added, added_bytes, trusted.signer_ids)
