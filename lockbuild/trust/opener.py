"""The one opener: the trust directory read by descriptor, and the one trust decision.

:func:`open_source` decides for every source behind the port: the signature blocks, the signed file's size
before a byte is hashed, its digests (or its frame tables), the pure policy, the site's dates, and only then
the manifest's bytes, which must be the signed ones. Its :class:`TrustedBundle` is the only way to members."""

from __future__ import annotations

import datetime as dt
import errno
import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lockbuild.bundle.extract import Extracted, extract, make_dest
from lockbuild.bundle.manifest import Manifest, Member
from lockbuild.errors import IntegrityError, SignatureError
from lockbuild.fsio import bounded_read, list_dir, open_dir, open_regular, owner_problem
from lockbuild.limits import DEFAULT_LIMITS, Limits
from lockbuild.progress import Progress
from lockbuild.trust.policy import (
    Evaluation,
    FileDigests,
    check_complete,
    check_dates,
    check_not_larger,
    evaluate,
    signed_manifest,
    signed_sizes,
)
from lockbuild.trust.scheme import SCHEME, Block, Identity
from lockbuild.trust.source import TIP_AGAIN, BundleFile, Signed, Source
from lockbuild.trust.source import digest_signed_file as digest_signed_file
from lockbuild.trust.source import read_signatures as read_signatures
from lockbuild.trust.source import signature_path as signature_path
from lockbuild.trust.statement import Statement
from lockbuild.trust.truststore import (
    POLICY_FILE,
    REVOKED_FILE,
    TrustStore,
    build_store,
    secret_key_error,
)

DEFAULT_TRUST_DIR = Path("/etc/lockbuild/keys")


def _check_owner(st: os.stat_result, path: Path, what: str) -> None:
    """What decides which keys this machine trusts must be writable by this user or root alone: a trust
    directory (or a file in it) that another user owns or can write lets that user add a key, drop a
    revocation or lower the threshold, and so install anything (the rule: ``fsio.owner_problem``)."""
    problem = owner_problem(st)
    if problem:
        raise SignatureError(
            f"refused {what} {path}: it {problem}, so another user could choose the keys this machine trusts;"
            " the trust store fails closed.",
            tip=f"Make {path} owned by root (or the installing user) and writable by no one else: chmod go-w.",
        )


def _read_in(dfd: int, directory: Path, name: str, what: str, limit: int) -> str | None:
    """A file of the (already opened) trust directory, by descriptor: None when truly absent; a link,
    FIFO, device, directory, oversized, unreadable, non-UTF-8 or foreign-owned file fails closed."""
    path = directory / name
    closed = "the trust store fails closed"
    try:
        f, _ = open_regular(name, what=what, max_size=limit, error=SignatureError, dir_fd=dfd, shown=str(path))
    except FileNotFoundError:
        return None
    except SignatureError as exc:
        raise SignatureError(f"{exc.message.rstrip('.')}; {closed}.", tip=exc.tip) from None
    with f:
        _check_owner(os.fstat(f.fileno()), path, what)
        data = bounded_read(f, limit, what=f"{what} {path}", error=SignatureError, grew=True)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise SignatureError(f"{what} {path} is not UTF-8 text; the trust store fails closed.") from None


def load_trust_store(directory: Path) -> TrustStore:
    """Every ``*.pub`` in ``directory``, ``revoked.txt`` and ``policy.toml``; anything malformed fails closed.
    The directory is opened once and checked on its descriptor (owned by this user or root, writable by
    no one else); its files are opened relative to it, never through a link."""
    tip = (
        f"Put the publishers' minisign .pub files in {directory} (and optionally revoked.txt with one key id"
        " per line); remove or fix any file that is not a valid public key."
    )
    try:
        dfd = open_dir(directory, follow=True)
    except OSError as exc:
        state = {errno.ENOENT: "does not exist", errno.ENOTDIR: "is not a directory"}.get(exc.errno or 0)
        if state is None:
            raise SignatureError(f"cannot open trust directory {directory}: {exc.strerror or exc}", tip=tip) from None
        raise SignatureError(
            f"trust directory {directory} {state}: expected a directory of .pub files", tip=tip
        ) from None
    try:
        _check_owner(os.fstat(dfd), directory, "trust directory")
        try:
            names = [n for n in list_dir(dfd) if n.endswith(".pub")]
        except OSError as exc:
            raise SignatureError(f"cannot list trust directory {directory}: {exc.strerror or exc}", tip=tip) from None
        keys: list[tuple[str, Identity]] = []
        for name in names:
            text: str | None = None
            try:
                text = _read_in(dfd, directory, name, "public key", SCHEME.key_file_bytes)
                if text is None:  # listed, then gone
                    raise SignatureError(f"public key {directory / name} vanished while it was read")
                keys.append((name, SCHEME.parse_identity(text, source=str(directory / name))))
            except SignatureError as exc:
                if text is not None and SCHEME.is_secret_key(text):  # a secret key dropped in as .pub
                    raise secret_key_error(str(directory / name)) from None
                raise SignatureError(f"malformed public key in trust directory: {exc.message}", tip=tip) from None
        revoked = _read_in(dfd, directory, REVOKED_FILE, "revocation list", SCHEME.key_file_bytes)
        policy = _read_in(dfd, directory, POLICY_FILE, "policy", SCHEME.key_file_bytes)
    finally:
        os.close(dfd)
    return build_store(keys, source=str(directory), revoked=revoked or "", policy=policy)


def recheck_kept(source: Source, manifest: Manifest, limits: Limits = DEFAULT_LIMITS) -> Extracted:
    """Check ``source``'s members against ``manifest``, a manifest the one trust decision already accepted
    and that this user's own install kept beside what it installed (``verify --models`` without
    ``--trust``: the kept record was judged when it was installed, under the same ownership rule as the
    install itself). The signatures are not judged again here; with ``--trust`` the caller opens the kept
    record with :func:`open_source` instead. The member loop is the one extraction."""
    with source.members(limits) as stream:
        return extract(
            manifest,
            stream.pieces,
            dest=None,
            allow_absent=True,
            absent_tip=source.absent_tip,
            damage_tip=source.damage_tip,
            where=source.where,
        )


@dataclass(frozen=True)
class TrustedBundle:
    """A source whose signatures met the policy, and whose manifest is the signed one: the only way to
    its members (:meth:`extract` checks every one against that manifest). Whatever the source, this is
    made by :func:`open_source` alone."""

    source: Source
    digests: FileDigests | None  # the file's, for a source that is the signed file itself
    evaluation: Evaluation
    statement: Statement
    manifest: Manifest
    manifest_bytes: bytes  # exactly as the source carries them: the bytes the signed manifest-sha256 covers
    blocks: tuple[Block, ...]  # every block the source carried
    limits: Limits = DEFAULT_LIMITS

    @property
    def path(self) -> Path:
        return Path(self.source.label)

    @property
    def sha256(self) -> str:
        """The signed bundle file's sha256 (what the counted statements assert)."""
        return self.statement.sha256

    @property
    def signers(self) -> tuple[Identity, ...]:
        return self.evaluation.signers

    @property
    def signer_ids(self) -> tuple[str, ...]:
        return tuple(k.key_id_hex for k in self.signers)

    @property
    def ref(self) -> str:
        m = self.manifest
        return f"{m.engine}/{m.version}-{m.variant}"

    def counted_signatures(self) -> bytes:
        """The blocks that counted under this trust store, as text: what a store or a registry keeps
        (bounded by the readers' limits, since at most that many can count)."""
        return counted_blocks(self.evaluation, self.blocks)

    def extract(
        self,
        dest: Path | None = None,
        *,
        progress: Progress | None = None,
        want: Callable[[Member], bool] | None = None,
        allow_absent: bool = False,
        action: str | None = None,
        checked: Callable[[Member], None] | None = None,
    ) -> Extracted:
        """Check every member against the signed manifest (and with ``dest``, write those ``want``
        accepts there): the one extraction, :func:`lockbuild.bundle.extract.extract`. ``action`` names
        the step in the progress line (default "checking", or "unpacking" with ``dest``); ``checked`` is
        told each written member as soon as it has been held to the signed manifest.

        A source that carries the manifest again (a file read a second time) must carry the same bytes,
        so a file swapped after its signatures were checked is refused as soon as anything it carries
        differs; the raw file is not hashed a second time (docs/threat-model.md)."""
        progress = progress or Progress.quiet()
        make_dest(dest)
        with self.source.members(self.limits) as stream:
            again = stream.manifest_bytes
            if again is not None and again != self.manifest_bytes:
                raise IntegrityError(
                    f"the bundle's manifest has sha256 {hashlib.sha256(again).hexdigest()}; the "
                    f"signatures sign {self.statement.manifest_sha256} ({self.source.label} changed"
                    " while it was read).",
                    tip=TIP_AGAIN,
                )
            progress.start(
                action or ("checking" if dest is None else "unpacking"),
                total_bytes=self.manifest.unpacked_size,
                files=len(self.manifest.members),
            )
            done = extract(
                self.manifest,
                stream.pieces,
                dest=dest,
                want=want,
                progress=progress,
                allow_absent=allow_absent,
                absent_tip=self.source.absent_tip,
                damage_tip=self.source.damage_tip,
                where=self.source.where,
                checked=checked,
            )
        progress.finish()
        return done


def counted_blocks(evaluation: Evaluation, blocks: tuple[Block, ...]) -> bytes:
    """The signature file of the blocks that counted in ``evaluation``, in the order they came."""
    counted = {v.index for v in evaluation.verdicts if v.counts}
    return SCHEME.join([b for i, b in enumerate(blocks, 1) if i in counted])


def _names_in(blocks: tuple[Block, ...]) -> list[str]:
    names = set()
    for b in blocks:
        try:
            names.add(Statement.from_comment(b.trusted_comment).file)
        except SignatureError:
            continue  # judged (and reported) by evaluate()
    return sorted(names) or [""]


@dataclass(frozen=True)
class Decision:
    """What the one trust decision established about a :class:`~lockbuild.trust.source.Signed`: the
    statement the counted signatures agree on, the signed file's digests (where the source is the file),
    and the subject's exact bytes, whose sha256 is the signed one. Made by :func:`decide` alone."""

    digests: FileDigests | None
    evaluation: Evaluation
    statement: Statement
    subject_bytes: bytes
    blocks: tuple[Block, ...]


def decide(
    source: Signed,
    store: TrustStore,
    *,
    threshold: int | None = None,
    now: dt.datetime | None = None,
    limits: Limits = DEFAULT_LIMITS,
) -> Decision:
    """The one trust decision, for every signed thing (a bundle from any source, an image): the signature
    blocks are judged against ``store`` (where the source is the signed file, a file no trusted statement
    names is refused before a byte of it is read, and its size is checked before it is hashed); the signed
    dates are checked; then, only then, the subject's bytes are read and must have the signed sha256.
    Raises SignatureError or IntegrityError. :func:`open_source` (bundles) and
    ``lockbuild.image.judge.verify_image`` (images) are made of it."""
    current = now or dt.datetime.now(dt.UTC)
    raw = source.signature_blocks(limits)
    blocks = SCHEME.parse(raw, source=f"the signatures of {source.label}", max_bytes=limits.max_signature_file)
    name = source.file_name
    digests = None
    if name is not None:
        if not signed_sizes(blocks, store, name=name):  # no trusted statement names it: refuse before reading it
            evaluate(blocks, store, name=name, now=current, threshold=threshold).require()

        def check(size: int, *, assembles: bool = False) -> None:
            if assembles:  # the file is about to be written from pieces: never past what was signed
                check_not_larger(blocks, store, name=name, size=size)
            check_complete(blocks, store, name=name, size=size)

        digests = source.file_digests(check, limits)
        evaluation = evaluate(blocks, store, name=name, now=current, file=digests, threshold=threshold)
    else:  # a store names builds, not files: the name each statement gives, checked against the manifest below
        tried = [evaluate(blocks, store, name=n, now=current, threshold=threshold) for n in _names_in(blocks)]
        evaluation = next((e for e in tried if e.met), tried[0])
    statement = evaluation.require()
    check_dates(statement, store.policy)
    subject = source.manifest_bytes(limits, statement.manifest_sha256)  # only now, after the policy is met
    digest = hashlib.sha256(subject).hexdigest()
    if digest != statement.manifest_sha256:
        raise IntegrityError(
            f"{source.subject} has sha256 {digest}; the signatures sign {statement.manifest_sha256}.",
            tip=f"{source.subject[:1].upper()}{source.subject[1:]} is not the signed one: do not "
            "use it; fetch it again from its publisher.",
        )
    return Decision(digests, evaluation, statement, subject, blocks)


def open_source(
    source: Source,
    store: TrustStore,
    *,
    threshold: int | None = None,
    now: dt.datetime | None = None,
    limits: Limits = DEFAULT_LIMITS,
) -> TrustedBundle:
    """The one trust decision (:func:`decide`) for a bundle, from any source: then the manifest, whose
    bytes are the signed ones, must say what the statement says and be the build the user named. Raises
    SignatureError or IntegrityError; returns the only object that reaches the members."""
    d = decide(source, store, threshold=threshold, now=now, limits=limits)
    manifest = signed_manifest(d.statement, d.subject_bytes, limits)
    asked = source.expect_ref
    got = f"{manifest.engine}/{manifest.version}-{manifest.variant}"
    if asked is not None and got != asked:
        raise IntegrityError(
            f"{source.label} holds the signed manifest of another build ({got}); refused.",
            tip="Import or pull the build again: the store's entry was altered.",
        )
    return TrustedBundle(source, d.digests, d.evaluation, d.statement, manifest, d.subject_bytes, d.blocks, limits)


def open_bundle(
    bundle: Path,
    store: TrustStore,
    *,
    threshold: int | None = None,
    now: dt.datetime | None = None,
    limits: Limits = DEFAULT_LIMITS,
) -> TrustedBundle:
    """A ``.lbz`` and its ``.minisig``: :func:`open_source` of a :class:`BundleFile`."""
    return open_source(BundleFile(bundle), store, threshold=threshold, now=now, limits=limits)


@dataclass(frozen=True)
class VerifyResult:
    bundle: Path
    sha256: str  # the signed bundle file's
    size: int
    signers: tuple[str, ...]
    members: int
    evaluation: Evaluation
    absent: tuple[str, ...] = ()  # members a delta leaves to a store (verified without one)
    build: str = ""
    frames: int | None = None  # a framed bundle's frames, each checked against the signed table

    def to_json(self) -> dict[str, Any]:
        return {
            "bundle": str(self.bundle),
            "build": self.build,
            "sha256": self.sha256,
            "size": self.size,
            "signers": list(self.signers),
            "members": self.members,
            "absent": list(self.absent),
            "frames": self.frames,
            "policy": self.evaluation.to_json(),
        }


def verify_source(
    source: Source,
    store: TrustStore,
    *,
    threshold: int | None = None,
    now: dt.datetime | None = None,
    progress: Progress | None = None,
    members: bool = False,
) -> VerifyResult:
    """``lockbuild verify``: the signatures, then, for a framed bundle, every frame against the signed frame
    table (which covers every byte of the file: nothing is decompressed), else, or with ``members``, every
    member against the signed manifest, whatever the source. Only a delta verified without its store may
    lack members; they are reported, not hidden."""
    trusted = open_source(source, store, threshold=threshold, now=now)
    frames = trusted.digests.frames if trusted.digests is not None else None
    if not members and (checked := source.check_frames(trusted.limits)) is not None:
        return VerifyResult(
            Path(source.label),
            trusted.sha256,
            trusted.statement.size,
            trusted.signer_ids,
            len(trusted.manifest.members),
            trusted.evaluation,
            (),
            trusted.ref,
            checked,
        )
    done = trusted.extract(progress=progress, allow_absent=source.partial)
    return VerifyResult(
        Path(source.label),
        trusted.sha256,
        trusted.statement.size,
        trusted.signer_ids,
        len(done.manifest.members),
        trusted.evaluation,
        tuple(m.path for m in done.absent),
        trusted.ref,
        frames,
    )


def trust_dir(explicit: Path | None) -> Path:
    """The trust directory: the one given (``--trust``, or ``LOCKBUILD_TRUST_DIR`` as the CLI reads it), else
    the default. No library module reads the environment."""
    return explicit if explicit is not None else DEFAULT_TRUST_DIR
