"""From a plan and its fetched files to a signed bundle in the output directory (all or nothing)."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, cast

import zstandard

from lockbuild import __version__, fsio
from lockbuild.builder.installtable import bootstrap_entries, install_table
from lockbuild.builder.plan import Plan
from lockbuild.bundle.lockfiles import BUILD_DIR, BUILD_LOCK, KIND, build_lock_text, bundle_pylock, bundle_requirements
from lockbuild.bundle.manifest import Manifest, Member, bundle_name, member_order
from lockbuild.bundle.write import DamagedSource, Entry, write_bundle
from lockbuild.digest import HashedFile, HashingWriter
from lockbuild.errors import LockbuildError, SignatureError
from lockbuild.fetch.batch import Batch
from lockbuild.fetch.fetcher import Fetcher, FetchReport
from lockbuild.fsio.writeback import EarlyWriteback
from lockbuild.lock import LockedFile
from lockbuild.progress import Progress
from lockbuild.provenance import Provenance
from lockbuild.recipe import SelfWheel
from lockbuild.times import iso
from lockbuild.trust import FileDigests, Statement, carry_over, read_signatures, sign_statement, signature_path
from lockbuild.trust.scheme import SCHEME, Block, SigningKey
from lockbuild.trust.sign import KeyFileSigner, SignedBlocks


@dataclass(frozen=True)
class Packed:
    bundle: Path
    signature: Path | None
    manifest: Manifest
    sha256: str
    size: int
    kept_signers: tuple[str, ...] = ()  # co-signers whose blocks still hold: the rebuilt bundle is byte-identical
    dropped_signers: tuple[str, ...] = ()  # co-signers whose blocks described the old, different bundle


def sbom(plan: Plan) -> bytes:
    """A CycloneDX 1.5 document of every bundled file, deterministic for a given plan."""
    b = plan.build
    name = bundle_name(plan.recipe.engine.name, b.version, b.variant, b.platform)
    components: list[dict[str, object]] = []
    for f in sorted(plan.lock.files, key=lambda f: f.name):
        purl = f"pkg:pypi/{f.name}@{f.version}?file_name={f.filename}"
        components.append(
            {
                "type": "library",
                "bom-ref": purl,
                "name": f.name,
                "version": f.version,
                "purl": purl,
                "hashes": [{"alg": "SHA-256", "content": f.sha256}],
                # a file made here (lockbuild's own wheel) has no place it came from
                **({"externalReferences": [{"type": "distribution", "url": f.url}]} if f.url else {}),
                **_provenance_properties(f),
            }
        )
    needed_by = [sdist for sdist, reqs in plan.build_requires if reqs]  # the closure is shared by them
    for f in sorted(plan.build_deps, key=lambda f: f.name):
        purl = f"pkg:pypi/{f.name}@{f.version}?file_name={f.filename}"
        components.append(
            {
                "type": "library",
                "bom-ref": f"build:{purl}",
                "name": f.name,
                "version": f.version,
                "purl": purl,
                "scope": "excluded",  # needed to build the sdists, never installed in the environment
                "hashes": [{"alg": "SHA-256", "content": f.sha256}],
                "externalReferences": [{"type": "distribution", "url": f.url}],
                "properties": [{"name": "lockbuild:build-dependency-of", "value": " ".join(needed_by)}],
            }
        )
    for e in sorted(plan.extras, key=lambda e: e.path):
        components.append(
            {
                "type": "file",
                "bom-ref": e.path,
                "name": e.path.split("/", 1)[1],
                "hashes": [{"alg": "SHA-256", "content": e.sha256}],
                "externalReferences": [{"type": "distribution", "url": e.url}],
            }
        )
    doc = {
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "serialNumber": f"urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, name + plan.as_of.isoformat())}",
        "version": 1,
        "metadata": {
            "timestamp": iso(plan.as_of),
            "tools": {"components": [{"type": "application", "name": "lockbuild", "version": __version__}]},
            "component": {
                "type": "application",
                "bom-ref": f"engine:{plan.recipe.engine.name}",
                "name": plan.recipe.engine.name,
                "version": b.version,
            },
        },
        "components": components,
    }
    return (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()


def _provenance_properties(f: LockedFile) -> dict[str, object]:
    """PEP 740: the publishers the index states for an attested file, as SBOM properties."""
    p = f.provenance
    if p is None or not p.publishers:
        return {}
    props = [
        {"name": "lockbuild:provenance:attestations", "value": str(p.attestations)},
        {"name": "lockbuild:provenance:verified", "value": "false"},
    ]
    for pub in p.publishers:
        props += [
            {"name": f"lockbuild:provenance:publisher:{key}", "value": value}
            for key, value in pub.to_json().items()
            if value
        ]
    return {"properties": props}


def _bytes_member(path: str, data: bytes, kind: str) -> tuple[Member, bytes]:
    return Member(path, len(data), hashlib.sha256(data).hexdigest(), kind, ""), data


PackInput = Path | Callable[[], Path | HashedFile]  # a file, or a file still arriving (the writer waits for it)


def assemble(plan: Plan, fetched: Mapping[str, Path], uv_version: str) -> tuple[Manifest, list[Entry]]:
    """The manifest and the ordered entries of the bundle; ``fetched`` maps sha256 to a verified file."""
    return assemble_from(plan, fetched.__getitem__, lambda sha: fetched[sha].stat().st_size, uv_version)


def assemble_from(
    plan: Plan, source: Callable[[str], PackInput], size: Callable[[str], int], uv_version: str
) -> tuple[Manifest, list[Entry]]:
    """The manifest and the ordered entries; ``source(sha256)`` gives a member's file (or a callable that
    waits for it), ``size(sha256)`` its size, known before any byte arrives."""
    b = plan.build
    exempt = b.exclude_newer_package
    generated = [
        _bytes_member("recipe.toml", plan.resolved_recipe.encode(), "recipe"),
        _bytes_member("lock/requirements.txt", bundle_requirements(plan.lock.files, exempt).encode(), "lock"),
        _bytes_member("sbom.cdx.json", sbom(plan), "sbom"),
    ]
    if plan.lock.format == "pylock.toml":
        generated.append(_bytes_member("lock/pylock.toml", bundle_pylock(plan.lock.files, b.target).encode(), "lock"))
    if plan.build_requires:  # the lock has sdists: the node builds them from this hashed closure only
        text = build_lock_text(plan.build_deps, plan.build_requires, plan.prebuilt)
        generated.append(_bytes_member(BUILD_LOCK, text.encode(), "lock"))
    entries: list[Entry] = [Entry(m, data) for m, data in generated]
    for f in plan.lock.files:
        entries.append(Entry(Member(f.bundle_path, size(f.sha256), f.sha256, f.kind, f.url), source(f.sha256)))
    for f in plan.build_deps:
        member = Member(f"{BUILD_DIR}/{f.filename}", size(f.sha256), f.sha256, KIND, f.url)
        entries.append(Entry(member, source(f.sha256)))
    for e in plan.extras:
        entries.append(Entry(Member(e.path, size(e.sha256), e.sha256, e.kind, e.url), source(e.sha256)))
    if isinstance(b.wheel, SelfWheel):  # lockbuild's own bundle: installable with stock tools
        entries += bootstrap_entries(plan, [e.member for e in entries])
    entries.sort(key=lambda e: member_order(e.member.path))
    manifest = Manifest(
        engine=plan.recipe.engine.name,
        version=b.version,
        variant=b.variant,
        python=b.python,
        platform=b.platform,
        as_of=plan.as_of,
        serial=int(plan.as_of.timestamp()),
        recipe_sha256=hashlib.sha256(plan.resolved_recipe.encode()).hexdigest(),
        lockbuild_version=__version__,
        uv_version=uv_version,
        lock_format=plan.lock.format,
        members=tuple(e.member for e in entries),
        install=install_table(plan, [e.member for e in entries]),
        zstd_version=".".join(map(str, zstandard.ZSTD_VERSION)),
        exclude_newer_package=b.exclude_newer_package,
        provenance=_attested(plan, entries),
        upload_times=_uploaded(plan, entries),
    )
    return manifest, entries


def _uploaded(plan: Plan, entries: list[Entry]) -> tuple[tuple[str, str], ...]:
    """The manifest's upload times: each wheel or sdist of the lock whose index gave one, in member order."""
    by_path = {f.bundle_path: iso(f.upload_time) for f in plan.lock.files if f.upload_time is not None}
    return tuple((e.member.path, by_path[e.member.path]) for e in entries if e.member.path in by_path)


def _attested(plan: Plan, entries: list[Entry]) -> tuple[tuple[str, Provenance], ...]:
    """The manifest's provenance: each attested wheel or sdist of the lock, in member order."""
    by_path = {f.bundle_path: f.provenance for f in plan.lock.files if f.provenance and f.provenance.publishers}
    return tuple((e.member.path, by_path[e.member.path]) for e in entries if e.member.path in by_path)


@dataclass(frozen=True)
class UnsignedBundle:
    """A bundle written under a temporary name in its output directory, not yet signed or in place."""

    tmp: Path
    final: Path
    manifest: Manifest
    digests: FileDigests

    def discard(self) -> None:
        self.tmp.unlink(missing_ok=True)


def write(
    manifest: Manifest,
    entries: list[Entry],
    out_dir: Path,
    *,
    threads: int | None = None,
    progress: Progress | None = None,
) -> UnsignedBundle:
    """Write the bundle to a temporary file in ``out_dir``, hashed as it is written (never read back)."""
    final = out_dir / manifest.bundle_name
    tmp = fsio.temp_beside(final)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        fsio.sweep_beside(final)  # what a killed build of this bundle left
        with fsio.create_new(tmp) as raw:
            out = HashingWriter(EarlyWriteback(raw))  # written and hashed on threads of their own, never read back
            try:
                tables = write_bundle(cast(BinaryIO, out), manifest, entries, threads=threads, progress=progress)
                digests = FileDigests(*out.finish(), frames_sha256=tables)
            finally:
                out.abort()
            raw.flush()
            os.fsync(raw.fileno())
    except OSError as exc:  # the sources' read errors are DamagedSource: this is the output's
        tmp.unlink(missing_ok=True)
        raise LockbuildError(
            f"cannot write the bundle {tmp}: {exc.strerror or exc}.",
            tip="Check the free space and the permissions of the output directory (--out).",
        ) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return UnsignedBundle(tmp, final, manifest, digests)


def statement_for(written: UnsignedBundle, expires: dt.datetime | None) -> Statement:
    """What a signature over a written bundle says: the signing process signs exactly this."""
    digests = written.digests
    return Statement.of(
        written.manifest,
        name=written.final.name,
        sha256=digests.whole,
        size=digests.size,
        expires=expires,
        frames_sha256=digests.frames_sha256,
    )


def place_signed(written: UnsignedBundle, statement: Statement, *, signer: bytes, block: str) -> Packed:
    """Move a written bundle into place with ``block``, the signing process's signature over ``statement``,
    followed by the co-signers' blocks that still describe the same bytes (``signer``'s own old one replaced)."""
    final, manifest, digests = written.final, written.manifest, written.digests
    sig_final = signature_path(final)
    tmp_sig = fsio.temp_beside(sig_final)
    try:
        kept, dropped = carry_over(_existing_signatures(sig_final), statement, signer)
        fsio.write_new(tmp_sig, SCHEME.join([*SCHEME.parse(block.encode("utf-8"), source="the new signature"), *kept]))
        written.tmp.replace(final)
        tmp_sig.replace(sig_final)
    finally:
        written.discard()
        tmp_sig.unlink(missing_ok=True)
    return Packed(
        final,
        sig_final,
        manifest,
        digests.whole,
        digests.size,
        tuple(s.key_id_hex for s in kept),
        tuple(s.key_id_hex for s in dropped),
    )


def sign(written: UnsignedBundle, *, key: SigningKey | None, expires: dt.datetime | None = None) -> Packed:
    """Sign a written bundle in this process (the benchmarks' in-process path; ``lockbuild build`` signs in
    its own signing process) and move both into place; ``key=None``: the bundle alone."""
    if key is not None:
        statement = statement_for(written, expires)
        block = sign_statement(key, statement, written.digests.prehash(written.final.name))
        return place_signed(written, statement, signer=key.key_id, block=block)
    try:
        written.tmp.replace(written.final)
    finally:
        written.discard()
    d = written.digests
    return Packed(written.final, None, written.manifest, d.whole, d.size, (), ())


def release(
    written: Sequence[UnsignedBundle],
    signer: KeyFileSigner,
    checked: SignedBlocks,
    *,
    expires: dt.datetime | None = None,
    extra: Sequence[tuple[bytes, str]] = (),
) -> tuple[list[Packed], SignedBlocks]:
    """The one sequence that signs what a build wrote, for engines and models alike: one call to the signing
    process (the key read there only, refused unless still the key ``checked`` when the build began), each
    bundle moved into place with its block; ``extra`` items (a report beside a bundle) are signed in the
    same call, their blocks after the bundles'. Whatever happens, no unsigned bundle is left behind."""
    try:
        statements = [statement_for(w, expires) for w in written]
        items = [(w.digests.prehash(w.final.name), st.to_comment()) for w, st in zip(written, statements, strict=True)]
        signed = signer.sign_as_checked([*items, *extra], checked)
        packed = [
            place_signed(w, st, signer=signed.key_id, block=block)
            for w, st, block in zip(written, statements, signed.blocks[: len(written)], strict=True)
        ]
    finally:
        for w in written:
            w.discard()
    return packed, signed


def fetch_and_write(
    plan: Plan, fetcher: Fetcher, out_dir: Path, *, threads: int | None = None
) -> tuple[UnsignedBundle, FetchReport]:
    """Fetch and pack at once: downloads start in manifest order and each member is written as soon as it
    has arrived and been checked, so a cold build costs about the longer of the two, not their sum. The
    bytes do not depend on arrival order or thread count: members are always written in manifest order.

    Cache hits are checked by type and size only; the writer hashes every byte it packs, and a damaged
    entry (``DamagedSource``) is removed and everything fetched again, hashed, before one more write."""
    wanted = plan.wanted()
    sizes = {w.sha256: w.size for w in wanted if w.size is not None}
    unsized = [w for w in wanted if w.size is None]
    if unsized:  # the manifest, written first, names every size: these (few) are brought first
        for f in fetcher.fetch_all(unsized).files:
            sizes[f.wanted.sha256] = f.path.stat().st_size

    def source(sha: str) -> Callable[[], Path | HashedFile]:
        def arrived() -> Path | HashedFile:  # waits for that download (or cache check) only
            got = batch.fetched(sha)
            return got.hashed or got.path  # a download, hashed as it arrived: the writer hashes it once only

        return arrived

    manifest, entries = assemble_from(plan, source, sizes.__getitem__, plan.uv_version)
    by_sha = {w.sha256: w for w in wanted}
    # One line for both: the bytes downloaded (cache hits left out) and the bytes packed, each with its
    # rate, "downloading and packing"; the ETA follows the download while it runs (progress.py).
    shown = fetcher.progress
    downloads = shown.alongside("downloading", "downloaded")
    fetcher.hash_hits, fetcher.progress = False, downloads
    try:
        batch = Batch(fetcher, [by_sha[e.member.sha256] for e in entries if e.member.sha256 in by_sha])
        try:
            written = write(manifest, entries, out_dir, threads=threads, progress=shown)
        except DamagedSource as exc:
            batch.abort()
            fetcher.cache.discard(exc.sha256)
            downloads.close()
            shown.note(f"a cached file was damaged ({exc.message}); fetching it again")
            fetcher.hash_hits, fetcher.progress = True, shown
            report = fetcher.fetch_all(wanted)
            manifest, entries = assemble(plan, {f.wanted.sha256: f.path for f in report.files}, plan.uv_version)
            return write(manifest, entries, out_dir, threads=threads, progress=fetcher.progress), report
        except BaseException:
            batch.abort()
            raise
        try:
            report = batch.finish()
        except BaseException:
            written.discard()
            raise
        n = len(report.files)
        shown.note(
            f"fetched {n} file{'' if n == 1 else 's'}: {n - report.cached} downloaded, {report.cached} from "
            f"the cache ({report.downloaded_bytes / 1e6:,.1f} MB downloaded)"
        )
        return written, report
    finally:
        downloads.close()
        fetcher.hash_hits, fetcher.progress = True, shown


def _existing_signatures(path: Path) -> tuple[Block, ...]:
    """The blocks already beside the bundle being rebuilt (none if absent or unreadable: they are replaced)."""
    if not (path.exists() or path.is_symlink()):
        return ()
    try:
        return read_signatures(path)
    except SignatureError:
        return ()
