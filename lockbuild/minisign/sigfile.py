"""minisign signature files: one or more 4-line blocks, each an Ed25519 signature over the file's
BLAKE2b-512 (``ED``) and a global signature over that signature and the trusted comment.

One block per signing key; stock ``minisign -V`` reads only the first, so the first verifies with plain
minisign and lockbuild checks the others. Pure: bytes in, values or a SignatureError out."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from lockbuild.errors import SignatureError
from lockbuild.limits import DEFAULT_LIMITS
from lockbuild.minisign.encoding import (
    KEY_ID_LEN,
    MAX_TRUSTED_COMMENT_BYTES,
    MAX_UNTRUSTED_COMMENT_BYTES,
    PREHASH_LEN,
    SIG_ALG,
    SIG_ALG_HASHED,
    SIG_STRUCT_LEN,
    SIGNATURE_LEN,
    TRUSTED_PREFIX,
    UNTRUSTED_PREFIX,
    b64decode,
    b64encode,
    check_comment,
    format_key_id,
)
from lockbuild.minisign.keys import PublicKey, SecretKey
from lockbuild.text import show


@dataclass(frozen=True)
class Signature:
    """One 4-line minisign signature block."""

    algorithm: bytes
    key_id: bytes
    signature: bytes
    trusted_comment: str
    global_signature: bytes
    untrusted_comment: str

    @property
    def key_id_hex(self) -> str:
        return format_key_id(self.key_id)

    @property
    def prehashed(self) -> bool:
        return self.algorithm == SIG_ALG_HASHED

    def to_text(self) -> str:
        """The 4-line block, each line ending in a newline."""
        return (
            f"{UNTRUSTED_PREFIX}{self.untrusted_comment}\n"
            f"{b64encode(self.algorithm + self.key_id + self.signature)}\n"
            f"{TRUSTED_PREFIX}{self.trusted_comment}\n"
            f"{b64encode(self.global_signature)}\n"
        )


MAX_SIGNATURES = 64  # signature blocks in one .minisig (one per signing key)


def parse_signatures(
    text: str | bytes,
    *,
    source: str = "signature",
    max_signatures: int = MAX_SIGNATURES,
    max_bytes: int = DEFAULT_LIMITS.max_signature_file,
) -> tuple[Signature, ...]:
    """Parse one or more consecutive 4-line minisign signature blocks, strictly: ``untrusted comment:
    ...``, base64 of ``alg(2) + key_id(8) + sig(64)``, ``trusted comment: ...``, base64 of the global
    signature over ``sig + trusted comment``. ``alg`` ``ED`` signs the file's BLAKE2b-512, legacy ``Ed``
    the raw file."""
    tip = (
        "A minisign signature is 4 lines per signing key: 'untrusted comment: ...', base64,"
        " 'trusted comment: ...', base64. Re-download the .minisig file from the publisher."
    )
    if isinstance(text, bytes):
        size = len(text)
        if size > max_bytes:
            raise SignatureError(
                f"{source}: expected a signature file of at most {max_bytes} bytes, found {size}",
                tip=tip,
            )
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SignatureError(
                f"{source}: expected UTF-8 text, found an invalid byte at offset {exc.start}", tip=tip
            ) from None
    elif len(text) > max_bytes or len(text.encode("utf-8")) > max_bytes:
        raise SignatureError(
            f"{source}: expected a signature file of at most {max_bytes} bytes, found {len(text.encode('utf-8'))}",
            tip=tip,
        )
    if not text:
        raise SignatureError(f"{source}: expected at least one signature block, found an empty file", tip=tip)
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # the final newline
    for number, line in enumerate(lines, 1):
        for char, name in (("\r", "a carriage return (CR)"), ("\0", "a NUL byte")):
            if char in line:
                raise SignatureError(
                    f"{source}: line {number} contains {name}; expected lines ending in a bare LF",
                    tip=tip + " If it went through a Windows tool, convert it back to LF line endings.",
                )
    if len(lines) % 4:
        raise SignatureError(
            f"{source}: expected 4 lines per signature block, found {len(lines)} line(s)"
            f" ({len(lines) // 4} whole block(s) and {len(lines) % 4} extra): the file is truncated or has"
            " extra lines",
            tip=tip,
        )
    count = len(lines) // 4
    if count > max_signatures:
        raise SignatureError(f"{source}: expected at most {max_signatures} signature blocks, found {count}", tip=tip)
    result = []
    for index in range(count):
        block = lines[4 * index : 4 * index + 4]
        first = 4 * index + 1
        where = f"{source}: signature {index + 1} (line {first}"
        if not block[0].startswith(UNTRUSTED_PREFIX):
            raise SignatureError(
                f"{where}): expected a line starting with {UNTRUSTED_PREFIX!r}, found {show(block[0])}",
                tip=tip,
            )
        if not block[2].startswith(TRUSTED_PREFIX):
            raise SignatureError(
                f"{source}: signature {index + 1} (line {first + 2}): expected a line starting with"
                f" {TRUSTED_PREFIX!r}, found {show(block[2])}",
                tip=tip,
            )
        sig_struct = b64decode(
            block[1],
            expected_len=SIG_STRUCT_LEN,
            what=f"signature {index + 1} (line {first + 1})",
            source=source,
            tip=tip,
        )
        global_sig = b64decode(
            block[3],
            expected_len=SIGNATURE_LEN,
            what=f"global signature {index + 1} (line {first + 3})",
            source=source,
            tip=tip,
        )
        algorithm = sig_struct[:2]
        if algorithm not in (SIG_ALG_HASHED, SIG_ALG):
            raise SignatureError(
                f"{source}: signature {index + 1} (line {first + 1}): unknown signature algorithm: expected"
                f" {SIG_ALG_HASHED!r} (prehashed) or {SIG_ALG!r} (legacy), found {algorithm!r}",
                tip=tip,
            )
        result.append(
            Signature(
                algorithm=algorithm,
                key_id=sig_struct[2 : 2 + KEY_ID_LEN],
                signature=sig_struct[2 + KEY_ID_LEN :],
                trusted_comment=block[2][len(TRUSTED_PREFIX) :],
                global_signature=global_sig,
                untrusted_comment=block[0][len(UNTRUSTED_PREFIX) :],
            )
        )
    return tuple(result)


def prehash(chunks: Iterable[bytes]) -> bytes:
    """BLAKE2b-512 over a stream of chunks: what an ``ED`` signature signs."""
    h = hashlib.blake2b(digest_size=PREHASH_LEN)
    for chunk in chunks:
        h.update(chunk)
    return h.digest()


def check_prehash(file_blake2b: bytes) -> None:
    if len(file_blake2b) != PREHASH_LEN:
        raise ValueError(f"expected the file's BLAKE2b-512 digest ({PREHASH_LEN} bytes), found {len(file_blake2b)}")


def sign_prehashed(
    sk: SecretKey,
    file_blake2b: bytes,
    trusted_comment: str,
    untrusted_comment: str = "signature from lockbuild secret key",
) -> str:
    """One ``ED`` signature block (4 lines) over a file whose BLAKE2b-512 is ``file_blake2b``."""
    check_prehash(file_blake2b)
    check_comment(trusted_comment, what="trusted comment", max_bytes=MAX_TRUSTED_COMMENT_BYTES)
    check_comment(untrusted_comment, what="untrusted comment", max_bytes=MAX_UNTRUSTED_COMMENT_BYTES)
    signature = sk.private.sign(file_blake2b)
    global_signature = sk.private.sign(signature + trusted_comment.encode("utf-8"))
    return Signature(
        algorithm=SIG_ALG_HASHED,
        key_id=sk.key_id,
        signature=signature,
        trusted_comment=trusted_comment,
        global_signature=global_signature,
        untrusted_comment=untrusted_comment,
    ).to_text()


_TIP = "Do not use this file. Re-download the file and its .minisig from the publisher and check again."


def _check_algorithm(sig: Signature, key: PublicKey, *, require_prehashed: bool) -> None:
    if sig.key_id != key.key_id:
        raise SignatureError(
            f"key id mismatch: the signature was made by key {sig.key_id_hex}, expected key {key.key_id_hex}",
            tip="Verify with the public key whose id the signature names, or get a signature from this key.",
        )
    if sig.algorithm == SIG_ALG:
        why = (
            "lockbuild requires prehashed (ED) signatures"
            if require_prehashed
            else "a legacy signature covers the raw file and cannot be checked against its BLAKE2b-512 digest"
        )
        raise SignatureError(
            f"signature by key {sig.key_id_hex} uses the legacy non-prehashed algorithm 'Ed': expected 'ED'; {why}",
            tip="Re-sign the file with minisign 0.8 or later (its default is prehashed), without -l.",
        )
    if sig.algorithm != SIG_ALG_HASHED:
        raise SignatureError(
            f"unknown signature algorithm {sig.algorithm!r} in signature by key {sig.key_id_hex}:"
            f" expected {SIG_ALG_HASHED!r}",
            tip=_TIP,
        )


def _verifier(key: PublicKey) -> Ed25519PublicKey:
    try:
        return key.verifier()
    except ValueError:
        raise SignatureError(
            f"public key {key.key_id_hex} is not a valid Ed25519 key", tip="Re-copy the public key."
        ) from None


def verify_trusted_comment(sig: Signature, key: PublicKey) -> None:
    """Check the global signature: the trusted comment (and the file signature it is bound to) are what
    ``key`` signed. Needs no file: this is how a signature block alone proves its trusted comment."""
    _check_algorithm(sig, key, require_prehashed=True)
    try:
        _verifier(key).verify(sig.global_signature, sig.signature + sig.trusted_comment.encode("utf-8"))
    except InvalidSignature:
        raise SignatureError(
            f"bad global signature: the trusted comment of the signature by key {sig.key_id_hex} was"
            f" modified after signing (found {show(sig.trusted_comment)})",
            tip=_TIP,
        ) from None


def verify_signature(sig: Signature, key: PublicKey, *, file_blake2b: bytes, require_prehashed: bool = True) -> None:
    """Check ``sig`` against ``key`` for the file with BLAKE2b-512 ``file_blake2b``; raise if it fails."""
    _check_algorithm(sig, key, require_prehashed=require_prehashed)
    check_prehash(file_blake2b)
    try:
        _verifier(key).verify(sig.signature, file_blake2b)
    except InvalidSignature:
        raise SignatureError(
            f"bad signature: the signature by key {sig.key_id_hex} does not verify against this file's"
            " BLAKE2b-512 digest (the file was altered, the signature was altered, or it was made for"
            " another file or by another key)",
            tip=_TIP,
        ) from None
    verify_trusted_comment(sig, key)
