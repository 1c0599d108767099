"""Delta bundles: the new build's signed manifest and only the members an older build lacks.

``NAME.delta.lbz`` (NAME.lbz being the full bundle's name) is a zstd-compressed POSIX tar written
like a bundle (fixed metadata, one frame, a checksum), holding:

1. ``delta.toml``: what it is and what it needs (``format``, ``bundle`` = NAME.lbz, ``base`` =
   ENGINE/VERSION-VARIANT it was cut against, ``omitted`` = how many members it leaves out). It is a
   hint for people and early errors, not trusted.
2. ``bundle.toml``: the new bundle's manifest, byte for byte; its sha256 is what the signatures sign.
3. the members the base lacks, in the manifest's order.

Beside it, ``NAME.delta.lbz.minisig`` is the full bundle's ``.minisig`` as published: its signed
statements name NAME.lbz and the manifest's sha256, so no signing key is needed to cut a delta, and
a node trusts a delta exactly as far as the signatures prove its manifest. Importing a delta checks
the signature blocks against the trust directory before decompressing anything, the manifest against
them, each member against the manifest while streaming; every member the delta leaves out must
already be in the store, or the import fails naming them.
"""

from __future__ import annotations

import importlib
import io
import os
import shutil
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from lockbuild.bundle.manifest import MANIFEST, Manifest, Member, parse_manifest, toml_string
from lockbuild.bundle.read import read_bundle, read_head
from lockbuild.bundle.write import BLOCK, RECORD, compressor, tar_header
from lockbuild.digest import CHUNK
from lockbuild.errors import IntegrityError, LockbuildError
from lockbuild.limits import DEFAULT_LIMITS, Limits
from lockbuild.progress import Progress
from lockbuild.site.store import Store
from lockbuild.site.trusted import check_manifest, check_signatures
from lockbuild.trust import read_signatures, signature_path

# The strict bundle reader's own pieces (a delta is read by the same rules). They are moving from
# bundle/read.py into bundle/tar.py and bundle/zstdframe.py; found at run time in either place.
_read: Any = importlib.import_module("lockbuild.bundle.read")
try:
    _tar: Any = importlib.import_module("lockbuild.bundle.tar")
    _frame: Any = importlib.import_module("lockbuild.bundle.zstdframe")
    _check_header, _copy, check_zstd_frame = _tar.check_header, _tar.copy_member, _frame.check_zstd_frame
except ImportError:  # pragma: no cover  (before the split)
    _check_header, _copy, check_zstd_frame = _read._check_header, _read._copy, _read.check_zstd_frame
_open_tar = _read._open_tar
TarReader = Any
TarHeader = Any

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
        return (f"format = 1\nbundle = {toml_string(self.bundle)}\nbase = {toml_string(self.base)}\n"
                f"omitted = {self.omitted}\n").encode()  # fmt: skip


def _bad(message: str) -> IntegrityError:
    return IntegrityError(message, tip=_TIP)


def parse_head(raw: bytes) -> DeltaHead:
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise _bad(f"the delta's {HEAD} is not valid TOML: {exc}.") from None
    bundle, base, omitted = data.get("bundle"), data.get("base"), data.get("omitted")
    if data.get("format") != 1 or not isinstance(bundle, str) or not isinstance(base, str) \
            or not isinstance(omitted, int) or set(data) != {"format", "bundle", "base", "omitted"}:  # fmt: skip
        raise _bad(f"the delta's {HEAD} is not format 1 (format, bundle, base, omitted).")
    return DeltaHead(bundle, base, omitted)


# --- writing -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Written:
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


def write_delta(new: Path, base: Path, out_dir: Path, *, progress: Progress | None = None,
                limits: Limits = DEFAULT_LIMITS) -> Written:  # fmt: skip
    """Cut NEW against BASE into OUT/NAME.delta.lbz (+ .minisig). NEW is read in full (every member
    against its manifest); BASE only for its manifest. No key is needed."""
    base_manifest, _ = read_head(base, limits)
    have = {m.sha256 for m in base_manifest.members}
    sig = signature_path(new)
    read_signatures(sig, limits)  # present, bounded, well-formed
    out_dir.mkdir(parents=True, exist_ok=True)
    work = out_dir / f".delta-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    try:
        manifest = read_bundle(new, dest=work / "members", limits=limits, progress=progress)
        head_bytes = manifest.to_toml()
        keep = [m for m in manifest.members if m.sha256 not in have]
        name = manifest.bundle_name.removesuffix(".lbz") + SUFFIX
        head = DeltaHead(manifest.bundle_name, f"{base_manifest.engine}/{base_manifest.version}-"
                         f"{base_manifest.variant}", len(manifest.members) - len(keep))  # fmt: skip
        tmp = work / name
        with tmp.open("wb") as raw:
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
        (work / (name + ".minisig")).write_bytes(sig.read_bytes())
        tmp.replace(out_dir / name)
        (work / (name + ".minisig")).replace(out_dir / (name + ".minisig"))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    final = out_dir / name
    return Written(final, len(manifest.members), len(keep), sum(m.size for m in keep), new.stat().st_size)


# --- reading -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class DeltaInfo:
    head: DeltaHead
    manifest: Manifest
    manifest_bytes: bytes
    signatures: bytes
    signers: tuple[str, ...]


def read_delta(
    delta: Path,
    *,
    trust: Path | None,
    threshold: int | None,
    staging: Path | None,
    store: Store | None,
    limits: Limits = DEFAULT_LIMITS,
    progress: Progress | None = None,
) -> tuple[DeltaInfo, list[Member], list[Member]]:
    """Check a delta; with ``staging`` and ``store``, write the members it carries that the store lacks
    under ``staging`` (by sha256), and fail naming any member the store lacks that it does not carry.
    Returns the checked delta, the members written and the members carried."""
    progress = progress or Progress.quiet()
    signatures = "".join(s.to_text() for s in read_signatures(signature_path(delta), limits)).encode()
    # Trust first, from the signature blocks alone: nothing is decompressed before the policy is met.
    claim = check_signatures(signatures, name=full_name(delta), trust=trust, threshold=threshold,
                             source=str(signature_path(delta)))  # fmt: skip
    if staging is not None:
        staging.mkdir(parents=True, exist_ok=True)
    written: list[Member] = []
    carried: list[Member] = []
    with _open(delta) as f:
        check_zstd_frame(f, limits)
        tar = _open_tar(f, limits)
        head = parse_head(_small(tar, HEAD, MAX_HEAD, limits))
        manifest_bytes = _small(tar, MANIFEST, limits.max_manifest, limits)
        manifest = check_manifest(claim, manifest_bytes, limits)
        need = {m.sha256 for m in manifest.members if not store.has_blob(m.sha256, m.size)} if store else set()
        for h, m in _members(tar, manifest, limits):
            target = staging / m.sha256 if staging is not None else None
            if target is not None and m.sha256 in need and not target.exists():
                with target.open("xb") as out:
                    digest = _copy(tar, h, out, progress)
                written.append(m)
            else:
                digest = _copy(tar, h, None, progress)
            if digest != m.sha256:
                raise _bad(f"member {m.path!r} of the delta has sha256 {digest}; the signed manifest says {m.sha256}.")
            carried.append(m)
    if store is not None:
        have = {m.sha256 for m in carried}
        missing = [m for m in manifest.members if m.sha256 in need and m.sha256 not in have]
        if missing:
            more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
            names = ", ".join(m.path for m in missing[:5]) + more
            raise IntegrityError(
                f"the delta {delta.name} needs {len(missing)} member(s) the store lacks: {names}.",
                tip=f"Import the base it was cut against ({head.base}) or the full bundle first, then this delta.",
            )
    return DeltaInfo(head, manifest, manifest_bytes, signatures, claim.signers), written, carried


def _open(delta: Path) -> BinaryIO:
    try:
        return delta.open("rb")
    except OSError as exc:
        raise LockbuildError(f"cannot read the delta {delta}: {exc.strerror or exc}.") from None


def _members(tar: TarReader, manifest: Manifest, limits: Limits) -> Iterator[tuple[TarHeader, Member]]:
    """The delta's members after the manifest: each listed, in the manifest's order, at its listed size."""
    index = {m.path: i for i, m in enumerate(manifest.members)}
    last = -1
    while (h := tar.next()) is not None:
        _check_header(h, limits)
        i = index.get(h.name, -1)
        if i <= last:
            why = "not in the signed manifest" if i < 0 else "repeated or out of the manifest's order"
            raise _bad(f"refused member {h.name!r} of the delta: it is {why}.")
        m = manifest.members[i]
        if h.size != m.size:
            raise _bad(f"member {h.name!r} of the delta is {h.size} bytes; the signed manifest says {m.size}.")
        last = i
        yield h, m


def inspect_delta(delta: Path, limits: Limits = DEFAULT_LIMITS) -> tuple[DeltaHead, Manifest, list[Member]]:
    """What a delta says it is and carries (signatures NOT checked: `verify` does that)."""
    with _open(delta) as f:
        check_zstd_frame(f, limits)
        tar = _open_tar(f, limits)
        head = parse_head(_small(tar, HEAD, MAX_HEAD, limits))
        manifest = parse_manifest(_small(tar, MANIFEST, limits.max_manifest, limits), limits)
        carried = []
        for h, m in _members(tar, manifest, limits):
            _copy(tar, h, None, Progress.quiet())
            carried.append(m)
    return head, manifest, carried


def _small(tar: TarReader, name: str, limit: int, limits: Limits) -> bytes:
    h = tar.next()
    if h is None or h.name != name:
        raise _bad(f"the delta's member is {h.name if h else 'missing'!r}; expected {name}.")
    _check_header(h, limits)
    if h.size > limit:
        raise _bad(f"the delta's {name} is {h.size} bytes; expected at most {limit}.")
    buf = io.BytesIO()
    _copy(tar, h, buf, Progress.quiet())
    return buf.getvalue()
