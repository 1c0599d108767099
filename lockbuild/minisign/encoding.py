"""minisign's formats, shared by keys and signature files: sizes, algorithm tags, comment lines,
strict base64 and key ids. Pure: text or bytes in, a value or a SignatureError out. Each format (minisign
0.8+) is described where it is parsed: ``parse_public_key``, ``decode_secret_key``, ``parse_signatures``."""

from __future__ import annotations

import base64
import binascii
import re

from lockbuild.errors import SignatureError
from lockbuild.text import show

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

MAX_KEY_FILE_BYTES = 64 * 1024  # a key file's largest size (a .minisig's is Limits.max_signature_file)

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

SECRET_KEY_STRUCT_LEN = 2 + 2 + 2 + SALT_LEN + 8 + 8 + KEY_ID_LEN + 2 * 32 + CHECKSUM_LEN  # 158
KEYNUM_SK_LEN = KEY_ID_LEN + 64 + CHECKSUM_LEN  # 104
PUBLIC_KEY_STRUCT_LEN = 2 + KEY_ID_LEN + PUBLIC_KEY_LEN  # 42
SIG_STRUCT_LEN = 2 + KEY_ID_LEN + SIGNATURE_LEN  # 74

_KEY_ID_HEX_RE = re.compile(r"[0-9A-Fa-f]{16}")


# --------------------------------------------------------------------------------------------
# Small helpers


def b64encode(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def b64decode(text: str, *, expected_len: int, what: str, source: str, tip: str) -> bytes:
    """Strict base64 (standard alphabet, padded, canonical) of exactly ``expected_len`` bytes."""
    try:
        data = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise SignatureError(
            f"{source}: {what} is not valid base64: expected {expected_len} bytes in standard base64,"
            f" found {show(text)}",
            tip=tip,
        ) from None
    if len(data) != expected_len:
        raise SignatureError(
            f"{source}: {what} has the wrong length: expected {expected_len} bytes, found {len(data)}",
            tip=tip,
        )
    if b64encode(data) != text:
        raise SignatureError(
            f"{source}: {what} is not canonical base64 (stray padding bits): found {show(text)}",
            tip=tip,
        )
    return data


def format_key_id(key_id: bytes) -> str:
    """A key id for display: the 8 bytes as a little-endian u64 in uppercase hex, zero-padded to 16 digits
    (minisign prints the same number without leading zeros; :func:`parse_key_id` accepts both)."""
    if len(key_id) != KEY_ID_LEN:
        raise ValueError(f"a key id is {KEY_ID_LEN} bytes, found {len(key_id)}")
    return f"{int.from_bytes(key_id, 'little'):016X}"


def parse_key_id(text: str, *, source: str = "key id") -> bytes:
    """Inverse of :func:`format_key_id` (accepts lowercase hex). Exactly 16 digits: a shorter id could be a
    typo, and revoking the wrong key id silently would be worse than an error."""
    stripped = text.strip()
    if not _KEY_ID_HEX_RE.fullmatch(stripped):
        raise SignatureError(
            f"{source}: expected a key id of 16 hex digits, found {show(text)}",
            tip="Copy the key id from `lockbuild doctor` or `lockbuild inspect`; minisign prints it without "
            "leading zeros, so pad it with zeros on the left to 16 digits.",
        )
    return int(stripped, 16).to_bytes(KEY_ID_LEN, "little")


def check_comment(text: str, *, what: str, max_bytes: int) -> None:
    bad = [c for c in ("\r", "\n", "\0") if c in text]
    if bad:
        raise SignatureError(
            f"the {what} must be a single line: found {', '.join(repr(c) for c in bad)} in {show(text)}",
            tip=f"Remove line breaks and NUL characters from the {what}.",
        )
    size = len(text.encode("utf-8"))
    if size > max_bytes:
        raise SignatureError(
            f"the {what} is too long for minisign: at most {max_bytes} bytes, found {size}",
            tip=f"Shorten the {what}.",
        )
