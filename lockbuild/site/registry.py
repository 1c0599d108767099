"""Push a store's build to an OCI registry, and pull one into a store, checking trust first.

The artifact (docs/site-administrators.md, "Many nodes"): one OCI image manifest per build, with

- ``artifactType`` ``application/vnd.lockbuild.bundle.v1``;
- ``config``: the signed manifest (``bundle.toml``), media type ``application/vnd.lockbuild.manifest.v1+toml``,
  so its OCI digest is the manifest's sha256 that every signature names;
- ``layers``: one blob per distinct member, whose OCI digest is the member's sha256 (so versions share
  blobs and nothing is uploaded twice), titled with the member's path;
- ``annotations``: ``dev.lockbuild.signatures``, the ``.minisig`` blocks, and ``dev.lockbuild.bundle``,
  the bundle's file name. A co-signature added later is pushed by pushing the build again: only the
  OCI manifest changes.

``pull`` reads the OCI manifest, judges the signature blocks it carries against the trust directory,
and only then requests a blob: first the config (whose digest must be the signed manifest sha256),
then the members the store lacks, each sha256-checked as it streams into the store's tmp/, resumed
from where an interrupted pull stopped.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from lockbuild.bundle.manifest import Member
from lockbuild.digest import CHUNK
from lockbuild.errors import IntegrityError
from lockbuild.limits import DEFAULT_LIMITS
from lockbuild.progress import Progress
from lockbuild.site.oci import OCI_MANIFEST, Registry, RegistryError
from lockbuild.site.store import Store
from lockbuild.site.trusted import check_manifest, check_signatures

ARTIFACT_TYPE = "application/vnd.lockbuild.bundle.v1"
CONFIG_TYPE = "application/vnd.lockbuild.manifest.v1+toml"
MEMBER_TYPE = "application/vnd.lockbuild.member.v1"
SIGNATURES = "dev.lockbuild.signatures"
BUNDLE = "dev.lockbuild.bundle"
TITLE = "org.opencontainers.image.title"


@dataclass(frozen=True)
class Moved:
    ref: str
    blobs: int  # distinct member blobs in the build
    moved: int  # blobs uploaded or downloaded
    moved_bytes: int
    signers: tuple[str, ...] = ()


def _distinct(members: tuple[Member, ...]) -> list[Member]:
    seen: dict[str, Member] = {}
    for m in members:
        seen.setdefault(m.sha256, m)
    return list(seen.values())


def oci_manifest(manifest_bytes: bytes, members: tuple[Member, ...], signatures: bytes, bundle_name: str) -> bytes:
    doc = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": ARTIFACT_TYPE,
        "config": {
            "mediaType": CONFIG_TYPE,
            "digest": "sha256:" + hashlib.sha256(manifest_bytes).hexdigest(),
            "size": len(manifest_bytes),
        },
        "layers": [
            {"mediaType": MEMBER_TYPE, "digest": f"sha256:{m.sha256}", "size": m.size, "annotations": {TITLE: m.path}}
            for m in _distinct(members)
        ],
        "annotations": {SIGNATURES: signatures.decode("utf-8"), BUNDLE: bundle_name},
    }
    return json.dumps(doc, indent=1, sort_keys=True).encode()


@dataclass(frozen=True)
class Artifact:
    """What a pulled OCI manifest claims (unchecked until the signatures are judged)."""

    bundle_name: str
    signatures: bytes
    config_digest: str
    config_size: int


def parse_artifact(raw: bytes, where: str) -> Artifact:
    def bad(why: str) -> IntegrityError:
        return IntegrityError(f"{where} is not a lockbuild artifact: {why}.",
                              tip="Pull a tag that `lockbuild push` wrote.")  # fmt: skip

    try:
        doc: Any = json.loads(raw)
    except (ValueError, RecursionError):
        raise bad("its manifest is not JSON") from None
    if not isinstance(doc, dict) or doc.get("schemaVersion") != 2:
        raise bad("its manifest is not an OCI image manifest")
    if doc.get("artifactType") != ARTIFACT_TYPE:
        raise bad(f"its artifactType is {str(doc.get('artifactType'))[:80]!r}, expected {ARTIFACT_TYPE}")
    config, notes = doc.get("config"), doc.get("annotations")
    if not isinstance(config, dict) or config.get("mediaType") != CONFIG_TYPE or not isinstance(notes, dict):
        raise bad("its config or annotations are missing")
    digest, size = config.get("digest"), config.get("size")
    sigs, name = notes.get(SIGNATURES), notes.get(BUNDLE)
    if not isinstance(digest, str) or not digest.startswith("sha256:") or not isinstance(size, int):
        raise bad("its config has no sha256 digest and size")
    if not isinstance(sigs, str) or not isinstance(name, str):
        raise bad(f"it carries no {SIGNATURES} or {BUNDLE} annotation")
    return Artifact(name, sigs.encode("utf-8"), digest, size)


def push(store: Store, build_ref: str, registry: Registry, *, progress: Progress | None = None) -> Moved:
    progress = progress or Progress.quiet()
    build = store.build(build_ref)
    m = build.manifest
    members = _distinct(m.members)
    moved = moved_bytes = 0
    progress.start("pushing", total_bytes=sum(x.size for x in members), files=len(members))
    for x in members:
        if not registry.has_blob(f"sha256:{x.sha256}"):
            with store.open_blob(x.sha256) as f:
                registry.upload_blob(f"sha256:{x.sha256}", f, x.size)
            moved += 1
            moved_bytes += x.size
        progress.advance(x.size)
        progress.file_done()
    config = "sha256:" + hashlib.sha256(build.manifest_bytes).hexdigest()
    if not registry.has_blob(config):
        registry.upload_blob(config, io.BytesIO(build.manifest_bytes), len(build.manifest_bytes))
    registry.put_manifest(registry.ref.tag, oci_manifest(build.manifest_bytes, m.members, build.signatures,
                                                         m.bundle_name))  # fmt: skip
    progress.finish()
    return Moved(build.ref, len(members), moved, moved_bytes)


def pull(
    registry: Registry,
    store: Store,
    *,
    trust: Path | None,
    threshold: int | None = None,
    progress: Progress | None = None,
    wait: float = 0.0,
    jobs: int = 4,
) -> Moved:
    progress = progress or Progress.quiet()
    where = str(registry.ref)
    artifact = parse_artifact(registry.get_manifest(registry.ref.tag), where)
    # Trust first: the signature blocks alone, before any blob is requested.
    claim = check_signatures(artifact.signatures, name=artifact.bundle_name, trust=trust, threshold=threshold,
                             source=f"the signatures of {where}")  # fmt: skip
    if artifact.config_digest != f"sha256:{claim.manifest_sha256}":
        raise IntegrityError(
            f"{where} names the manifest {artifact.config_digest}; its signatures sign sha256:{claim.manifest_sha256}.",
            tip="The registry's artifact was altered or mixed up; push the build again from a checked store.",
        )
    if artifact.config_size > DEFAULT_LIMITS.max_manifest:
        raise IntegrityError(f"{where}: the manifest is {artifact.config_size} bytes; expected at most "
                             f"{DEFAULT_LIMITS.max_manifest}.")  # fmt: skip
    manifest_bytes = registry.get_small_blob(artifact.config_digest, DEFAULT_LIMITS.max_manifest)
    manifest = check_manifest(claim, manifest_bytes)
    ref = f"{manifest.engine}/{manifest.version}-{manifest.variant}"
    if ref in store.refs() and store.build_files(ref)[0] != manifest_bytes:
        raise IntegrityError(f"the store already holds a different {ref}; nothing was fetched.",
                             tip="Keep one store per site release train, or pull into another store.")  # fmt: skip
    members = _distinct(manifest.members)
    moved = moved_bytes = 0
    with store.lock(exclusive=True, wait=wait):
        missing = [m for m in members if not store.has_blob(m.sha256, m.size)]
        progress.start("pulling", total_bytes=sum(m.size for m in missing), files=len(missing))
        with ThreadPoolExecutor(max_workers=max(1, jobs), thread_name_prefix="pull") as pool:
            futures = [pool.submit(_fetch, registry, store, m, progress) for m in missing]
            try:
                for m, future in zip(missing, futures, strict=True):
                    future.result()  # the first failure stops the pull (the finished blobs stay)
                    moved += 1
                    moved_bytes += m.size
                    progress.file_done()
            finally:
                for future in futures:
                    future.cancel()
        store.sync()
        store.put_build(manifest, manifest_bytes, artifact.signatures)
    progress.finish()
    return Moved(ref, len(members), moved, moved_bytes, claim.signers)


def _fetch(registry: Registry, store: Store, m: Member, progress: Progress) -> None:
    """One blob into tmp/<sha256>.partial (resuming what is there), checked, then into blobs/."""
    digest = f"sha256:{m.sha256}"
    have = store.partial_size(m.sha256)
    if have > m.size:
        have = 0
    h = hashlib.sha256()
    if have:
        with store.partial(m.sha256).open("rb") as f:
            left = have
            while left and (chunk := f.read(min(CHUNK, left))):
                h.update(chunk)
                left -= len(chunk)
    try:
        with registry.get_blob(digest, offset=have) as (r, start):
            if start != have:
                have, h = 0, hashlib.sha256()
            with store.open_partial(m.sha256, append=bool(have)) as out:
                for chunk in r.iter_bytes(CHUNK):
                    have += len(chunk)
                    if have > m.size:
                        break
                    h.update(chunk)
                    out.write(chunk)
                    progress.advance(len(chunk))
                out.flush()
                os.fsync(out.fileno())
    except httpx.HTTPError as exc:
        raise RegistryError(
            f"the download of {m.path} ({digest}) from {registry.ref.host} broke off: {type(exc).__name__}.",
            tip="Run the same pull again: it resumes where this one stopped.",
        ) from None
    if have > m.size:
        store.partial(m.sha256).unlink(missing_ok=True)
        raise IntegrityError(f"the registry's blob for {m.path} ({digest}) is longer than the signed {m.size} bytes; "
                             "refused.")  # fmt: skip
    if have < m.size:
        raise RegistryError(f"the registry's blob for {m.path} ended after {have} of {m.size} bytes.",
                            tip="Run the same pull again: it resumes where this one stopped.")  # fmt: skip
    got = h.hexdigest()
    if got != m.sha256:
        store.partial(m.sha256).unlink(missing_ok=True)
        raise IntegrityError(
            f"the registry's blob for {m.path} is damaged: sha256 {got}, the signed manifest says {m.sha256}; refused.",
            tip="Push the build to the registry again from a checked store (the registry keeps the damaged blob until "
            "it is deleted there).",
        )
    store.adopt(store.partial(m.sha256), m.sha256)
