"""The site wing's one door to trust: every signature and manifest check of this wing is made here,
through the core's trust opener (``lockbuild.trust``).

- ``extract_bundle``: a ``.lbz`` and its ``.minisig``, checked exactly as ``install`` checks them
  (``open_bundle``: the signature policy over the whole file before anything is decompressed; then
  ``extract``: every member against the signed manifest while streaming), the members written into a
  staging directory.
- ``check_signatures`` then ``check_manifest``: signature blocks alone (no ``.lbz``), as a registry or
  a store holds them. Only the global signatures are checked (they cover the trusted comment, which
  carries the manifest's sha256), so the policy is decided from the blocks before any content is
  requested; the manifest bytes must then have the signed sha256.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

from lockbuild.bundle.manifest import Manifest
from lockbuild.errors import SignatureError
from lockbuild.limits import DEFAULT_LIMITS, Limits
from lockbuild.minisign import Signature, parse_signatures
from lockbuild.progress import Progress
from lockbuild.trust import (
    Statement,
    check_dates,
    evaluate,
    load_store,
    open_bundle,
    read_signatures,
    signature_path,
    signed_manifest,
    trust_dir,
)


@dataclass(frozen=True)
class TrustedBundle:
    """A bundle whose signatures met the policy and whose members all matched its signed manifest."""

    manifest: Manifest
    manifest_bytes: bytes
    signatures: bytes  # every .minisig block, as published (each node re-judges them with its own keys)
    signers: tuple[str, ...]  # key ids of the counted signers


def extract_bundle(
    bundle: Path,
    *,
    trust: Path | None,
    threshold: int | None,
    dest: Path,
    progress: Progress | None = None,
    limits: Limits = DEFAULT_LIMITS,
) -> TrustedBundle:
    """Check ``bundle`` as install does and write its members under ``dest`` (the caller removes it)."""
    opened = open_bundle(bundle, load_store(trust_dir(trust)), threshold=threshold, limits=limits)
    manifest = opened.extract(dest, progress=progress)
    blocks = "".join(s.to_text() for s in read_signatures(signature_path(bundle), limits)).encode()
    return TrustedBundle(manifest, opened.manifest_bytes, blocks, opened.signer_ids)


@dataclass(frozen=True)
class SignedClaim:
    """What enough trusted signatures assert, proven from the signature blocks alone."""

    statement: Statement
    signers: tuple[str, ...]

    @property
    def manifest_sha256(self) -> str:
        return self.statement.manifest_sha256


def check_signatures(
    signatures: bytes,
    *,
    name: str | None,
    trust: Path | None,
    threshold: int | None,
    now: dt.datetime | None = None,
    source: str = "signatures",
) -> SignedClaim:
    """Enough distinct trusted keys signed a statement about the bundle file ``name`` (whose manifest
    digest it carries); raise SignatureError listing why each signature did not count otherwise.
    ``name=None``: the file name the statements give (the manifest check then requires it to be the
    manifest's own bundle name)."""
    store = load_store(trust_dir(trust))
    blocks = parse_signatures(signatures, source=source)
    current = now or dt.datetime.now(dt.UTC)
    if name is None:  # a store names builds, not files: try the file name each statement gives
        names = sorted({st.file for st in _statements(blocks)}) or [""]
        tried = [evaluate(blocks, store, name=n, now=current, threshold=threshold) for n in names]
        evaluation = next((e for e in tried if e.met), tried[0])
    else:
        evaluation = evaluate(blocks, store, name=name, now=current, threshold=threshold)
    statement = evaluation.require()
    check_dates(statement, store.policy)
    return SignedClaim(statement, tuple(k.key_id_hex for k in evaluation.signers))


def _statements(blocks: tuple[Signature, ...]) -> list[Statement]:
    out = []
    for b in blocks:
        try:
            out.append(Statement.from_comment(b.trusted_comment))
        except SignatureError:
            continue  # judged (and reported) by evaluate()
    return out


def check_manifest(claim: SignedClaim, manifest_bytes: bytes, limits: Limits = DEFAULT_LIMITS) -> Manifest:
    """The manifest bytes are exactly the signed ones, and say what the signed statement says."""
    return signed_manifest(claim.statement, manifest_bytes, limits)


def check_signed_manifest(
    manifest_bytes: bytes,
    signatures: bytes,
    *,
    name: str | None,
    trust: Path | None,
    threshold: int | None,
    now: dt.datetime | None = None,
) -> tuple[Manifest, SignedClaim]:
    """Signature blocks and manifest bytes, as a store keeps them: both checked, the manifest parsed."""
    claim = check_signatures(signatures, name=name, trust=trust, threshold=threshold, now=now)
    return check_manifest(claim, manifest_bytes), claim
