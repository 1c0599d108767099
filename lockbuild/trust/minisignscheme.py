"""minisign, the one adapter behind the signature port (``trust/scheme.py``).

Blocks are minisign signature blocks (``ED``, prehashed), identities Ed25519 public keys named by their
key id, the statement the trusted comment (covered by the global signature), files ``NAME.minisig``.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal, TypeVar

from lockbuild.errors import SignatureError
from lockbuild.limits import DEFAULT_LIMITS
from lockbuild.minisign import (
    PublicKey,
    SecretKey,
    Signature,
    generate_secret_key,
    parse_key_id,
    parse_public_key,
    parse_signatures,
    sign_prehashed,
    verify_signature,
    verify_trusted_comment,
)
from lockbuild.minisign.encoding import (
    MAX_KEY_FILE_BYTES,
    MAX_TRUSTED_COMMENT_BYTES,
    SECRET_KEY_STRUCT_LEN,
    SIG_ALG_HASHED,
    check_comment,
)
from lockbuild.minisign.sigfile import MAX_SIGNATURES

if TYPE_CHECKING:
    from lockbuild.trust.scheme import Block, Identity, SigningKey


_T = TypeVar("_T")


def _mine(value: object, kind: type[_T], what: str) -> _T:
    if not isinstance(value, kind):
        raise SignatureError(f"expected a minisign {what}, found {type(value).__name__}: another scheme's.")
    return value


class MinisignScheme:
    """minisign's signature files, public keys and revocation lines, as the port asks for them."""

    name = "minisign"
    suffix = ".minisig"
    max_blocks = MAX_SIGNATURES
    key_file_bytes = MAX_KEY_FILE_BYTES

    def parse(
        self, data: bytes, *, source: str, max_bytes: int = DEFAULT_LIMITS.max_signature_file
    ) -> tuple[Signature, ...]:
        return parse_signatures(data, source=source, max_bytes=max_bytes)

    def join(self, blocks: Sequence[Block]) -> bytes:
        return "".join(_mine(b, Signature, "signature block").to_text() for b in blocks).encode("utf-8")

    def parse_identity(self, text: str, *, source: str) -> PublicKey:
        return parse_public_key(text, source=source)

    def is_secret_key(self, text: str) -> bool:
        """A secret key's line decodes to the 158-byte secret key structure (the error must then say to
        remove it, not that its length is wrong)."""
        lines = [x.strip() for x in text.splitlines() if x.strip() and not x.startswith("untrusted comment:")]
        try:
            data = base64.b64decode(lines[0], validate=True) if len(lines) == 1 else b""
        except (binascii.Error, ValueError):
            return False
        return len(data) == SECRET_KEY_STRUCT_LEN and data[:2] == b"Ed"

    def parse_revocation(self, line: str, *, source: str) -> tuple[Literal["id", "key"], bytes]:
        """A key id (16 hex digits) or a public key (its base64 line, ``RW...``)."""
        if len(line) > 16 and line.startswith("RW"):
            return "key", parse_public_key(line, source=source).raw
        return "id", parse_key_id(line, source=source)

    def refusal(self, block: Block) -> str | None:
        if _mine(block, Signature, "signature block").algorithm != SIG_ALG_HASHED:
            return "uses the legacy non-prehashed 'Ed' algorithm, which is not accepted"
        return None

    def verify(self, block: Block, identity: Identity, *, file_blake2b: bytes | None) -> None:
        """With the file's prehash: the ED file signature, then the global one; without: the global
        signature alone (the statement is the key's, proven without the file)."""
        sig, key = _mine(block, Signature, "signature block"), _mine(identity, PublicKey, "public key")
        if file_blake2b is not None:
            verify_signature(sig, key, file_blake2b=file_blake2b)
        else:
            verify_trusted_comment(sig, key)

    def check_statement(self, text: str) -> None:
        check_comment(text, what="trusted comment", max_bytes=MAX_TRUSTED_COMMENT_BYTES)

    def sign(self, key: SigningKey, file_blake2b: bytes, statement: str, *, note: str) -> str:
        return sign_prehashed(_mine(key, SecretKey, "secret key"), file_blake2b, statement, untrusted_comment=note)

    def generate_key(self) -> SecretKey:
        return generate_secret_key()


MINISIGN = MinisignScheme()
