"""From a plan and its fetched files to a signed bundle in the output directory (all or nothing)."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO, cast

import zstandard

from lockbuild import __version__
from lockbuild.builder.plan import Plan
from lockbuild.bundle.buildlock import BUILD_DIR, BUILD_LOCK, KIND, build_lock_text
from lockbuild.bundle.instructions import AssetPlace, GpuNeeds, InstallTable, SourcePlace
from lockbuild.bundle.manifest import Manifest, Member, bundle_name, member_order
from lockbuild.bundle.paths import env_reserved
from lockbuild.bundle.write import DamagedSource, Entry, write_bundle
from lockbuild.digest import HashingWriter
from lockbuild.errors import RecipeError, SignatureError
from lockbuild.lock import bundle_pylock, bundle_requirements
from lockbuild.minisign import SecretKey, Signature
from lockbuild.progress import Progress
from lockbuild.times import iso
from lockbuild.trust import FileDigests, Statement, carry_over, read_signatures, sign_statement, signature_path


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
                "externalReferences": [{"type": "distribution", "url": f.url}],
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


def _bytes_member(path: str, data: bytes, kind: str) -> tuple[Member, bytes]:
    return Member(path, len(data), hashlib.sha256(data).hexdigest(), kind, ""), data


def install_table(plan: Plan, members: list[Member]) -> InstallTable:
    """The manifest's [install] table from the recipe: the node's only instructions."""
    engine, b = plan.recipe.engine, plan.build
    by_kind = {m.kind: m.path for m in members}
    tools = [m.path for m in members if m.kind == "tool"]
    if len(tools) != 1:
        raise RecipeError(f"internal: the plan carries {len(tools)} uv wheels; expected exactly one.")
    if not any(m.kind == "wheel" for m in members) and not any(m.kind == "sdist" for m in members):
        raise RecipeError(
            f"{plan.recipe.path}: the lock of {b.id} holds no package at all; there is nothing to install.",
            tip="Check the build's requirements.",
        )
    source = None
    if b.source is not None:
        member = f"source/{PurePosixPath(b.source.url).name}"
        source = SourcePlace(member, b.source.dir, b.source.top or "")
    assets = []
    if b.assets is not None:
        for name in b.assets.files:
            clash = env_reserved(f"{b.assets.dir}/{name}")
            if clash:
                raise RecipeError(
                    f"{plan.recipe.path}: builds[{b.position}].assets would place {name} in {b.assets.dir}/, "
                    f"where {clash}.",
                    tip="Choose another assets.dir (for example the engine's name).",
                )
            assets.append(AssetPlace(f"assets/{name}", b.assets.dir))
    gpu = None
    if b.gpu is not None:
        gpu = GpuNeeds(b.gpu.min_capability, b.gpu.min_driver)
    return InstallTable(
        binary=engine.binary,
        verify=engine.verify,
        gpu_probe=engine.gpu_probe,
        uv=tools[0],
        gpu=gpu,
        free_gb=b.free_gb or 0,
        source=source,
        assets=tuple(assets),
        interpreter=by_kind.get("interpreter"),
        requirements=tuple(b.requirements),
        env=engine.env,
        smoke=engine.smoke,
        allow_network=engine.allow_network,
    )


def assemble(plan: Plan, fetched: Mapping[str, Path], uv_version: str) -> tuple[Manifest, list[Entry]]:
    """The manifest and the ordered entries of the bundle; ``fetched`` maps sha256 to a verified file."""
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
        text = build_lock_text(plan.build_deps, plan.build_requires)
        generated.append(_bytes_member(BUILD_LOCK, text.encode(), "lock"))
    entries: list[Entry] = [Entry(m, data) for m, data in generated]
    for f in plan.lock.files:
        src = fetched[f.sha256]
        entries.append(Entry(Member(f.bundle_path, src.stat().st_size, f.sha256, f.kind, f.url), src))
    for f in plan.build_deps:
        src = fetched[f.sha256]
        entries.append(Entry(Member(f"{BUILD_DIR}/{f.filename}", src.stat().st_size, f.sha256, KIND, f.url), src))
    for e in plan.extras:
        src = fetched[e.sha256]
        entries.append(Entry(Member(e.path, src.stat().st_size, e.sha256, e.kind, e.url), src))
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
    )
    return manifest, entries


def signature_block(
    key: SecretKey, name: str, digests: FileDigests, manifest: Manifest, *, expires: dt.datetime | None = None
) -> str:
    """One minisign ED signature over the bundle file ``name`` with ``digests``; its trusted comment is
    the signed statement (lockbuild.trust.statement), manifest digest and file size included."""
    statement = Statement.of(manifest, name=name, sha256=digests.sha256, size=digests.size, expires=expires)
    return sign_statement(key, statement, digests.blake2b)


def pack(
    plan: Plan,
    fetched: Mapping[str, Path],
    out_dir: Path,
    *,
    key: SecretKey | None,
    uv_version: str,
    expires: dt.datetime | None = None,
    threads: int | None = None,
    progress: Progress | None = None,
) -> Packed:
    """Write NAME.lbz (and NAME.lbz.minisig) into ``out_dir``; on failure ``out_dir`` gets nothing."""
    manifest, entries = assemble(plan, fetched, uv_version)
    out_dir.mkdir(parents=True, exist_ok=True)
    final = out_dir / manifest.bundle_name
    tmp = out_dir / f".{manifest.bundle_name}.{os.getpid()}.partial"
    tmp_sig = out_dir / f".{manifest.bundle_name}.minisig.{os.getpid()}.partial"
    try:
        with tmp.open("wb") as raw:
            out = HashingWriter(raw)  # the bundle is hashed as it is written, never read back
            write_bundle(cast(BinaryIO, out), manifest, entries, threads=threads, progress=progress)
            raw.flush()
            os.fsync(raw.fileno())
        digests = FileDigests(*out.hasher.finish())
        sig_final = None
        kept: tuple[Signature, ...] = ()
        dropped: tuple[Signature, ...] = ()
        if key is not None:
            sig_final = signature_path(final)
            statement = Statement.of(manifest, name=final.name, sha256=digests.sha256, size=digests.size,
                                     expires=expires)  # fmt: skip
            kept, dropped = carry_over(_existing_signatures(sig_final), statement, key.key_id)
            block = sign_statement(key, statement, digests.blake2b)
            tmp_sig.write_text(block + "".join(s.to_text() for s in kept), encoding="utf-8")
        tmp.replace(final)
        if sig_final is not None:
            tmp_sig.replace(sig_final)
    finally:
        tmp.unlink(missing_ok=True)
        tmp_sig.unlink(missing_ok=True)
    return Packed(final, sig_final, manifest, digests.sha256, digests.size,
                  tuple(s.key_id_hex for s in kept), tuple(s.key_id_hex for s in dropped))  # fmt: skip


def pack_or_refetch(
    plan: Plan,
    fetched: Mapping[str, Path],
    out_dir: Path,
    refetch: Callable[[str], Mapping[str, Path]],
    **kw: Any,
) -> Packed:
    """``pack``, where ``fetched`` came from the cache checked by size only: the writer hashes every
    byte it packs, so a damaged entry is found there (``DamagedSource``); then ``refetch(sha256)``
    (remove that entry, fetch the plan's files again, hashing them) and pack once more."""
    try:
        return pack(plan, fetched, out_dir, **kw)
    except DamagedSource as exc:
        progress = kw.get("progress")
        if progress is not None:
            progress.note(f"a cached file was damaged ({exc.message}); fetching it again")
        return pack(plan, refetch(exc.sha256), out_dir, **kw)


def _existing_signatures(path: Path) -> tuple[Signature, ...]:
    """The blocks already beside the bundle being rebuilt (none if absent or unreadable: they are replaced)."""
    if not (path.exists() or path.is_symlink()):
        return ()
    try:
        return read_signatures(path)
    except SignatureError:
        return ()
