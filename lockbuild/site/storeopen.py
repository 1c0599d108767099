"""Open a build in a site store for the installer: ``install ENGINE/VERSION-VARIANT --store DIR``.

No network code: a node reads a store on local or shared disk. The signature blocks kept with the
build are judged against the node's trust directory first (their statements carry the manifest's
sha256), then the manifest bytes must be the signed ones; only then are blobs read, each copied into
the installer's staging directory under its member path and checked (size and sha256) while it is
copied. A missing or damaged blob is an error naming the member and the blob, and the installer
places nothing.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from lockbuild.digest import CHUNK
from lockbuild.errors import IntegrityError, LockbuildError
from lockbuild.fsio import create_under
from lockbuild.install.installer import Opened
from lockbuild.progress import Progress
from lockbuild.site.store import Store
from lockbuild.site.trusted import check_signed_manifest

_TIP = "Run `lockbuild store verify --store DIR`, then import or pull the build again (only what is missing moves)."


def open_store_build(store_dir: Path, ref: str, *, trust: Path | None, threshold: int | None,
                     progress: Progress | None = None) -> Opened:  # fmt: skip
    progress = progress or Progress.quiet()
    with Store(store_dir) as store:
        build = store.build_files(ref)
    manifest, claim = check_signed_manifest(build[0], build[1], name=None, trust=trust, threshold=threshold)
    if f"{manifest.engine}/{manifest.version}-{manifest.variant}" != ref:
        raise IntegrityError(f"the store's {ref} holds the signed manifest of another build; refused.", tip=_TIP)

    def extract(dest: Path) -> object:
        progress.start("copying from the store", total_bytes=manifest.unpacked_size, files=len(manifest.members))
        with Store(store_dir) as s:
            for m in manifest.members:
                try:
                    src = s.open_blob(m.sha256)
                except LockbuildError as exc:
                    raise IntegrityError(f"{m.path}: {exc.message}", tip=_TIP) from None
                h = hashlib.sha256()
                n = 0
                with src, create_under(dest, m.path) as out:
                    while chunk := src.read(min(CHUNK, m.size + 1 - n)):
                        n += len(chunk)
                        if n > m.size:
                            break
                        h.update(chunk)
                        out.write(chunk)
                        progress.advance(len(chunk))
                if n != m.size or h.hexdigest() != m.sha256:
                    raise IntegrityError(
                        f"the store's blob {m.sha256} for {m.path} is damaged ({n} bytes, sha256 {h.hexdigest()}); "
                        f"the signed manifest says {m.size} bytes.",
                        tip=_TIP,
                    )
                progress.file_done()
        progress.finish()
        return manifest

    return Opened(manifest, claim.statement.sha256, claim.signers, extract)
