"""minisign-compatible keys, signatures and the trust policy for bundles.

Everything here except the few I/O helpers at the bottom is pure: text or bytes
in, a value or a :class:`~lockbuild.errors.SignatureError` out.

Formats (as written and read by minisign 0.8+):

* public key: ``untrusted comment: ...`` then base64 of ``b"Ed" + key_id(8) + ed25519_pk(32)``;
* secret key: ``untrusted comment: ...`` then base64 of ``b"Ed" + kdf_alg(2) + b"B2" + salt(32) +
  opslimit(8, LE) + memlimit(8, LE) + keynum_sk(104)`` where ``keynum_sk = key_id(8) +
  seed(32) + pk(32) + blake2b-256 checksum(32)``, XORed with scrypt output when ``kdf_alg`` is
  ``b"Sc"`` and stored in clear when it is ``b"\\0\\0"`` (``minisign -G -W``);
* signature: ``untrusted comment: ...``, base64 of ``alg(2) + key_id(8) + sig(64)``,
  ``trusted comment: ...``, base64 of the global signature over ``sig + trusted comment``.
  ``alg`` ``b"ED"`` signs the BLAKE2b-512 of the file, legacy ``b"Ed"`` signs the raw file.

A ``.minisig`` file written by lockbuild may hold several such 4-line blocks one after the
other, one per signing key.  Stock ``minisign -V`` reads only the first block, so the first
block verifies with plain minisign and the others are checked by lockbuild.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import re
import secrets
import urllib.parse
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

from lockbuild.errors import SignatureError

__all__ = [
    "DEFAULT_MEMLIMIT",
    "DEFAULT_OPSLIMIT",
    "KEY_ID_LEN",
    "MINISIGN_DEFAULT_MEMLIMIT",
    "MINISIGN_DEFAULT_OPSLIMIT",
    "PublicKey",
    "SecretKey",
    "Signature",
    "TrustStore",
    "check_policy",
    "decode_secret_key",
    "encode_secret_key",
    "format_key_id",
    "format_trusted_comment",
    "generate_secret_key",
    "load_trust_dir",
    "parse_key_id",
    "parse_public_key",
    "parse_signatures",
    "parse_trusted_comment",
    "prehash",
    "read_public_key",
    "read_secret_key",
    "scrypt_params",
    "sign_prehashed",
    "verify_signature",
    "write_keypair",
]

KEY_ID_LEN = 8
PUBLIC_KEY_LEN = 32
SEED_LEN = 32
SIGNATURE_LEN = 64
PREHASH_LEN = 64
CHECKSUM_LEN = 32
SALT_LEN = 32

SIG_ALG = b"Ed"  # legacy signatures over the raw file; also the key algorithm
SIG_ALG_HASHED = b"ED"  # signatures over BLAKE2b-512 of the file
KDF_SCRYPT = b"Sc"
KDF_NONE = b"\0\0"
CHK_BLAKE2B = b"B2"

UNTRUSTED_PREFIX = "untrusted comment: "
TRUSTED_PREFIX = "trusted comment: "

# minisign reads comment lines with fgets() into fixed buffers (1024 and 8192 bytes, NUL
# included); longer lines would make stock minisign misread the file.
MAX_UNTRUSTED_COMMENT_BYTES = 1024 - 1 - len(UNTRUSTED_PREFIX) - 1
MAX_TRUSTED_COMMENT_BYTES = 8192 - 1 - len(TRUSTED_PREFIX) - 1
# minisign reads the password into a 1024-byte buffer.
MAX_PASSWORD_BYTES = 1023

MAX_SIGNATURE_FILE_BYTES = 64 * 1024
MAX_KEY_FILE_BYTES = 64 * 1024

# minisign's own parameters (crypto_pwhash_scryptsalsa208sha256_*_SENSITIVE): N=2**20, r=8, p=1,
# 1 GiB of memory, a few seconds per use.
MINISIGN_DEFAULT_OPSLIMIT = 33_554_432
MINISIGN_DEFAULT_MEMLIMIT = 1_073_741_824
# Ours: N=2**17, r=8, p=1, 128 MiB, about a third of a second. Same format, stock minisign
# reads it.
DEFAULT_OPSLIMIT = 2**22
DEFAULT_MEMLIMIT = 2**27

# Refuse key files whose scrypt parameters would need more than this (a corrupted or hostile
# file should fail fast, not exhaust the machine). minisign's default needs 1 GiB.
MAX_SCRYPT_MEMORY = 4 * 2**30
MAX_SCRYPT_WORK = 64 * 2**30  # 128 * N * r * p

_SECRET_KEY_STRUCT_LEN = 2 + 2 + 2 + SALT_LEN + 8 + 8 + KEY_ID_LEN + 2 * 32 + CHECKSUM_LEN  # 158
_KEYNUM_SK_LEN = KEY_ID_LEN + 64 + CHECKSUM_LEN  # 104
_PUBLIC_KEY_STRUCT_LEN = 2 + KEY_ID_LEN + PUBLIC_KEY_LEN  # 42
_SIG_STRUCT_LEN = 2 + KEY_ID_LEN + SIGNATURE_LEN  # 74

_KEY_ID_HEX_RE = re.compile(r"[0-9A-Fa-f]{16}")
_FIELD_KEY_RE = re.compile(r"[A-Za-z0-9_.-]+")
_FIELD_VALUE_RE = re.compile(r"(?:[A-Za-z0-9_.~-]|%[0-9A-F]{2})*")
TRUSTED_COMMENT_TAG = "lockbuild"


# --------------------------------------------------------------------------------------------
# Small helpers


def _show(text: str, limit: int = 60) -> str:
    """A short, quoted rendering of untrusted text for an error message."""
    if len(text) > limit:
        text = text[:limit] + "..."
    return repr(text)


def _b64encode(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _b64decode(text: str, *, expected_len: int, what: str, source: str, tip: str) -> bytes:
    """Strict base64 (standard alphabet, padded, canonical) of exactly ``expected_len`` bytes."""
    try:
        data = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise SignatureError(
            f"{source}: {what} is not valid base64: expected {expected_len} bytes in standard base64,"
            f" found {_show(text)}",
            tip=tip,
        ) from None
    if len(data) != expected_len:
        raise SignatureError(
            f"{source}: {what} has the wrong length: expected {expected_len} bytes, found {len(data)}",
            tip=tip,
        )
    if _b64encode(data) != text:
        raise SignatureError(
            f"{source}: {what} is not canonical base64 (stray padding bits): found {_show(text)}",
            tip=tip,
        )
    return data


def format_key_id(key_id: bytes) -> str:
    """A key id for display: the 8 bytes as a little-endian u64 in uppercase hex, zero-padded to 16 digits
    (minisign prints the same number without leading zeros; :func:`parse_key_id` accepts both)."""
    if len(key_id) != KEY_ID_LEN:
        raise SignatureError(
            f"a key id is {KEY_ID_LEN} bytes, found {len(key_id)}",
            tip="This is a bug in the caller; pass the 8 key-id bytes as stored in the key.",
        )
    return f"{int.from_bytes(key_id, 'little'):016X}"


def parse_key_id(text: str, *, source: str = "key id") -> bytes:
    """Inverse of :func:`format_key_id` (accepts lowercase hex). Exactly 16 digits: a shorter id could be a
    typo, and revoking the wrong key id silently would be worse than an error."""
    stripped = text.strip()
    if not _KEY_ID_HEX_RE.fullmatch(stripped):
        raise SignatureError(
            f"{source}: expected a key id of 16 hex digits, found {_show(text)}",
            tip="Copy the key id from `lockbuild doctor` or `lockbuild inspect`; minisign prints it without "
            "leading zeros, so pad it with zeros on the left to 16 digits.",
        )
    return int(stripped, 16).to_bytes(KEY_ID_LEN, "little")


def _check_comment(text: str, *, what: str, max_bytes: int) -> None:
    bad = [c for c in ("\r", "\n", "\0") if c in text]
    if bad:
        raise SignatureError(
            f"the {what} must be a single line: found {', '.join(repr(c) for c in bad)} in {_show(text)}",
            tip=f"Remove line breaks and NUL characters from the {what}.",
        )
    size = len(text.encode("utf-8"))
    if size > max_bytes:
        raise SignatureError(
            f"the {what} is too long for minisign: at most {max_bytes} bytes, found {size}",
            tip=f"Shorten the {what}.",
        )


# --------------------------------------------------------------------------------------------
# Public keys


@dataclass(frozen=True)
class PublicKey:
    """An Ed25519 public key with its minisign key id."""

    key_id: bytes
    raw: bytes

    def __post_init__(self) -> None:
        if len(self.key_id) != KEY_ID_LEN or len(self.raw) != PUBLIC_KEY_LEN:
            raise SignatureError(
                f"a public key needs a {KEY_ID_LEN}-byte key id and {PUBLIC_KEY_LEN} key bytes,"
                f" found {len(self.key_id)} and {len(self.raw)}",
                tip="This is a bug in the caller; build keys with parse_public_key().",
            )

    @property
    def key_id_hex(self) -> str:
        return format_key_id(self.key_id)

    def to_text(self, comment: str | None = None) -> str:
        """The public key file: comment line and base64 line, each ending in a newline."""
        if comment is None:
            comment = f"minisign public key {self.key_id_hex}"
        _check_comment(comment, what="public key comment", max_bytes=MAX_UNTRUSTED_COMMENT_BYTES)
        body = _b64encode(SIG_ALG + self.key_id + self.raw)
        return f"{UNTRUSTED_PREFIX}{comment}\n{body}\n"

    def to_base64(self) -> str:
        """The bare base64 line (what ``minisign -P`` takes)."""
        return _b64encode(SIG_ALG + self.key_id + self.raw)

    def _verifier(self) -> Ed25519PublicKey:
        return Ed25519PublicKey.from_public_bytes(self.raw)


def parse_public_key(text: str, *, source: str = "public key") -> PublicKey:
    """Parse a minisign public key file, or its bare base64 line."""
    tip = (
        "A minisign public key file has two lines: 'untrusted comment: ...' and a base64 line"
        " starting with 'RW'. Re-copy it from the publisher."
    )
    lines = [line.strip() for line in text.strip().split("\n")]
    if len(lines) == 1:
        body = lines[0]
    elif len(lines) == 2:
        if not lines[0].startswith("untrusted comment:"):
            raise SignatureError(
                f"{source}: expected the first line to start with 'untrusted comment:',"
                f" found {_show(lines[0])}",
                tip=tip,
            )
        body = lines[1]
    else:
        raise SignatureError(
            f"{source}: expected a public key (one comment line and one base64 line), found {len(lines)}"
            " lines",
            tip=tip,
        )
    if not body:
        raise SignatureError(f"{source}: expected a base64 public key, found an empty line", tip=tip)
    data = _b64decode(body, expected_len=_PUBLIC_KEY_STRUCT_LEN, what="public key", source=source, tip=tip)
    if data[:2] != SIG_ALG:
        raise SignatureError(
            f"{source}: unsupported public key algorithm: expected {SIG_ALG!r}, found {data[:2]!r}",
            tip=tip,
        )
    return PublicKey(key_id=data[2 : 2 + KEY_ID_LEN], raw=data[2 + KEY_ID_LEN :])


# --------------------------------------------------------------------------------------------
# Secret keys


@dataclass(frozen=True, eq=False)
class SecretKey:
    """An Ed25519 signing key with its minisign key id. Equality compares the key material."""

    key_id: bytes
    private: Ed25519PrivateKey = field(repr=False)

    def __post_init__(self) -> None:
        if len(self.key_id) != KEY_ID_LEN:
            raise SignatureError(
                f"a secret key needs a {KEY_ID_LEN}-byte key id, found {len(self.key_id)}",
                tip="This is a bug in the caller; build keys with generate_secret_key().",
            )

    def public_key(self) -> PublicKey:
        raw = self.private.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        return PublicKey(key_id=self.key_id, raw=raw)

    @property
    def key_id_hex(self) -> str:
        return format_key_id(self.key_id)

    def _seed(self) -> bytes:
        return self.private.private_bytes(
            serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SecretKey):
            return NotImplemented
        return self.key_id == other.key_id and hmac.compare_digest(self._seed(), other._seed())

    def __hash__(self) -> int:
        return hash(self.key_id)


def generate_secret_key() -> SecretKey:
    """A fresh Ed25519 key with a random 8-byte key id (as minisign does)."""
    return SecretKey(key_id=secrets.token_bytes(KEY_ID_LEN), private=Ed25519PrivateKey.generate())


def _smallest_n_log2(max_n: int) -> int:
    """The smallest n >= 1 (capped at 63) with 2**n > max_n / 2, as libsodium computes it."""
    n_log2 = 1
    while n_log2 < 63 and (1 << n_log2) <= max_n // 2:
        n_log2 += 1
    return n_log2


def scrypt_params(opslimit: int, memlimit: int) -> tuple[int, int, int]:
    """libsodium's ``pickparams`` for crypto_pwhash_scryptsalsa208sha256: returns ``(N, r, p)``."""
    opslimit = max(opslimit, 32768)
    r = 8
    if opslimit < memlimit // 32:
        n_log2 = _smallest_n_log2(opslimit // (r * 4))
        p = 1
    else:
        n_log2 = _smallest_n_log2(memlimit // (r * 128))
        max_rp = min((opslimit // 4) // (1 << n_log2), 0x3FFFFFFF)
        p = max_rp // r
    return 1 << n_log2, r, p


def _scrypt_stream(password: str, salt: bytes, opslimit: int, memlimit: int, *, source: str) -> bytes:
    n, r, p = scrypt_params(opslimit, memlimit)
    memory = 128 * n * r
    work = memory * p
    if p < 1 or memory > MAX_SCRYPT_MEMORY or work > MAX_SCRYPT_WORK:
        raise SignatureError(
            f"{source}: refusing scrypt parameters opslimit={opslimit} memlimit={memlimit}"
            f" (N={n}, r={r}, p={p}): expected p >= 1, at most {MAX_SCRYPT_MEMORY // 2**20} MiB of memory"
            f" and {MAX_SCRYPT_WORK // 2**30} GiB-equivalents of work, found {memory // 2**20} MiB and"
            f" {work / 2**30:.1f}",
            tip="The secret key file is corrupted or was not made by minisign/lockbuild; use a backup.",
        )
    try:
        return Scrypt(salt=salt, length=_KEYNUM_SK_LEN, n=n, r=r, p=p).derive(password.encode("utf-8"))
    except (ValueError, MemoryError, OverflowError) as exc:
        raise SignatureError(
            f"{source}: scrypt with N={n}, r={r}, p={p} ({memory // 2**20} MiB) failed: {exc}",
            tip="Free memory on this machine and retry, or decrypt the key on a machine with more memory.",
        ) from None


def _checksum(key_id: bytes, secret64: bytes) -> bytes:
    return hashlib.blake2b(SIG_ALG + key_id + secret64, digest_size=CHECKSUM_LEN).digest()


def _xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b, strict=True))


def encode_secret_key(
    sk: SecretKey,
    password: str | None,
    *,
    opslimit: int = DEFAULT_OPSLIMIT,
    memlimit: int = DEFAULT_MEMLIMIT,
    comment: str | None = None,
) -> str:
    """The secret key file text; ``password=None`` writes it unencrypted (like ``minisign -G -W``)."""
    seed = sk._seed()
    secret64 = seed + sk.public_key().raw
    keynum_sk = sk.key_id + secret64 + _checksum(sk.key_id, secret64)
    if password is None:
        kdf_alg, salt, ops, mem = KDF_NONE, bytes(SALT_LEN), 0, 0
        if comment is None:
            comment = "lockbuild unencrypted secret key"
    else:
        if not password:
            raise SignatureError(
                "expected a non-empty passphrase to encrypt the secret key, found an empty one",
                tip="Give a passphrase, or pass None to write the key unencrypted on purpose.",
            )
        if len(password.encode("utf-8")) > MAX_PASSWORD_BYTES or "\n" in password or "\r" in password:
            raise SignatureError(
                f"the passphrase must be one line of at most {MAX_PASSWORD_BYTES} bytes (minisign's limit)",
                tip="Choose a shorter passphrase without line breaks.",
            )
        kdf_alg, salt, ops, mem = KDF_SCRYPT, secrets.token_bytes(SALT_LEN), opslimit, memlimit
        stream = _scrypt_stream(password, salt, ops, mem, source="new secret key")
        keynum_sk = _xor(keynum_sk, stream)
        if comment is None:
            comment = "lockbuild encrypted secret key"
    _check_comment(comment, what="secret key comment", max_bytes=MAX_UNTRUSTED_COMMENT_BYTES)
    data = (
        SIG_ALG
        + kdf_alg
        + CHK_BLAKE2B
        + salt
        + ops.to_bytes(8, "little")
        + mem.to_bytes(8, "little")
        + keynum_sk
    )
    return f"{UNTRUSTED_PREFIX}{comment}\n{_b64encode(data)}\n"


def decode_secret_key(text: str, password: Callable[[], str], *, source: str = "secret key") -> SecretKey:
    """Parse (and decrypt) a minisign secret key file. ``password()`` is called only if it is encrypted."""
    tip = "A minisign secret key file has two lines: 'untrusted comment: ...' and one base64 line."
    lines = [line.strip() for line in text.strip().split("\n")]
    if len(lines) != 2 or not lines[0].startswith("untrusted comment:"):
        raise SignatureError(
            f"{source}: expected a secret key file ('untrusted comment: ...' then one base64 line),"
            f" found {len(lines)} line(s) starting with {_show(lines[0])}",
            tip=tip,
        )
    data = _b64decode(
        lines[1], expected_len=_SECRET_KEY_STRUCT_LEN, what="secret key", source=source, tip=tip
    )
    sig_alg, kdf_alg, chk_alg = data[0:2], data[2:4], data[4:6]
    salt = data[6 : 6 + SALT_LEN]
    pos = 6 + SALT_LEN
    opslimit = int.from_bytes(data[pos : pos + 8], "little")
    memlimit = int.from_bytes(data[pos + 8 : pos + 16], "little")
    keynum_sk = data[pos + 16 :]
    if sig_alg != SIG_ALG:
        raise SignatureError(
            f"{source}: unsupported signature algorithm: expected {SIG_ALG!r}, found {sig_alg!r}", tip=tip
        )
    if chk_alg != CHK_BLAKE2B:
        raise SignatureError(
            f"{source}: unsupported checksum algorithm: expected {CHK_BLAKE2B!r}, found {chk_alg!r}", tip=tip
        )
    if kdf_alg == KDF_SCRYPT:
        stream = _scrypt_stream(password(), salt, opslimit, memlimit, source=source)
        keynum_sk = _xor(keynum_sk, stream)
    elif kdf_alg != KDF_NONE:
        raise SignatureError(
            f"{source}: unsupported key derivation: expected {KDF_SCRYPT!r} (encrypted) or {KDF_NONE!r}"
            f" (unencrypted), found {kdf_alg!r}",
            tip=tip,
        )
    key_id = keynum_sk[:KEY_ID_LEN]
    secret64 = keynum_sk[KEY_ID_LEN : KEY_ID_LEN + 64]
    checksum = keynum_sk[KEY_ID_LEN + 64 :]
    # minisign -G -W leaves the checksum of an unencrypted key zeroed (and never checks it);
    # the seed/public-key consistency check below still catches corruption.
    zeroed_ok = kdf_alg == KDF_NONE and checksum == bytes(CHECKSUM_LEN)
    if not zeroed_ok and not hmac.compare_digest(checksum, _checksum(key_id, secret64)):
        if kdf_alg == KDF_SCRYPT:
            raise SignatureError(
                f"wrong passphrase for {source}: the decrypted key's checksum does not match",
                tip="Retype the passphrase for this key (it is the one given when the key was made).",
            )
        raise SignatureError(
            f"{source}: the unencrypted secret key is corrupted: its checksum does not match",
            tip="Restore the secret key file from a backup.",
        )
    private = Ed25519PrivateKey.from_private_bytes(secret64[:SEED_LEN])
    sk = SecretKey(key_id=key_id, private=private)
    if not hmac.compare_digest(sk.public_key().raw, secret64[SEED_LEN:]):
        raise SignatureError(
            f"{source}: the public half stored in the secret key does not match its seed",
            tip="Restore the secret key file from a backup.",
        )
    return sk


# --------------------------------------------------------------------------------------------
# Signatures


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
            f"{_b64encode(self.algorithm + self.key_id + self.signature)}\n"
            f"{TRUSTED_PREFIX}{self.trusted_comment}\n"
            f"{_b64encode(self.global_signature)}\n"
        )


def parse_signatures(
    text: str | bytes, *, source: str = "signature", max_signatures: int = 64
) -> tuple[Signature, ...]:
    """Parse one or more consecutive 4-line minisign signature blocks, strictly."""
    tip = (
        "A minisign signature is 4 lines per signing key: 'untrusted comment: ...', base64,"
        " 'trusted comment: ...', base64. Re-download the .minisig file from the publisher."
    )
    if isinstance(text, bytes):
        size = len(text)
        if size > MAX_SIGNATURE_FILE_BYTES:
            raise SignatureError(
                f"{source}: expected a signature file of at most {MAX_SIGNATURE_FILE_BYTES} bytes,"
                f" found {size}",
                tip=tip,
            )
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SignatureError(
                f"{source}: expected UTF-8 text, found an invalid byte at offset {exc.start}", tip=tip
            ) from None
    elif len(text) > MAX_SIGNATURE_FILE_BYTES or len(text.encode("utf-8")) > MAX_SIGNATURE_FILE_BYTES:
        raise SignatureError(
            f"{source}: expected a signature file of at most {MAX_SIGNATURE_FILE_BYTES} bytes,"
            f" found {len(text.encode('utf-8'))}",
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
        raise SignatureError(
            f"{source}: expected at most {max_signatures} signature blocks, found {count}", tip=tip
        )
    result = []
    for index in range(count):
        block = lines[4 * index : 4 * index + 4]
        first = 4 * index + 1
        where = f"{source}: signature {index + 1} (line {first}"
        if not block[0].startswith(UNTRUSTED_PREFIX):
            raise SignatureError(
                f"{where}): expected a line starting with {UNTRUSTED_PREFIX!r}, found {_show(block[0])}",
                tip=tip,
            )
        if not block[2].startswith(TRUSTED_PREFIX):
            raise SignatureError(
                f"{source}: signature {index + 1} (line {first + 2}): expected a line starting with"
                f" {TRUSTED_PREFIX!r}, found {_show(block[2])}",
                tip=tip,
            )
        sig_struct = _b64decode(
            block[1],
            expected_len=_SIG_STRUCT_LEN,
            what=f"signature {index + 1} (line {first + 1})",
            source=source,
            tip=tip,
        )
        global_sig = _b64decode(
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


def _check_prehash(file_blake2b: bytes) -> None:
    if len(file_blake2b) != PREHASH_LEN:
        raise SignatureError(
            f"expected the file's BLAKE2b-512 digest ({PREHASH_LEN} bytes), found {len(file_blake2b)} bytes",
            tip="This is a bug in the caller; use hashlib.blake2b(digest_size=64) or signing.prehash().",
        )


def sign_prehashed(
    sk: SecretKey,
    file_blake2b: bytes,
    trusted_comment: str,
    untrusted_comment: str = "signature from lockbuild secret key",
) -> str:
    """One ``ED`` signature block (4 lines) over a file whose BLAKE2b-512 is ``file_blake2b``."""
    _check_prehash(file_blake2b)
    _check_comment(trusted_comment, what="trusted comment", max_bytes=MAX_TRUSTED_COMMENT_BYTES)
    _check_comment(untrusted_comment, what="untrusted comment", max_bytes=MAX_UNTRUSTED_COMMENT_BYTES)
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


def verify_signature(
    sig: Signature, key: PublicKey, *, file_blake2b: bytes, require_prehashed: bool = True
) -> None:
    """Check ``sig`` against ``key`` for the file with BLAKE2b-512 ``file_blake2b``; raise if it fails."""
    tip = "Do not use this file. Re-download the file and its .minisig from the publisher and check again."
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
            f"signature by key {sig.key_id_hex} uses the legacy non-prehashed algorithm 'Ed': expected"
            f" 'ED'; {why}",
            tip="Re-sign the file with minisign 0.8 or later (its default is prehashed), without -l.",
        )
    if sig.algorithm != SIG_ALG_HASHED:
        raise SignatureError(
            f"unknown signature algorithm {sig.algorithm!r} in signature by key {sig.key_id_hex}:"
            f" expected {SIG_ALG_HASHED!r}",
            tip=tip,
        )
    _check_prehash(file_blake2b)
    try:
        verifier = key._verifier()
    except ValueError:
        raise SignatureError(
            f"public key {key.key_id_hex} is not a valid Ed25519 key", tip="Re-copy the public key."
        ) from None
    try:
        verifier.verify(sig.signature, file_blake2b)
    except InvalidSignature:
        raise SignatureError(
            f"bad signature: the signature by key {sig.key_id_hex} does not verify against this file's"
            " BLAKE2b-512 digest (the file was altered, the signature was altered, or it was made for"
            " another file or by another key)",
            tip=tip,
        ) from None
    try:
        verifier.verify(sig.global_signature, sig.signature + sig.trusted_comment.encode("utf-8"))
    except InvalidSignature:
        raise SignatureError(
            f"bad global signature: the trusted comment of the signature by key {sig.key_id_hex} was"
            f" modified after signing (found {_show(sig.trusted_comment)})",
            tip=tip,
        ) from None


# --------------------------------------------------------------------------------------------
# Trust policy


@dataclass(frozen=True)
class TrustStore:
    """The public keys an installer trusts, and the key ids it has revoked."""

    keys: tuple[PublicKey, ...]
    revoked: frozenset[bytes]
    source: str

    def find(self, key_id: bytes) -> PublicKey | None:
        for key in self.keys:
            if key.key_id == key_id:
                return key
        return None


def parse_revocations(text: str, *, source: str = "revoked.txt") -> frozenset[bytes]:
    """One key id (minisign display form) per line; '#' starts a comment; blank lines are ignored."""
    revoked = set()
    for number, raw_line in enumerate(text.split("\n"), 1):
        line = raw_line.split("#", 1)[0].strip()
        if line:
            revoked.add(parse_key_id(line, source=f"{source} line {number}"))
    return frozenset(revoked)


def check_policy(
    signatures: Sequence[Signature], trust: TrustStore, *, file_blake2b: bytes, threshold: int = 1
) -> tuple[PublicKey, ...]:
    """The distinct trusted, non-revoked keys whose signatures verify; raise if fewer than ``threshold``.

    A signature by an unknown or revoked key does not count. A signature that names a trusted key but
    does not verify is a hard error: someone altered the file or the signature.
    """
    if threshold < 1:
        raise SignatureError(
            f"the signature threshold must be at least 1, found {threshold}",
            tip="Set the required number of signatures to 1 or more.",
        )
    _check_prehash(file_blake2b)
    accepted: list[PublicKey] = []
    reasons: list[str] = []
    for index, sig in enumerate(signatures, 1):
        label = f"signature {index} (key {sig.key_id_hex})"
        if sig.key_id in trust.revoked:
            reasons.append(f"{label} is from a revoked key")
            continue
        key = trust.find(sig.key_id)
        if key is None:
            reasons.append(f"{label} is from key id {sig.key_id_hex}, which is not in the trust store")
            continue
        if sig.algorithm == SIG_ALG:
            reasons.append(f"{label} uses the legacy non-prehashed 'Ed' algorithm, which is not accepted")
            continue
        try:
            verify_signature(sig, key, file_blake2b=file_blake2b)
        except SignatureError as exc:
            raise SignatureError(
                f"{label} names trusted key {key.key_id_hex} from {trust.source} but does not verify:"
                f" {exc.message}",
                tip="Do not install this bundle: it or its signature was altered. Re-download both from"
                " the publisher and report the mismatch.",
            ) from None
        if key in accepted:
            reasons.append(f"{label} repeats a key already counted; the same key counts once")
            continue
        accepted.append(key)
    if len(accepted) < threshold:
        found = f"{len(signatures)} signature(s) present" if signatures else "no signatures present"
        detail = "; ".join(reasons) if reasons else "every signature present counted; more distinct signers are needed"
        raise SignatureError(
            f"signature policy not met: needed {threshold} valid signature(s) from distinct trusted,"
            f" non-revoked keys in {trust.source}, found {len(accepted)} ({found}). {detail}",
            tip="Get the bundle signed by enough distinct trusted keys, or add the publisher's .pub file to"
            " the trust directory if you do trust it.",
        )
    return tuple(accepted)


# --------------------------------------------------------------------------------------------
# Signed metadata in the trusted comment


def format_trusted_comment(fields: Mapping[str, str]) -> str:
    """``lockbuild k=v k=v ...`` in the given order, values percent-encoded."""
    parts = [TRUSTED_COMMENT_TAG]
    for key, value in fields.items():
        if not _FIELD_KEY_RE.fullmatch(key):
            raise SignatureError(
                f"trusted comment field names must match [A-Za-z0-9_.-]+, found {_show(key)}",
                tip="This is a bug in the caller; use plain field names such as 'engine' or 'sha256'.",
            )
        parts.append(f"{key}={urllib.parse.quote(value, safe='')}")
    text = " ".join(parts)
    _check_comment(text, what="trusted comment", max_bytes=MAX_TRUSTED_COMMENT_BYTES)
    return text


def parse_trusted_comment(text: str) -> dict[str, str]:
    """Inverse of :func:`format_trusted_comment`; strict about shape, encoding and duplicates."""
    tip = "The trusted comment was not written by lockbuild; re-sign the bundle with `lockbuild sign`."
    tokens = text.split(" ")
    if tokens[0] != TRUSTED_COMMENT_TAG:
        raise SignatureError(
            f"expected a trusted comment starting with {TRUSTED_COMMENT_TAG!r}, found {_show(text)}", tip=tip
        )
    fields: dict[str, str] = {}
    for token in tokens[1:]:
        key, sep, value = token.partition("=")
        if not sep or not _FIELD_KEY_RE.fullmatch(key) or not _FIELD_VALUE_RE.fullmatch(value):
            raise SignatureError(
                f"malformed trusted comment field: expected key=percent-encoded-value, found {_show(token)}",
                tip=tip,
            )
        if key in fields:
            raise SignatureError(f"duplicated trusted comment field {key!r}", tip=tip)
        try:
            decoded = urllib.parse.unquote(value, errors="strict")
        except UnicodeDecodeError:
            raise SignatureError(
                f"trusted comment field {key!r}: value {_show(value)} is not percent-encoded UTF-8", tip=tip
            ) from None
        if urllib.parse.quote(decoded, safe="") != value:
            raise SignatureError(
                f"trusted comment field {key!r}: value {_show(value)} is not canonically percent-encoded",
                tip=tip,
            )
        fields[key] = decoded
    return fields


# --------------------------------------------------------------------------------------------
# I/O: the only functions here that touch the file system.


def _read_text(path: Path, *, what: str, limit: int) -> str:
    tip = f"Check that {path} exists, is a readable file, and is the {what} you meant."
    try:
        with path.open("rb") as fh:
            data = fh.read(limit + 1)
    except OSError as exc:
        raise SignatureError(f"cannot read {what} {path}: {exc.strerror or exc}", tip=tip) from None
    if len(data) > limit:
        raise SignatureError(f"{what} {path} is too large: expected at most {limit} bytes", tip=tip)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise SignatureError(f"{what} {path} is not UTF-8 text", tip=tip) from None


def _write_new_file(path: Path, text: str, mode: int) -> None:
    """Create ``path`` exclusively (never overwrite) with permissions ``mode``."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    except FileExistsError:
        raise SignatureError(
            f"{path} already exists; refusing to overwrite a key",
            tip="Choose another name, or move the existing key away first if you really mean to replace it.",
        ) from None
    except OSError as exc:
        raise SignatureError(
            f"cannot create {path}: {exc.strerror or exc}", tip="Check the directory exists and is writable."
        ) from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            os.fchmod(fh.fileno(), mode)
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as exc:
        path.unlink(missing_ok=True)
        raise SignatureError(
            f"cannot write {path}: {exc.strerror or exc}", tip="Check free space and permissions."
        ) from None


def write_keypair(path_stem: Path, *, password: str | None, comment: str | None = None) -> tuple[Path, Path]:
    """Write a new key pair to ``STEM.key`` (mode 0600, never overwritten) and ``STEM.pub``."""
    key_path = path_stem.parent / (path_stem.name + ".key")
    pub_path = path_stem.parent / (path_stem.name + ".pub")
    for existing in (key_path, pub_path):
        if existing.exists():
            raise SignatureError(
                f"{existing} already exists; refusing to overwrite a key",
                tip="Choose another name, or move the existing key away first if you really mean to"
                " replace it.",
            )
    sk = generate_secret_key()
    key_text = encode_secret_key(sk, password)
    pub_text = sk.public_key().to_text(comment)
    _write_new_file(key_path, key_text, 0o600)
    try:
        _write_new_file(pub_path, pub_text, 0o644)
    except SignatureError:
        key_path.unlink(missing_ok=True)
        raise
    return key_path, pub_path


def read_secret_key(path: Path, password: Callable[[], str]) -> SecretKey:
    return decode_secret_key(
        _read_text(path, what="secret key", limit=MAX_KEY_FILE_BYTES), password, source=str(path)
    )


def read_public_key(path: Path) -> PublicKey:
    return parse_public_key(_read_text(path, what="public key", limit=MAX_KEY_FILE_BYTES), source=str(path))


def load_trust_dir(path: Path) -> TrustStore:
    """Every ``*.pub`` in ``path`` plus ``revoked.txt``; anything missing or malformed fails closed."""
    tip = (
        f"Put the publishers' minisign .pub files in {path} (and optionally revoked.txt with one key id"
        " per line); remove or fix any file that is not a valid public key."
    )
    if not path.is_dir():
        state = "is not a directory" if path.exists() else "does not exist"
        raise SignatureError(f"trust directory {path} {state}: expected a directory of .pub files", tip=tip)
    try:
        pub_files = sorted(p for p in path.iterdir() if p.name.endswith(".pub"))
    except OSError as exc:
        raise SignatureError(f"cannot list trust directory {path}: {exc.strerror or exc}", tip=tip) from None
    keys: list[PublicKey] = []
    for pub_file in pub_files:
        try:
            key = parse_public_key(
                _read_text(pub_file, what="public key", limit=MAX_KEY_FILE_BYTES), source=str(pub_file)
            )
        except SignatureError as exc:
            raise SignatureError(f"malformed public key in trust directory: {exc.message}", tip=tip) from None
        same_id = [k for k in keys if k.key_id == key.key_id]
        if same_id and same_id[0] != key:
            raise SignatureError(
                f"trust directory {path}: {pub_file.name} has key id {key.key_id_hex}, already used by a"
                " different key in another file",
                tip=tip,
            )
        if not same_id:
            keys.append(key)
    if not keys:
        raise SignatureError(f"trust directory {path} holds no *.pub files: expected at least one", tip=tip)
    revoked_path = path / "revoked.txt"
    revoked: frozenset[bytes] = frozenset()
    if revoked_path.exists() or revoked_path.is_symlink():
        text = _read_text(revoked_path, what="revocation list", limit=MAX_KEY_FILE_BYTES)
        revoked = parse_revocations(text, source=str(revoked_path))
    return TrustStore(keys=tuple(keys), revoked=revoked, source=str(path))
