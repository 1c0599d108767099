"""The one opener: the only place the trust path touches the file system.

``open_bundle`` reads the trust directory and the ``.minisig``, opens the bundle as a regular file of
bounded size, refuses an incomplete copy by its signed size before hashing, hashes it once, lets the
pure policy decide, and only then reads the manifest, which must be the signed one. What it returns,
a :class:`TrustedBundle`, is the only way to the members: its ``extract`` enforces the checked file
digest and the signed manifest. ``lockbuild verify`` and ``Installer.install`` both start here.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lockbuild.bundle.manifest import Manifest
from lockbuild.bundle.read import read_bundle, read_head_raw
from lockbuild.digest import CHUNK, TwinHasher
from lockbuild.errors import IntegrityError, SignatureError
from lockbuild.limits import DEFAULT_LIMITS, Limits
from lockbuild.minisign import PublicKey, Signature, parse_public_key, parse_signatures
from lockbuild.minisign.keyfiles import read_text
from lockbuild.progress import Progress
from lockbuild.regular import open_regular, read_regular
from lockbuild.trust.policy import (
    Evaluation,
    FileDigests,
    check_complete,
    check_dates,
    check_manifest,
    evaluate,
)
from lockbuild.trust.statement import Statement
from lockbuild.trust.store import POLICY_FILE, REVOKED_FILE, TrustStore, build_store

DEFAULT_TRUST_DIR = Path("/etc/lockbuild/keys")


def signature_path(bundle: Path) -> Path:
    return bundle.with_name(bundle.name + ".minisig")


def _optional_text(path: Path, what: str) -> str | None:
    """A trust-directory file that may be absent (None); present but unreadable in any way (a dangling
    symlink, a directory, no permission, not UTF-8) fails closed."""
    try:
        return read_text(path, what=what)
    except SignatureError as exc:
        if not (path.exists() or path.is_symlink()):
            return None
        raise SignatureError(f"{exc.message}; the trust store fails closed.", tip=exc.tip) from None


def load_store(directory: Path) -> TrustStore:
    """Every ``*.pub`` in ``directory``, ``revoked.txt`` and ``policy.toml``; anything malformed fails closed."""
    tip = (f"Put the publishers' minisign .pub files in {directory} (and optionally revoked.txt with one key id"
           " per line); remove or fix any file that is not a valid public key.")  # fmt: skip
    if not directory.is_dir():
        state = "is not a directory" if directory.exists() else "does not exist"
        raise SignatureError(f"trust directory {directory} {state}: expected a directory of .pub files", tip=tip)
    try:
        pub_files = sorted(p for p in directory.iterdir() if p.name.endswith(".pub"))
    except OSError as exc:
        raise SignatureError(f"cannot list trust directory {directory}: {exc.strerror or exc}", tip=tip) from None
    keys: list[tuple[str, PublicKey]] = []
    for pub in pub_files:
        try:
            keys.append((pub.name, parse_public_key(read_text(pub, what="public key"), source=str(pub))))
        except SignatureError as exc:
            raise SignatureError(f"malformed public key in trust directory: {exc.message}", tip=tip) from None
    return build_store(
        keys,
        source=str(directory),
        revoked=_optional_text(directory / REVOKED_FILE, "revocation list") or "",
        policy=_optional_text(directory / POLICY_FILE, "policy"),
    )


def read_signatures(path: Path, limits: Limits = DEFAULT_LIMITS) -> tuple[Signature, ...]:
    """The blocks of a ``.minisig`` (a regular file of at most ``limits.max_signature_file`` bytes)."""
    try:
        raw = read_regular(path, what="signature file", max_size=limits.max_signature_file, error=SignatureError)
    except FileNotFoundError:
        raise SignatureError(
            f"no signature file {path}; expected the bundle's .minisig beside it.",
            tip="Copy the .lbz.minisig that was published with the bundle next to it.",
        ) from None
    return parse_signatures(raw, source=str(path), max_bytes=limits.max_signature_file)


def digest_bundle(
    path: Path, limits: Limits = DEFAULT_LIMITS, check: Callable[[int], None] | None = None
) -> FileDigests:
    """Open the bundle (a regular file, bounded), run ``check(size)`` before reading a byte, then hash it
    (sha256 and BLAKE2b-512, one pass)."""
    try:
        f, size = open_regular(path, what="bundle", max_size=limits.max_bundle, error=IntegrityError)
    except FileNotFoundError:
        raise IntegrityError(f"the bundle {path} does not exist.", tip="Check the path.") from None
    with f:
        if check is not None:
            check(size)
        hasher = TwinHasher()
        left = size
        while left:
            chunk = f.read(min(CHUNK, left))
            if not chunk:
                raise IntegrityError(f"the bundle {path} shrank while it was read: expected {size} bytes.")
            hasher.update(chunk)
            left -= len(chunk)
        if f.read(1):
            raise IntegrityError(f"the bundle {path} grew while it was read: expected {size} bytes.")
    return FileDigests(*hasher.finish())


@dataclass(frozen=True)
class TrustedBundle:
    """A bundle file whose signatures met the policy, and whose manifest is the signed one."""

    path: Path
    digests: FileDigests
    evaluation: Evaluation
    statement: Statement
    manifest: Manifest
    manifest_bytes: bytes  # exactly as the bundle carries them: the bytes the signed manifest-sha256 covers
    limits: Limits = DEFAULT_LIMITS

    @property
    def signers(self) -> tuple[PublicKey, ...]:
        return self.evaluation.signers

    @property
    def signer_ids(self) -> tuple[str, ...]:
        return tuple(k.key_id_hex for k in self.signers)

    def _same_manifest(self, manifest: Manifest, manifest_bytes: bytes) -> None:
        check_manifest(self.statement, manifest, manifest_bytes)
        if manifest_bytes != self.manifest_bytes or manifest != self.manifest:
            raise IntegrityError("the bundle changed while it was read: its manifest differs from the first read.")

    def extract(self, dest: Path | None = None, *, progress: Progress | None = None) -> Manifest:
        """Check every member against the signed manifest (and with ``dest``, write them there); the bytes
        read must be the file whose digests the signatures were checked over."""
        return read_bundle(self.path, dest=dest, limits=self.limits, progress=progress,
                           on_manifest=self._same_manifest, expect_sha256=self.digests.sha256)  # fmt: skip


def open_bundle(
    bundle: Path,
    store: TrustStore,
    *,
    threshold: int | None = None,
    now: dt.datetime | None = None,
    limits: Limits = DEFAULT_LIMITS,
) -> TrustedBundle:
    """Check ``bundle`` against ``store``; raise (SignatureError, IntegrityError) unless it is trusted."""
    current = now or dt.datetime.now(dt.UTC)
    signatures = read_signatures(signature_path(bundle), limits)
    digests = digest_bundle(bundle, limits, lambda size: check_complete(signatures, store, name=bundle.name, size=size))
    evaluation = evaluate(signatures, store, name=bundle.name, now=current, file=digests, threshold=threshold)
    statement = evaluation.require()
    check_dates(statement, store.policy)
    head = read_head_raw(bundle, limits)  # parsed only now, after the policy is met
    check_manifest(statement, head.manifest, head.manifest_bytes)
    return TrustedBundle(bundle, digests, evaluation, statement, head.manifest, head.manifest_bytes, limits)


@dataclass(frozen=True)
class VerifyResult:
    bundle: Path
    sha256: str
    size: int
    signers: tuple[str, ...]
    members: int
    evaluation: Evaluation

    def to_json(self) -> dict[str, Any]:
        return {"bundle": str(self.bundle), "sha256": self.sha256, "size": self.size, "signers": list(self.signers),
                "members": self.members, "policy": self.evaluation.to_json()}  # fmt: skip


def verify_bundle(
    bundle: Path,
    store: TrustStore,
    *,
    threshold: int | None = None,
    now: dt.datetime | None = None,
    progress: Progress | None = None,
) -> VerifyResult:
    """``lockbuild verify``: the signatures, then every member against the signed manifest."""
    trusted = open_bundle(bundle, store, threshold=threshold, now=now)
    manifest = trusted.extract(progress=progress)
    return VerifyResult(bundle, trusted.digests.sha256, trusted.digests.size, trusted.signer_ids,
                        len(manifest.members), trusted.evaluation)  # fmt: skip


def trust_dir(explicit: Path | None) -> Path:
    """The trust directory: the one given (``--trust``, or ``LOCKBUILD_TRUST_DIR`` as the CLI reads it), else
    the default. No library module reads the environment."""
    return explicit if explicit is not None else DEFAULT_TRUST_DIR
