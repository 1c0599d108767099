"""minisign keys: public keys (parse, print) and secret keys (generate, encrypt with scrypt, decrypt).
Pure: text in, a key or a SignatureError out; a caller's mistake (wrong byte lengths) is a ValueError."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

from lockbuild.errors import SignatureError
from lockbuild.minisign.encoding import (
    CHECKSUM_LEN,
    CHK_BLAKE2B,
    DEFAULT_MEMLIMIT,
    DEFAULT_OPSLIMIT,
    KDF_NONE,
    KDF_SCRYPT,
    KEY_ID_LEN,
    KEYNUM_SK_LEN,
    MAX_PASSWORD_BYTES,
    MAX_SCRYPT_MEMORY,
    MAX_SCRYPT_WORK,
    MAX_UNTRUSTED_COMMENT_BYTES,
    PUBLIC_KEY_LEN,
    PUBLIC_KEY_STRUCT_LEN,
    SALT_LEN,
    SECRET_KEY_STRUCT_LEN,
    SEED_LEN,
    SIG_ALG,
    UNTRUSTED_PREFIX,
    b64decode,
    b64encode,
    check_comment,
    format_key_id,
)
from lockbuild.text import show


@dataclass(frozen=True)
class PublicKey:
    """An Ed25519 public key with its minisign key id."""

    key_id: bytes
    raw: bytes

    def __post_init__(self) -> None:
        if len(self.key_id) != KEY_ID_LEN or len(self.raw) != PUBLIC_KEY_LEN:
            raise ValueError(
                f"a public key needs a {KEY_ID_LEN}-byte key id and {PUBLIC_KEY_LEN} key bytes,"
                f" found {len(self.key_id)} and {len(self.raw)}"
            )

    @property
    def key_id_hex(self) -> str:
        return format_key_id(self.key_id)

    def to_text(self, comment: str | None = None) -> str:
        """The public key file: comment line and base64 line, each ending in a newline."""
        if comment is None:
            comment = f"minisign public key {self.key_id_hex}"
        check_comment(comment, what="public key comment", max_bytes=MAX_UNTRUSTED_COMMENT_BYTES)
        body = b64encode(SIG_ALG + self.key_id + self.raw)
        return f"{UNTRUSTED_PREFIX}{comment}\n{body}\n"

    def to_base64(self) -> str:
        """The bare base64 line (what ``minisign -P`` takes)."""
        return b64encode(SIG_ALG + self.key_id + self.raw)

    def verifier(self) -> Ed25519PublicKey:
        return Ed25519PublicKey.from_public_bytes(self.raw)


def parse_public_key(text: str, *, source: str = "public key") -> PublicKey:
    """Parse a minisign public key file, or its bare base64 line: ``untrusted comment: ...`` then base64
    of ``b"Ed" + key_id(8) + ed25519_pk(32)``."""
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
                f"{source}: expected the first line to start with 'untrusted comment:', found {show(lines[0])}",
                tip=tip,
            )
        body = lines[1]
    else:
        raise SignatureError(
            f"{source}: expected a public key (one comment line and one base64 line), found {len(lines)} lines",
            tip=tip,
        )
    if not body:
        raise SignatureError(f"{source}: expected a base64 public key, found an empty line", tip=tip)
    data = b64decode(body, expected_len=PUBLIC_KEY_STRUCT_LEN, what="public key", source=source, tip=tip)
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
            raise ValueError(f"a secret key needs a {KEY_ID_LEN}-byte key id, found {len(self.key_id)}")

    def public_key(self) -> PublicKey:
        raw = self.private.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
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
        secret = password.encode("utf-8")
    except UnicodeEncodeError:  # say nothing of which character, nor where: it is part of a passphrase
        raise SignatureError(
            f"{source}: the passphrase is not valid UTF-8 text; expected the passphrase the key was made with.",
            tip="Type the passphrase again, or set LOCKBUILD_KEY_PASSWORD from a UTF-8 source.",
        ) from None
    try:
        return Scrypt(salt=salt, length=KEYNUM_SK_LEN, n=n, r=r, p=p).derive(secret)
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
    check_comment(comment, what="secret key comment", max_bytes=MAX_UNTRUSTED_COMMENT_BYTES)
    data = SIG_ALG + kdf_alg + CHK_BLAKE2B + salt + ops.to_bytes(8, "little") + mem.to_bytes(8, "little") + keynum_sk
    return f"{UNTRUSTED_PREFIX}{comment}\n{b64encode(data)}\n"


def decode_secret_key(text: str, password: Callable[[], str], *, source: str = "secret key") -> SecretKey:
    """Parse (and decrypt) a minisign secret key file. ``password()`` is called only if it is encrypted.

    ``untrusted comment: ...`` then base64 of ``b"Ed" + kdf_alg(2) + b"B2" + salt(32) + opslimit(8, LE) +
    memlimit(8, LE) + keynum_sk(104)``, where ``keynum_sk = key_id(8) + seed(32) + pk(32) + blake2b-256
    checksum(32)``, XORed with scrypt output when ``kdf_alg`` is ``b"Sc"``, in clear when it is
    ``b"\\0\\0"`` (``minisign -G -W``)."""
    tip = "A minisign secret key file has two lines: 'untrusted comment: ...' and one base64 line."
    lines = [line.strip() for line in text.strip().split("\n")]
    if len(lines) != 2 or not lines[0].startswith("untrusted comment:"):
        raise SignatureError(
            f"{source}: expected a secret key file ('untrusted comment: ...' then one base64 line),"
            f" found {len(lines)} line(s) starting with {show(lines[0])}",
            tip=tip,
        )
    data = b64decode(lines[1], expected_len=SECRET_KEY_STRUCT_LEN, what="secret key", source=source, tip=tip)
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
