"""Adding a signature to a bundle: a co-signer is the second pair of eyes, so ``sign_bundle`` reads the
whole bundle (every member against the manifest) and, given a trust store, checks the signatures
already there before it adds its own. A damaged bundle is refused, never signed."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import select
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from lockbuild import fsio
from lockbuild.bundle.extract import extract, make_dest
from lockbuild.bundle.manifest import Manifest, Member
from lockbuild.bundle.read import open_file, open_stream, read_manifest, tar_pieces
from lockbuild.bundle.zstdframe import TIP, Hashing
from lockbuild.errors import IntegrityError, SignatureError
from lockbuild.limits import DEFAULT_LIMITS, Limits
from lockbuild.progress import Progress
from lockbuild.trust.policy import Evaluation, FileDigests, evaluate
from lockbuild.trust.scheme import SCHEME, Block, SigningKey
from lockbuild.trust.source import digest_signed_file, read_signatures, signature_path
from lockbuild.trust.statement import Statement
from lockbuild.trust.truststore import TrustStore

# How the signing process starts: lockbuild's and cryptography's directories after the standard library.
BOOT = "import sys; sys.path.extend(sys.argv[1:]); from lockbuild.trust.signproc import main; raise SystemExit(main())"
SIGN_TIMEOUT = 600  # the signing process: scrypt, a typed passphrase, one ED block per bundle


def sign_statement(key: SigningKey, statement: Statement, file_blake2b: bytes) -> str:
    """One block over the file with BLAKE2b-512 ``file_blake2b``, carrying ``statement``.
    ``file_blake2b`` is ``FileDigests.prehash``."""
    return InMemorySigner(key).sign([(file_blake2b, statement.to_comment())]).blocks[0]


def carry_over(
    existing: Sequence[Block], statement: Statement, signer: bytes
) -> tuple[tuple[Block, ...], tuple[Block, ...]]:
    """(kept, dropped): of the other signers' blocks already beside a rebuilt bundle, those whose statement
    says exactly what the new one says (so the bundle is byte-identical: same sha256, size and manifest)
    are kept; the others would describe another file and are dropped. ``signer``'s own block is replaced."""
    kept: list[Block] = []
    dropped: list[Block] = []
    for sig in existing:
        if sig.key_id == signer:
            continue
        try:
            same = Statement.from_comment(sig.trusted_comment).subject == statement.subject
        except SignatureError:
            same = False
        (kept if same else dropped).append(sig)
    return tuple(kept), tuple(dropped)


@dataclass(frozen=True)
class SignResult:
    bundle: Path
    signature: Path
    signer: str
    replaced: bool
    sha256: str
    members: int
    existing: Evaluation | None

    def to_json(self) -> dict[str, Any]:
        return {
            "bundle": str(self.bundle),
            "signature": str(self.signature),
            "signer": self.signer,
            "replaced": self.replaced,
            "sha256": self.sha256,
            "members": self.members,
            "existing": self.existing.to_json() if self.existing is not None else None,
        }


def _write_atomically(path: Path, data: bytes) -> None:
    tmp = fsio.temp_beside(path)
    try:
        fsio.write_new(tmp, data, sync=True)
        tmp.replace(path)
    except OSError as exc:
        raise SignatureError(
            f"cannot write {path}: {exc.strerror or exc}.", tip="Check the directory's permissions."
        ) from None
    finally:
        tmp.unlink(missing_ok=True)


def write_with_block(sig_path: Path, existing: Sequence[Block], key_id: bytes, block: str) -> bool:
    """Write ``sig_path`` with ``block`` in place of ``key_id``'s earlier block (or added after the others),
    atomically, and only within what every reader accepts; True when a block was replaced."""
    new = SCHEME.parse(block.encode("utf-8"), source="the new signature")
    replaced = any(s.key_id == key_id for s in existing)
    blocks = [b for s in existing for b in (new if s.key_id == key_id else (s,))]
    if not replaced:
        blocks.extend(new)
    data = SCHEME.join(blocks)
    if len(blocks) > SCHEME.max_blocks or len(data) > DEFAULT_LIMITS.max_signature_file:
        raise SignatureError(
            f"{sig_path} would hold {len(blocks)} signature blocks ({len(data)} bytes); every reader "
            f"refuses more than {SCHEME.max_blocks} blocks or {DEFAULT_LIMITS.max_signature_file} bytes, so this "
            "signature would make the file unverifiable everywhere; nothing was written.",
            tip="Remove the blocks of signers the sites do not trust from the .minisig, then sign again.",
        )
    _write_atomically(sig_path, data)
    return replaced


def read_unverified(
    path: Path,
    *,
    dest: Path | None = None,
    limits: Limits = DEFAULT_LIMITS,
    progress: Progress | None = None,
    on_manifest: Callable[[Manifest, bytes], None] | None = None,
    expect_sha256: str | None = None,
    want: Callable[[Member], bool] | None = None,
    action: str | None = None,
) -> Manifest:
    """The signer's own reader: every member of the bundle checked against the manifest *the bundle itself
    carries* (the one member loop, :func:`lockbuild.bundle.extract.extract`, by the strict reader's rules);
    with ``dest``, written there. No signature is judged: this serves :func:`sign_bundle` (a bundle about
    to be signed, or co-signed) and nothing a user trusts. Every other way to members is the one trust
    decision (``open_source``, ``TrustedBundle.extract``); ``tests/trust/test_trust_port.py`` fails when the
    package calls this anywhere but here.

    ``on_manifest`` runs once the manifest is read, before any other member, with the parsed manifest and
    its exact bytes (what a signed manifest-sha256 covers): a place to refuse early. With
    ``expect_sha256``, the raw bytes read must also be that file, hashed again as they are read: the
    signature asserts a file digest computed on an earlier pass. The caller owns ``dest`` (an empty
    staging directory) and removes it if this raises.
    """
    progress = progress or Progress.quiet()
    make_dest(dest)
    with open_file(path, limits) as raw_file:
        f = Hashing(raw_file) if expect_sha256 is not None else None
        tar = open_stream(raw_file, limits, via=f)
        manifest, manifest_bytes = read_manifest(tar, limits)
        if on_manifest is not None:
            on_manifest(manifest, manifest_bytes)
        progress.start(
            action or ("checking" if dest is None else "unpacking"),
            total_bytes=manifest.unpacked_size,
            files=len(manifest.members),
        )
        extract(manifest, tar_pieces(tar, limits), dest=dest, want=want, progress=progress)
        got = f.finish() if f is not None else None
    if expect_sha256 is not None and got != expect_sha256:
        raise IntegrityError(f"the bundle changed while it was read: sha256 {got}, expected {expect_sha256}.", tip=TIP)
    progress.finish()
    return manifest


def read_member_unverified(bundle: Path, member: str, work: Path) -> tuple[Manifest, FileDigests, bytes]:
    """The signer's own pass for ``lockbuild report``: the bundle checked whole against the manifest it
    carries (no signature judged: it serves the signer about to sign a report of it), its digests, and
    the bytes of one member (the SBOM), written only into ``work``, the caller's empty directory."""
    digests = digest_signed_file(bundle, prehash=False)
    manifest = read_unverified(bundle, dest=work, expect_sha256=digests.sha256, want=lambda m: m.path == member)
    data = fsio.read_regular(work / member, what=member, max_size=manifest.member(member).size, error=IntegrityError)
    return manifest, digests, data


def judge_existing(
    existing: Sequence[Block],
    store: TrustStore | None,
    *,
    name: str,
    digests: FileDigests,
    now: dt.datetime | None = None,
) -> Evaluation | None:
    """What the signatures already beside a file (a bundle, an image) amount to under ``store``, reported
    by ``sign`` (None without a store or blocks). A trusted key's signature that does not verify raises
    here: the file or its .minisig was altered."""
    if store is None or not existing:
        return None
    return evaluate(existing, store, name=name, now=now or dt.datetime.now(dt.UTC), file=digests)


def sign_bundle(
    bundle: Path,
    signer: Signer,
    *,
    expires: dt.datetime | None = None,
    store: TrustStore | None = None,
    now: dt.datetime | None = None,
    progress: Progress | None = None,
) -> SignResult:
    """Check the bundle in full, then add (or renew) ``signer``'s signature in ``BUNDLE.minisig``."""
    sig_path = signature_path(bundle)
    existing: tuple[Block, ...] = ()
    if sig_path.exists() or sig_path.is_symlink():
        existing = read_signatures(sig_path)
    digests = digest_signed_file(bundle)
    carried: list[bytes] = []  # the manifest's bytes as the bundle carries them: what the statement signs
    manifest = read_unverified(
        bundle,
        progress=progress,
        expect_sha256=digests.sha256,  # every member, or refused
        on_manifest=lambda _m, raw: carried.append(raw),
    )
    if bundle.name != manifest.bundle_name:
        raise IntegrityError(
            f"the bundle file is named {bundle.name}, but its manifest names {manifest.bundle_name}.",
            tip="Sign the bundle under the name it was built as; a renamed bundle is refused on every node.",
        )
    evaluation = judge_existing(existing, store, name=bundle.name, digests=digests, now=now)
    statement = Statement.of(
        manifest,
        name=bundle.name,
        sha256=digests.whole,
        size=digests.size,
        expires=expires,
        manifest_bytes=carried[0],
        frames_sha256=digests.frames_sha256,
    )
    signed = signer.sign([(digests.prehash(bundle.name), statement.to_comment())])
    replaced = write_with_block(sig_path, existing, signed.key_id, signed.blocks[0])
    return SignResult(bundle, sig_path, signed.key_id_hex, replaced, digests.whole, len(manifest.members), evaluation)


@dataclass(frozen=True)
class SignedBlocks:
    """What the signing process answered: who signed (key id, public key) and one block per item."""

    key_id: bytes
    key_id_hex: str
    public_key: str
    blocks: tuple[str, ...]


class Signer(Protocol):
    """Who signs: one block per (BLAKE2b-512 prehash, trusted comment), and the signer's identity."""

    def sign(self, items: Sequence[tuple[bytes, str]]) -> SignedBlocks: ...


@dataclass(frozen=True)
class KeyFileSigner:
    """The secret key at ``key``, read only by the signing process (:func:`sign_in_fresh_process`): every
    command that signs with a user's key goes through this."""

    key: Path
    password: str | None
    allow_readable_key: bool = False

    def check(self) -> SignedBlocks:
        """Open and decrypt the key and sign nothing: a bad key or passphrase stops a command before its work."""
        return check_key(self.key, password=self.password, allow_readable_key=self.allow_readable_key)

    def sign(self, items: Sequence[tuple[bytes, str]]) -> SignedBlocks:
        return sign_in_fresh_process(
            self.key, items, password=self.password, allow_readable_key=self.allow_readable_key
        )

    @contextlib.contextmanager
    def session(self) -> Iterator[SigningSession]:
        """One signing process for a command with no third-party code before it signs (``sign``): the key
        read and checked at once (a typed passphrase asked once), the signing later in the same process;
        ended whatever happens, having signed nothing unless asked."""
        session = SigningSession(self.key, self.password, self.allow_readable_key)
        try:
            yield session
        finally:
            session.close()

    def sign_as_checked(self, items: Sequence[tuple[bytes, str]], checked: SignedBlocks) -> SignedBlocks:
        """:meth:`sign`, refused unless the key is still the one :meth:`check` found when the work began."""
        signed = self.sign(items)
        if signed.key_id != checked.key_id:
            raise SignatureError(
                f"the secret key {self.key} is key {signed.key_id_hex} now, but it was key {checked.key_id_hex} when "
                "the build started; expected the same key throughout.",
                tip="Someone replaced the key file during the build: find out who; nothing was signed.",
            )
        return signed


@dataclass(frozen=True)
class InMemorySigner:
    """A secret key already in this process's memory: the self-test's throw-away key, and tests. A user's key file is
    never read this way (:class:`KeyFileSigner`)."""

    key: SigningKey

    def sign(self, items: Sequence[tuple[bytes, str]]) -> SignedBlocks:
        note = f"lockbuild signature {self.key.key_id_hex}"
        blocks = tuple(SCHEME.sign(self.key, b, c, note=note) for b, c in items)
        return SignedBlocks(self.key.key_id, self.key.key_id_hex, self.key.public_key().to_text(), blocks)


def _import_dirs() -> list[str]:
    """The directories the signing process imports lockbuild and cryptography from (after the stdlib)."""
    import cryptography

    import lockbuild

    dirs: list[str] = []
    for module in (lockbuild, cryptography):
        d = str(Path(module.__file__ or "").resolve().parent.parent)
        if d not in dirs:
            dirs.append(d)
    return dirs


def check_key(key: Path, *, password: str | None, allow_readable_key: bool = False) -> SignedBlocks:
    """Open and decrypt the secret key at ``key`` and sign nothing: ``build``'s check before it locks or
    downloads anything, so that a missing file, bad permissions, a wrong passphrase or no terminal stop it
    before its first request. The key is read in a fresh signing process that exits at once (this process
    never holds it), before any third-party code has started; the signing process reads it again later."""
    return sign_in_fresh_process(key, [], password=password, allow_readable_key=allow_readable_key)


def sign_in_fresh_process(
    key: Path, items: Sequence[tuple[bytes, str]], *, password: str | None, allow_readable_key: bool = False
) -> SignedBlocks:
    """Sign each (BLAKE2b-512 prehash, trusted comment) with the secret key at ``key``, in a fresh
    ``python -I -S`` process (lockbuild.trust.signproc): this process never holds the key, and no code of
    a writable place, ``.pth`` file or planted module is loaded where the key is decrypted. ``password``:
    the passphrase from LOCKBUILD_KEY_PASSWORD (handed over on a pipe); None: typed at the terminal there."""
    request = {
        "key": str(key.absolute()),
        "password": password,
        "allow_readable_key": allow_readable_key,
        "items": [{"blake2b": b.hex(), "comment": c} for b, c in items],
    }
    proc = _start()
    try:
        out, _ = proc.communicate(json.dumps(request).encode(), timeout=SIGN_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise SignatureError(f"the signing process did not finish within {SIGN_TIMEOUT} s.") from None
    return _answered(proc.returncode, out, len(items))


def _start() -> subprocess.Popen[bytes]:
    """The signing process (one-shot or a session): a fresh ``python -I -S``, its stdin and stdout pipes, no
    environment but PATH, in ``/``; its stderr is the terminal's (a typed passphrase is asked there)."""
    try:
        return subprocess.Popen(
            _argv(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, env={"PATH": os.defpath}, cwd="/"
        )
    except OSError as exc:
        raise SignatureError(f"cannot start the signing process ({sys.executable}): {exc.strerror}") from None


def _argv() -> list[str]:
    return [sys.executable, "-I", "-S", "-c", BOOT, *_import_dirs()]


def _answered(returncode: int | None, stdout: bytes, items: int) -> SignedBlocks:
    """The signing process's answer (``returncode``: None while it still runs, waiting for a session's items)."""
    try:
        answer = json.loads(stdout)
    except ValueError:
        answer = None
    if returncode not in (0, None) or not isinstance(answer, dict):
        raise SignatureError(
            f"the signing process failed (exit {returncode}); expected a JSON answer, found {len(stdout)} bytes.",
            tip="Run with --verbose; check that lockbuild's installation is complete (python -I -S -m is used).",
        )
    if "error" in answer:
        raise SignatureError(str(answer["error"]), tip=answer.get("tip"))
    late = answer.get("imported_after_key") or []
    if late:
        raise SignatureError(
            f"the signing process imported {', '.join(map(str, late[:5]))} after it read the secret key; "
            "expected nothing to be loaded once the key is in memory.",
            tip="This is a bug in lockbuild: report it; nothing was signed.",
        )
    blocks = tuple(str(b) for b in answer["blocks"])
    if len(blocks) != items:
        raise SignatureError(f"the signing process made {len(blocks)} signatures; expected {items}.")
    return SignedBlocks(bytes.fromhex(answer["key_id"]), str(answer["key_id_hex"]), str(answer["public_key"]), blocks)


class SigningSession:
    """The signing process of :meth:`KeyFileSigner.session`: started and asked to read the key when made
    (``checked``: who the key is, no block), asked once to :meth:`sign`, ended by :meth:`close`."""

    def __init__(self, key: Path, password: str | None, allow_readable_key: bool) -> None:
        request = {"key": str(key.absolute()), "password": password, "allow_readable_key": allow_readable_key}
        self.proc = _start()
        stdin, stdout = self.proc.stdin, self.proc.stdout
        if stdin is None or stdout is None:  # never: both are pipes
            self.proc.kill()
            self.proc.wait()
            raise SignatureError("internal: the signing process started without its pipes.")
        self.stdin, self.stdout = stdin, stdout
        try:
            self._send({**request, "items": [], "session": True})
            line = self._line(time.monotonic() + SIGN_TIMEOUT)
            self.checked = _answered(None if line.endswith(b"\n") else self.proc.wait(), line, 0)
        except BaseException:
            self.close()
            raise

    def _send(self, request: dict[str, Any]) -> None:
        try:
            self.stdin.write(json.dumps(request).encode() + b"\n")
            self.stdin.flush()
        except BrokenPipeError:
            pass  # it has ended: its answer (or its exit status) says why

    def _line(self, deadline: float) -> bytes:
        """The process's next answer line (up to EOF when it ends without one), within the deadline."""
        fd, got = self.stdout.fileno(), b""
        while not got.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise SignatureError(f"the signing process did not finish within {SIGN_TIMEOUT} s.")
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            got += chunk
        return got

    def sign(self, items: Sequence[tuple[bytes, str]]) -> SignedBlocks:
        self._send({"items": [{"blake2b": b.hex(), "comment": c} for b, c in items]})
        line = self._line(time.monotonic() + SIGN_TIMEOUT)
        try:
            code = self.proc.wait(timeout=SIGN_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise SignatureError(f"the signing process did not finish within {SIGN_TIMEOUT} s.") from None
        signed = _answered(code, line, len(items))
        if signed.key_id != self.checked.key_id:
            raise SignatureError(f"internal: the signing process signed as {signed.key_id_hex}, not as it was checked.")
        return signed

    def close(self) -> None:
        """End the process: its input closed (it signs nothing more and exits), killed if it lingers."""
        if not self.stdin.closed:
            with contextlib.suppress(OSError):
                self.stdin.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.stdout.close()
