"""Who counts, and why: the pure evaluation of a bundle's signatures against a trust store. No I/O.

Inputs: the signature blocks, the store, the bundle's name, its size and digests where known, and the
time; output: an :class:`Evaluation` in which each signature counts or says why not. A trusted key's bad
signature is a hard failure; anything else only stops that signature from counting (:func:`evaluate`)."""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lockbuild.bundle.manifest import Manifest
from lockbuild.bundle.manifestparse import parse_manifest
from lockbuild.errors import IntegrityError, SignatureError
from lockbuild.limits import DEFAULT_LIMITS, Limits
from lockbuild.times import iso
from lockbuild.trust.scheme import SCHEME, Block, Identity
from lockbuild.trust.statement import Statement
from lockbuild.trust.truststore import Policy, TrustStore

CLOCK_SKEW = dt.timedelta(minutes=10)
_ALTERED_TIP = (
    "Do not install this bundle: it or its signature was altered. Re-download both from the publisher"
    " and report the mismatch."
)


@dataclass(frozen=True)
class FileDigests:
    """What is known of the bundle file: its size and sha256, which every lockbuild statement signs and
    which alone bind the file to a counted signature; and, where it was computed (to sign, or for tests),
    its BLAKE2b-512, minisign's prehash, over which the ``ED`` file signature is checked as well. The
    node does not compute it: stock ``minisign -V`` checks the file signature, lockbuild the statement."""

    size: int
    sha256: str | None  # None: a framed file read by the node, bound by its frame tables instead
    blake2b: bytes | None = None
    frames_sha256: str | None = None  # a framed file's: the sha256 of its frame tables
    frames: int | None = None  # and how many frames they list

    @property
    def whole(self) -> str:
        """The whole file's sha256, where it was hashed whole (to sign it, an image, a report's bundle)."""
        if self.sha256 is None:
            raise SignatureError("internal: the file was checked by its frames, not hashed whole.")
        return self.sha256

    def prehash(self, what: str) -> bytes:
        """The BLAKE2b-512 a minisign ``ED`` block signs; ``what`` (the file) was hashed with ``prehash``."""
        if self.blake2b is None:
            raise SignatureError(f"internal: {what} was hashed without minisign's prehash; it cannot be signed.")
        return bytes(self.blake2b)


@dataclass(frozen=True)
class Verdict:
    """One signature block: does it count, and if not, why."""

    index: int
    key_id: str
    counts: bool
    reason: str = ""
    signer: Identity | None = None
    statement: Statement | None = None
    kind: str = ""  # why it does not count, as a word: the key of REFUSAL_TIPS

    @property
    def label(self) -> str:
        return f"signature {self.index} (key {self.key_id})"

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "key_id": self.key_id, "counts": self.counts, "reason": self.reason}


@dataclass(frozen=True)
class Evaluation:
    verdicts: tuple[Verdict, ...]
    threshold: int
    source: str
    statement: Statement | None  # what the counted signatures agree on

    @property
    def counted(self) -> tuple[Verdict, ...]:
        return tuple(v for v in self.verdicts if v.counts)

    @property
    def signers(self) -> tuple[Identity, ...]:
        return tuple(v.signer for v in self.counted if v.signer is not None)

    @property
    def met(self) -> bool:
        return self.statement is not None and len(self.counted) >= self.threshold

    def require(self) -> Statement:
        """The agreed statement, or a SignatureError that lists why each signature did not count."""
        if self.met and self.statement is not None:
            return self.statement
        n = len(self.verdicts)
        found = f"{n} signature(s) present" if n else "no signatures present"
        reasons = [f"{v.label} {v.reason}" for v in self.verdicts if not v.counts]
        detail = "; ".join(reasons) if reasons else "every signature present counted; more distinct signers are needed"
        raise SignatureError(
            f"signature policy not met: needed {self.threshold} valid signature(s) from distinct trusted,"
            f" non-revoked keys in {self.source}, found {len(self.counted)} ({found}). {detail}",
            tip=refusal_tip(self.verdicts, self.threshold),
        )

    def to_json(self) -> dict[str, Any]:
        return {"threshold": self.threshold, "met": self.met, "signatures": [v.to_json() for v in self.verdicts]}


def file_mismatch(st: Statement, file: FileDigests) -> str | None:
    """Why the file is not the one ``st`` signs (None: its size and sha256 are the signed ones)."""
    if st.size != file.size:
        return f"it signs a file of {st.size} bytes; this one has {file.size}"
    if st.frames_sha256 is not None or file.frames_sha256 is not None:
        if file.frames_sha256 is None:
            return "it signs a framed bundle; this file has no frame table"
        if st.frames_sha256 is None:
            return "it signs no frame table; this file carries one (re-sign it with this lockbuild)"
        if st.frames_sha256 != file.frames_sha256:
            return f"it signs frame tables of sha256 {st.frames_sha256}; this file's have {file.frames_sha256}"
    if file.sha256 is not None and st.sha256 != file.sha256:
        return f"it signs sha256 {st.sha256}; this file has sha256 {file.sha256}"
    if file.sha256 is None and file.frames_sha256 is None:
        return "internal: the file was not hashed"
    return None


def statement_problem(st: Statement, *, name: str | None, now: dt.datetime) -> tuple[str, str] | None:
    """(kind, why) a cryptographically good statement does not hold at this time, or for a file of this
    name (None: it holds). ``name=None``: no file name to compare (a signature block checked on its own)."""
    if name is not None and st.file != name:
        return "renamed", f"is for {st.file!r}, but the bundle file is named {name!r} (a renamed or swapped bundle)"
    if st.expires is not None and now >= st.expires:
        return "expired", f"expired at {iso(st.expires)} (now {iso(now)})"
    if now + CLOCK_SKEW < st.as_of:
        return "future", (
            f"is from {iso(st.as_of)}, after this machine's clock ({iso(now)}): set the node's clock"
            " correctly, expiry checks depend on it"
        )
    return None


# What to do about a signature that does not count, by why (Verdict.kind); the first kind found in this
# order decides the tip of a policy that is not met.
REFUSAL_TIPS: dict[str, str] = {
    "renamed": "Use the bundle under the name it was signed as, {file} (rename it and its .minisig back): "
    "a bundle's name is part of what is signed.",
    "expired": "Ask the publisher for a freshly signed bundle (lockbuild sign --expires ...).",
    "future": "Set this machine's clock correctly (timedatectl, chrony); the signature is newer than its clock.",
    "revoked": "The key was revoked at this site: ask the publisher for the bundle signed by a key that is not.",
    "untrusted": "Add the publisher's .pub file to the trust directory if you do trust it, or get the bundle "
    "signed by a key it already holds.",
    "legacy": "Sign the bundle again with lockbuild sign (or minisign -S, prehashed): legacy 'Ed' signatures "
    "are refused.",
    "foreign": "The signature is not lockbuild's: sign the bundle with lockbuild build or lockbuild sign.",
    "disagrees": "Signers disagree about this bundle: compare their statements (lockbuild inspect) before "
    "trusting any.",
    "repeated": "Get the bundle signed by {threshold} distinct trusted keys (lockbuild sign --key ...): a key "
    "counts once.",
}
THRESHOLD_TIP = "Get the bundle signed by {threshold} distinct trusted keys (lockbuild sign --key ...)."


def refusal_tip(verdicts: Sequence[Verdict], threshold: int) -> str:
    """The tip for a policy that is not met: what fits the first refusal kind present (a renamed bundle
    is told its signed name, not to gather signatures); more signers when every signature counted."""
    kinds = {v.kind: v for v in verdicts if not v.counts}
    for kind, tip in REFUSAL_TIPS.items():
        if kind in kinds:
            st = kinds[kind].statement
            return tip.format(file=st.file if st is not None else "the original name", threshold=threshold)
    return THRESHOLD_TIP.format(threshold=threshold)


def _judge(
    index: int, sig: Block, store: TrustStore, *, name: str | None, file: FileDigests | None, now: dt.datetime
) -> Verdict:
    kid = sig.key_id_hex
    key = store.find(sig.key_id)
    if key is None:
        return Verdict(index, kid, False, f"is from key id {kid}, which is not in the trust store", kind="untrusted")
    if store.is_revoked(key):
        return Verdict(index, kid, False, "is from a revoked key", key, kind="revoked")
    refused = SCHEME.refusal(sig)
    if refused is not None:
        return Verdict(index, kid, False, refused, key, kind="legacy")

    def altered(why: str) -> SignatureError:
        return SignatureError(
            f"signature {index} (key {kid}) names trusted key {key.key_id_hex} from {store.source}"
            f" but does not verify: {why}",
            tip=_ALTERED_TIP,
        )

    try:  # cryptography: a trusted key's signature that fails is a hard failure
        SCHEME.verify(sig, key, file_blake2b=file.blake2b if file is not None else None)
    except SignatureError as exc:
        raise altered(exc.message) from None
    try:  # meaning: a statement that is not lockbuild's, or not about this file, does not count
        st = Statement.from_comment(sig.trusted_comment)
    except SignatureError as exc:
        return Verdict(index, kid, False, f"carries no lockbuild statement ({exc.message})", key, kind="foreign")
    # The statement binds the file by its sha256 and size, under the global signature: for a statement
    # about a file of this name, another digest is the same failure as a bad file signature.
    mismatch = None if file is None or (name is not None and st.file != name) else file_mismatch(st, file)
    if mismatch is not None:
        raise altered(f"{mismatch} (the file was altered, or the signature was made for another file)")
    problem = statement_problem(st, name=name, now=now)
    if problem is not None:
        return Verdict(index, kid, False, problem[1], key, st, kind=problem[0])
    return Verdict(index, kid, True, "", key, st)


def evaluate(
    signatures: Sequence[Block],
    store: TrustStore,
    *,
    name: str | None,
    now: dt.datetime,
    file: FileDigests | None = None,
    threshold: int | None = None,
) -> Evaluation:
    """Judge every signature. ``file=None`` checks the signature blocks alone (global signatures only):
    what the counted statements assert, the manifest digest included, is then proven without the file.
    ``threshold`` can only raise the store's policy. Raises only for a trusted key's bad signature.

    A trusted key's signature that fails cryptographically, or whose statement names this file with
    another sha256 or size, is a hard failure (the statement's sha256 binds the file). Anything else
    (unknown or revoked key, legacy algorithm, expired, not a lockbuild statement, another file name)
    only stops that signature from counting, and never vetoes the others."""
    if threshold is not None and threshold < 1:
        raise ValueError(f"a signature threshold is at least 1, found {threshold}")
    needed = max(threshold or 1, store.policy.threshold)
    verdicts = [_judge(i, s, store, name=name, file=file, now=now) for i, s in enumerate(signatures, 1)]
    # One identity counts once, whatever a block calls it (the store holds each identity once).
    seen: set[bytes] = set()
    for i, v in enumerate(verdicts):
        if v.counts and v.signer is not None:
            if v.signer.raw in seen:
                again = "repeats a key already counted; the same key counts once"
                verdicts[i] = Verdict(v.index, v.key_id, False, again, v.signer, v.statement, kind="repeated")
            seen.add(v.signer.raw)
    # The counted signatures must assert the same facts; the largest agreeing group is the statement.
    groups: dict[tuple[object, ...], list[int]] = {}
    for i, v in enumerate(verdicts):
        if v.counts and v.statement is not None:
            groups.setdefault(v.statement.subject, []).append(i)
    chosen: Statement | None = None
    if groups:
        ranked = sorted(groups.values(), key=len, reverse=True)
        if len(ranked) > 1 and len(ranked[1]) >= needed:
            raise SignatureError(
                f"trusted signers sign different statements about {name or 'this bundle'}: each meets the"
                f" threshold of {needed}",
                tip=_ALTERED_TIP,
            )
        best = ranked[0]
        chosen = verdicts[best[0]].statement
        for group in ranked[1:]:
            for i in group:
                v = verdicts[i]
                verdicts[i] = Verdict(
                    v.index,
                    v.key_id,
                    False,
                    "signs other facts than the counted signatures",
                    v.signer,
                    v.statement,
                    kind="disagrees",
                )
    return Evaluation(tuple(verdicts), needed, store.source, chosen)


def check_complete(signatures: Sequence[Block], store: TrustStore, *, name: str, size: int) -> None:
    """Before hashing: a file shorter than every size a trusted key signed for it is an incomplete copy
    (IntegrityError), not tampering. Only statements whose global signature verifies are believed."""
    signed = signed_sizes(signatures, store, name=name)
    _check_not_short(signed, name=name, size=size)


def check_not_larger(signatures: Sequence[Block], store: TrustStore, *, name: str, size: int) -> None:
    """Before a file is assembled (a part list joined): one larger than every size a trusted key signed
    for it is not the signed file, and is refused before a byte of it is written (a part list can claim
    any size, and would fill the disk first)."""
    signed = signed_sizes(signatures, store, name=name)
    if signed and size > max(signed):
        raise SignatureError(
            f"{name} would be {size:,} bytes; its trusted signatures sign at most {max(signed):,}: it is not the"
            " signed file, and nothing of it was joined.",
            tip="Copy the bundle's parts and part list again from their source.",
        )


def signed_sizes(signatures: Sequence[Block], store: TrustStore, *, name: str) -> set[int]:
    """The sizes that trusted, non-revoked keys signed for the file ``name`` (global signatures checked)."""
    signed: set[int] = set()
    for sig in signatures:
        key = store.find(sig.key_id)
        if key is None or store.is_revoked(key) or SCHEME.refusal(sig) is not None:
            continue
        try:
            SCHEME.verify(sig, key, file_blake2b=None)
            st = Statement.from_comment(sig.trusted_comment)
        except SignatureError:
            continue  # judged (and reported, or refused) by evaluate()
        if st.file == name:
            signed.add(st.size)
    return signed


def _check_not_short(signed: set[int], *, name: str, size: int) -> None:
    bigger = [s for s in signed if s > size]
    if size in signed or not bigger:
        return
    want = min(bigger)
    have, of = _amount(size), _amount(want)
    if have == of:
        have, of = f"{size:,} bytes", f"{want:,} bytes"
    raise IntegrityError(
        f"the file has {have} of {of}: the copy of {name} is incomplete (or it is not the file that was signed).",
        tip="Copy the bundle again from its source and compare its size with the publisher's; if it is still"
        " short, the file is not the signed one: do not install it.",
    )


def _amount(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1_000_000 else f"{n:,} bytes"


def check_dates(statement: Statement, policy: Policy) -> None:
    """The site's not-before / not-after bounds on the bundle's as-of time (its serial)."""
    when = statement.as_of
    if policy.not_before is not None and when < policy.not_before:
        raise SignatureError(
            f"the bundle's as-of {iso(when)} is before the site's not-before {iso(policy.not_before)}; refused."
        )
    if policy.not_after is not None and when > policy.not_after:
        raise SignatureError(
            f"the bundle's as-of {iso(when)} is after the site's not-after {iso(policy.not_after)}; refused."
        )


def check_signed_metadata(statement: Statement, manifest: Manifest) -> None:
    """The signed statement and the manifest inside must describe the same bundle (no mix-and-match)."""
    mine: dict[str, object] = {
        "engine": manifest.engine,
        "version": manifest.version,
        "variant": manifest.variant,
        "serial": manifest.serial,
        "file": manifest.bundle_name,
    }
    for key, value in mine.items():
        signed = getattr(statement, key)
        if signed != value:
            raise SignatureError(
                f"the signature says {key}={signed} but the bundle's manifest says {value}.",
                tip="The signed metadata and the bundle disagree (mix-and-match); do not install it.",
            )


def signed_manifest(statement: Statement, manifest_bytes: bytes, limits: Limits = DEFAULT_LIMITS) -> Manifest:
    """``manifest_bytes`` parsed, only once their sha256 is the one ``statement`` signs and only if they
    say what it says: how a manifest that arrives without its bundle (a store, a delta, a registry) is
    accepted after the signature blocks met the policy."""
    digest = hashlib.sha256(manifest_bytes).hexdigest()
    if digest != statement.manifest_sha256:
        raise IntegrityError(
            f"the bundle's manifest has sha256 {digest}; the signatures sign {statement.manifest_sha256}.",
            tip="The manifest is not the signed one: do not use it; fetch it again from its publisher.",
        )
    manifest = parse_manifest(manifest_bytes, limits)
    check_signed_metadata(statement, manifest)
    return manifest
