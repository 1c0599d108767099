"""The artifact a build is in a registry, and pull into a store, checking trust first (push: ``registry/push.py``).

One OCI manifest per build (docs/site-administrators.md, "Many nodes"): its config is the signed manifest,
one layer per distinct member by sha256, the signatures in an annotation. ``pull`` judges the blocks before
any blob is requested, then checks the config and every member against the signed sha256s."""

from __future__ import annotations

import hashlib
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lockbuild.bundle.extract import TIP
from lockbuild.bundle.manifest import Member
from lockbuild.digest import Hasher, pump, reading_chunks
from lockbuild.documents import loads_json
from lockbuild.errors import IntegrityError, LockbuildError, SignatureError
from lockbuild.fsio import open_regular, remove_at
from lockbuild.limits import DEFAULT_LIMITS, Limits
from lockbuild.progress import Progress
from lockbuild.registry import modelpack
from lockbuild.registry.api import MAX_OCI_MANIFEST, OCI_MANIFEST, Registry, RegistryError, TransferCut
from lockbuild.site.storage import Store
from lockbuild.site.storemodel import StoreError
from lockbuild.trust import load_trust_store, open_source, trust_dir
from lockbuild.trust.source import TIP_AGAIN, SizeCheck, Stream

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


def distinct(members: tuple[Member, ...]) -> list[Member]:
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
            for m in distinct(members)
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
        return IntegrityError(
            f"{where} is not a lockbuild artifact: {why}.", tip="Pull a tag that `lockbuild push` wrote."
        )

    try:
        doc: Any = loads_json(raw, what=where, max_bytes=MAX_OCI_MANIFEST, error=IntegrityError)
    except IntegrityError as exc:
        raise bad(exc.message.rstrip(".")) from None
    if not isinstance(doc, dict) or doc.get("schemaVersion") != 2:
        raise bad("its manifest is not an OCI image manifest")
    kind = doc.get("artifactType")
    if kind not in (ARTIFACT_TYPE, modelpack.ARTIFACT_TYPE):
        raise bad(f"its artifactType is {str(kind)[:80]!r}, expected {ARTIFACT_TYPE} or {modelpack.ARTIFACT_TYPE}")
    # a model's signed manifest is its one layer of the manifest's media type; an engine's is the config
    config = modelpack.signed_manifest_layer(doc, CONFIG_TYPE) if kind == modelpack.ARTIFACT_TYPE else doc.get("config")
    notes = doc.get("annotations")
    if not isinstance(config, dict) or config.get("mediaType") != CONFIG_TYPE or not isinstance(notes, dict):
        raise bad("its config or annotations are missing")
    digest, size = config.get("digest"), config.get("size")
    sigs, name = notes.get(SIGNATURES), notes.get(BUNDLE)
    if not isinstance(digest, str) or not digest.startswith("sha256:") or not isinstance(size, int):
        raise bad("its config has no sha256 digest and size")
    if not isinstance(sigs, str) or not isinstance(name, str):
        raise bad(f"it carries no {SIGNATURES} or {BUNDLE} annotation")
    try:
        blocks = sigs.encode("utf-8")  # a lone surrogate (\ud800 in the JSON) has no UTF-8 form
    except UnicodeEncodeError:
        raise bad(f"its {SIGNATURES} annotation is not text") from None
    return Artifact(name, blocks, digest, size)


class RegistryArtifact:
    """A registry's artifact as a source behind the one trust port: the signature blocks it carries,
    and its config blob (the manifest), requested only after the blocks met the policy. Its members are
    fetched by :func:`pull` in parallel, each checked against the signed manifest as it streams."""

    def __init__(self, registry: Registry, artifact: Artifact) -> None:
        self.registry = registry
        self.artifact = artifact
        self.label = str(registry.ref)
        self.file_name: str | None = artifact.bundle_name
        self.expect_ref: str | None = None
        self.where, self.subject = self.label, "the bundle's manifest"
        self.absent_tip, self.damage_tip, self.partial = TIP_AGAIN, TIP, False

    def signature_blocks(self, limits: Limits = DEFAULT_LIMITS) -> bytes:
        if len(self.artifact.signatures) > limits.max_signature_file:
            raise SignatureError(
                f"the signatures of {self.label} are {len(self.artifact.signatures)} bytes; "
                f"expected at most {limits.max_signature_file}.",
                tip="Push the build again from a checked store.",
            )
        return self.artifact.signatures

    def check_frames(self, limits: Limits = DEFAULT_LIMITS) -> None:
        """No frame tables: the members are checked."""
        return

    def file_digests(self, check: SizeCheck, limits: Limits = DEFAULT_LIMITS) -> None:
        return None

    def manifest_bytes(self, limits: Limits = DEFAULT_LIMITS, signed_sha256: str | None = None) -> bytes:
        a = self.artifact
        if signed_sha256 is not None and a.config_digest != f"sha256:{signed_sha256}":
            raise IntegrityError(
                f"{self.label} names the manifest {a.config_digest}; its signatures sign sha256:{signed_sha256}.",
                tip="The registry's artifact was altered or mixed up; push the build again from a checked store.",
            )
        if a.config_size > limits.max_manifest:
            raise IntegrityError(
                f"{self.label}: the manifest is {a.config_size} bytes; expected at most {limits.max_manifest}."
            )
        return self.registry.get_small_blob(a.config_digest, limits.max_manifest)

    def members(self, limits: Limits = DEFAULT_LIMITS) -> AbstractContextManager[Stream]:
        raise IntegrityError("internal: a registry artifact's members are fetched by pull, blob by blob.")


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
    artifact = parse_artifact(registry.get_manifest(registry.ref.tag), str(registry.ref))
    # The one trust decision, from the signature blocks alone, before any member blob is requested.
    trusted = open_source(RegistryArtifact(registry, artifact), load_trust_store(trust_dir(trust)), threshold=threshold)
    manifest, manifest_bytes, ref = trusted.manifest, trusted.manifest_bytes, trusted.ref
    if ref in store.refs() and store.build_files(ref)[0] != manifest_bytes:
        raise IntegrityError(
            f"the store already holds a different {ref}; nothing was fetched.",
            tip="Keep one store per site release train, or pull into another store.",
        )
    members = distinct(manifest.members)
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
        store.put_build(manifest, manifest_bytes, trusted.counted_signatures())
    progress.finish()
    return Moved(ref, len(members), moved, moved_bytes, trusted.signer_ids)


def _fetch(registry: Registry, store: Store, m: Member, progress: Progress) -> None:
    """One blob into tmp/<sha256>.partial (resuming what is there), checked, then into blobs/.

    A partial that already holds the whole blob (a pull killed after it was written) is checked and
    adopted without a request; a complete one that is wrong is deleted and fetched again, and so is,
    once, a blob resumed from bytes kept earlier (a bad mirror's) whose whole is wrong. The first
    failure stops the pull's other transfers (``Registry.stop``), so the error, and with it the
    store's lock, come back at once rather than after every running download."""
    try:
        _fetch_blob(registry, store, m, progress)
    except (LockbuildError, OSError) as exc:
        failure = exc if isinstance(exc, LockbuildError) else _write_error(store, m, exc)
        first = registry.stop(failure)
        if first is failure:
            raise failure from None
        raise type(first)(first.message, tip=first.tip) from None  # the first failure, whichever blob it was


def _write_error(store: Store, m: Member, exc: OSError) -> StoreError:
    return StoreError(
        f"cannot write the partial blob {store.partial(m.sha256)}: {exc.strerror or exc}.",
        tip="Check the store's disk (free space, permissions), then run the same pull again: it resumes.",
    )


def _fetch_blob(registry: Registry, store: Store, m: Member, progress: Progress) -> None:
    h: Hasher = hashlib.sha256()
    have = _hash_partial(store, m, h)
    if have == m.size:
        if h.hexdigest() == m.sha256:  # complete and right: adopted, nothing is requested
            progress.advance(m.size)
            store.adopt(store.partial(m.sha256), m.sha256)
            return
        remove_at(store.tmp, f"{m.sha256}.partial")  # complete but wrong: fetched again from the start
        have, h = 0, hashlib.sha256()
    have, h, whole = _download(registry, store, m, progress, have, h)
    if have == m.size and h.hexdigest() != m.sha256 and not whole:
        # bytes kept from an earlier answer (another registry's, a bad mirror's, or before a cut) may be
        # the wrong ones: discarded, and the blob asked for once from its first byte before blaming the registry
        remove_at(store.tmp, f"{m.sha256}.partial")
        have, h, _ = _download(registry, store, m, progress, 0, hashlib.sha256())
    _check_blob(store, m, have, h.hexdigest())


def _download(
    registry: Registry, store: Store, m: Member, progress: Progress, have: int, h: Hasher
) -> tuple[int, Hasher, bool]:
    """The blob from ``have`` into its partial, asking for the rest after a cut; and whether every byte
    of the partial came from one answer, which began at byte 0."""
    first, cuts = time.monotonic(), 0
    while True:
        try:
            return _stream_blob(registry, store, m, progress, have, h)
        except TransferCut as exc:  # the bytes so far are kept and counted: ask for the rest (Range)
            cuts += 1
            if not registry.resume_after_cut(cuts, first):
                raise exc.plain() from None
            h = hashlib.sha256()
            have = _hash_partial(store, m, h)


def _stream_blob(
    registry: Registry, store: Store, m: Member, progress: Progress, have: int, h: Hasher
) -> tuple[int, Hasher, bool]:
    """The blob's bytes from ``have`` appended to its partial (from 0 if the registry ignored Range); and
    whether this answer began at byte 0."""
    with registry.get_blob(f"sha256:{m.sha256}", size=m.size, offset=have) as (chunks, start):
        if start != have:
            have, h = 0, hashlib.sha256()
        with store.open_partial(m.sha256, append=bool(have)) as out:
            try:
                have += pump(reading_chunks(chunks), h.update, out.write, limit=m.size - have, advance=progress.advance)
            finally:
                out.flush()
                os.fsync(out.fileno())
    return have, h, start == 0


def _hash_partial(store: Store, m: Member, h: Hasher) -> int:
    """How many bytes of tmp/<sha256>.partial count (0: none, or more than the blob), hashed into ``h``."""
    have = store.partial_size(m.sha256)
    if not 0 < have <= m.size:
        return 0
    f, _ = open_regular(
        f"{m.sha256}.partial",
        what="partial blob",
        max_size=m.size,
        error=StoreError,
        dir_fd=store.tmp,
        shown=str(store.partial(m.sha256)),
    )
    with f:
        return pump(f.read, h.update, limit=have, peek=False)


def _check_blob(store: Store, m: Member, have: int, got: str) -> None:
    digest = f"sha256:{m.sha256}"
    if have > m.size:
        remove_at(store.tmp, f"{m.sha256}.partial")
        raise IntegrityError(
            f"the registry's blob for {m.path} ({digest}) is longer than the signed {m.size} bytes; refused."
        )
    if have < m.size:
        raise RegistryError(
            f"the registry's blob for {m.path} ended after {have} of {m.size} bytes.",
            tip="Run the same pull again: it resumes where this one stopped.",
        )
    if got != m.sha256:
        remove_at(store.tmp, f"{m.sha256}.partial")
        raise IntegrityError(
            f"the registry's blob for {m.path} is damaged: sha256 {got}, the signed manifest says {m.sha256}; refused.",
            tip="Push the build to the registry again from a checked store (the registry keeps the damaged blob until "
            "it is deleted there).",
        )
    store.adopt(store.partial(m.sha256), m.sha256)
