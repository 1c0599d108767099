"""Delta bundles: the new build's signed manifest and only the members an older build lacks (:func:`write_delta`).

A delta carries the full bundle's signatures, so no key is needed to cut one and a node trusts it exactly
as far as they prove its manifest. Cutting and importing both pass the one trust decision before a byte is
decompressed; a member the delta leaves out must already be in the store, or the import fails naming it."""

from __future__ import annotations

import io
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from lockbuild import fsio
from lockbuild.bundle.manifest import MANIFEST, toml_string
from lockbuild.bundle.write import BLOCK, RECORD, compressor, tar_header
from lockbuild.digest import CHUNK
from lockbuild.documents import loads_toml
from lockbuild.errors import IntegrityError, LockbuildError
from lockbuild.limits import DEFAULT_LIMITS, Limits
from lockbuild.progress import Progress
from lockbuild.trust import TrustStore, open_source
from lockbuild.trust.scheme import SCHEME
from lockbuild.trust.source import BundleFile, signature_path

SUFFIX = ".delta.lbz"
HEAD = "delta.toml"
MAX_HEAD = 64 << 10
_TIP = "The delta is damaged or was not made by `lockbuild delta`; copy it again, or import the full bundle."


def is_delta(path: Path) -> bool:
    return path.name.endswith(SUFFIX)


def full_name(delta: Path) -> str:
    """NAME.lbz for NAME.delta.lbz: the bundle file the signatures name."""
    return delta.name[: -len(SUFFIX)] + ".lbz"


@dataclass(frozen=True)
class DeltaHead:
    bundle: str
    base: str
    omitted: int

    def to_toml(self) -> bytes:
        return (
            f"format = 1\nbundle = {toml_string(self.bundle)}\nbase = {toml_string(self.base)}\n"
            f"omitted = {self.omitted}\n"
        ).encode()


def _bad(message: str) -> IntegrityError:
    return IntegrityError(message, tip=_TIP)


def parse_head(raw: bytes) -> DeltaHead:
    data = loads_toml(
        raw, max_bytes=MAX_HEAD, refuse=lambda why: _bad(f"the delta's {HEAD} is not valid TOML: {why.detail}.")
    )
    bundle, base, omitted = data.get("bundle"), data.get("base"), data.get("omitted")
    if (
        data.get("format") != 1
        or not isinstance(bundle, str)
        or not isinstance(base, str)
        or not isinstance(omitted, int)
        or set(data) != {"format", "bundle", "base", "omitted"}
    ):
        raise _bad(f"the delta's {HEAD} is not format 1 (format, bundle, base, omitted).")
    return DeltaHead(bundle, base, omitted)


# --- writing -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class WrittenDelta:
    path: Path
    members: int
    included: int
    included_bytes: int
    full_size: int


class _Counting:
    """A writer that counts what passes, so the archive can be padded to a whole record."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self.n = 0

    def write(self, data: bytes) -> int:
        self.out.write(data)
        self.n += len(data)
        return len(data)


def _add(out: _Counting, path: str, size: int, src: BinaryIO, mtime: int) -> None:
    out.write(tar_header(path, size, mtime))
    left = size
    while left:
        chunk = src.read(min(CHUNK, left))
        if not chunk:
            raise LockbuildError(f"internal: {path} ended early while writing the delta.")
        out.write(chunk)
        left -= len(chunk)
    out.write(bytes(-size % BLOCK))


def write_delta(
    new: Path,
    base: Path,
    out_dir: Path,
    *,
    trust: TrustStore,
    threshold: int | None = None,
    progress: Progress | None = None,
    limits: Limits = DEFAULT_LIMITS,
) -> WrittenDelta:
    """Cut NEW against BASE into OUT/NAME.delta.lbz (+ .minisig). Both are opened through the one trust
    decision first; NEW is then extracted in full (every member against its signed manifest), BASE is
    used only for its signed manifest. No key is needed: the delta carries NEW's signature blocks.

    The delta is a zstd-compressed POSIX tar written like a bundle, holding ``delta.toml`` (a hint for
    people and early errors, not trusted: ``bundle``, ``base``, ``omitted``), ``bundle.toml`` (NEW's
    manifest, byte for byte) and the members BASE lacks, in the manifest's order; beside it,
    ``NAME.delta.lbz.minisig`` is NEW's ``.minisig`` as published."""
    base_manifest = open_source(BundleFile(base), trust, threshold=threshold, limits=limits).manifest
    have = {m.sha256 for m in base_manifest.members}
    trusted = open_source(BundleFile(new), trust, threshold=threshold, limits=limits)
    blocks = SCHEME.join(trusted.blocks)  # every block NEW carries, as judged
    out_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".delta-", dir=out_dir))  # this run's own (0700, an unguessable name)
    try:
        manifest = trusted.extract(work / "members", progress=progress, action="checking").manifest
        head_bytes = trusted.manifest_bytes  # exactly the bytes the signatures sign
        keep = [m for m in manifest.members if m.sha256 not in have]
        name = manifest.bundle_name.removesuffix(".lbz") + SUFFIX
        head = DeltaHead(
            manifest.bundle_name,
            f"{base_manifest.engine}/{base_manifest.version}-{base_manifest.variant}",
            len(manifest.members) - len(keep),
        )
        tmp = work / name
        with fsio.create_new(tmp) as raw:
            z = compressor().stream_writer(raw, closefd=False, write_size=CHUNK)
            counted = _Counting(z)
            mtime = manifest.serial
            for path, data in ((HEAD, head.to_toml()), (MANIFEST, head_bytes)):
                _add(counted, path, len(data), io.BytesIO(data), mtime)
            for m in keep:
                with (work / "members" / m.path).open("rb") as f:
                    _add(counted, m.path, m.size, f, mtime)
            counted.write(bytes(2 * BLOCK))
            counted.write(bytes(-counted.n % RECORD))
            z.close()  # type: ignore[no-untyped-call]
            raw.flush()
            os.fsync(raw.fileno())
        fsio.write_new(signature_path(work / name), blocks)  # the blocks that were checked, not a second read
        tmp.replace(out_dir / name)
        signature_path(work / name).replace(signature_path(out_dir / name))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    final = out_dir / name
    return WrittenDelta(final, len(manifest.members), len(keep), sum(m.size for m in keep), new.stat().st_size)
