"""The signature scheme as a port: what the trust path asks of a signature format, and the one in use.

A scheme parses a signature file into blocks, verifies a block as a trusted identity, signs, and names its
files. :data:`SCHEME` is the one adapter, minisign (``trust/minisignscheme.py``), the only importer of
``lockbuild.minisign`` besides ``keygen`` and the signing process."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Literal, Protocol

from lockbuild.trust.minisignscheme import MINISIGN


class Identity(Protocol):
    """A signer a trust store may hold. ``raw`` is who it is (one identity counts once, whatever a block
    calls it); ``key_id`` is how a block names it (not itself signed: it only finds the identity)."""

    @property
    def raw(self) -> bytes: ...

    @property
    def key_id(self) -> bytes: ...

    @property
    def key_id_hex(self) -> str:
        """How messages and records name the signer."""
        ...

    def to_text(self) -> str:
        """The identity as a trust directory holds it (a public key file)."""
        ...


class Block(Protocol):
    """One signature block as parsed: whom it names and what it claims, unverified until
    :meth:`SignatureScheme.verify` says it is an identity's."""

    @property
    def key_id(self) -> bytes: ...

    @property
    def key_id_hex(self) -> str: ...

    @property
    def trusted_comment(self) -> str:
        """The statement the block carries, as the text the signer signed."""
        ...


class SigningKey(Protocol):
    """A secret key held in this process: the self-test's throw-away key, and tests (a user's key file is
    read by the signing process alone)."""

    @property
    def key_id(self) -> bytes: ...

    @property
    def key_id_hex(self) -> str: ...

    def public_key(self) -> Identity: ...


class SignatureScheme(Protocol):
    """A signature format behind the port. Parsing is strict and bounded; a failed check raises
    SignatureError saying what was expected and found."""

    name: str
    suffix: str  # the signature file beside a signed file: NAME + suffix
    max_blocks: int  # the most blocks one signature file may hold (one per signer)
    key_file_bytes: int  # the largest key file (and trust directory file) read

    def parse(self, data: bytes, *, source: str, max_bytes: int = ...) -> tuple[Block, ...]:
        """The blocks of a signature file."""
        ...

    def join(self, blocks: Sequence[Block]) -> bytes:
        """The signature file holding ``blocks``, in order (:meth:`parse` gives them back)."""
        ...

    def parse_identity(self, text: str, *, source: str) -> Identity:
        """A trusted identity from its file in a trust directory."""
        ...

    def is_secret_key(self, text: str) -> bool:
        """Whether a file put in a trust directory as an identity is a secret key."""
        ...

    def parse_revocation(self, line: str, *, source: str) -> tuple[Literal["id", "key"], bytes]:
        """One line of ``revoked.txt``: a key id, or an identity (its ``raw``)."""
        ...

    def refusal(self, block: Block) -> str | None:
        """Why this lockbuild never accepts a block of this form (a legacy algorithm); None: it may count."""
        ...

    def verify(self, block: Block, identity: Identity, *, file_blake2b: bytes | None) -> None:
        """Raise unless ``identity`` signed ``block``'s statement (and, with the file's BLAKE2b-512, the file)."""
        ...

    def check_statement(self, text: str) -> None:
        """Raise unless ``text`` fits in a block as its statement."""
        ...

    def sign(self, key: SigningKey, file_blake2b: bytes, statement: str, *, note: str) -> str:
        """One block over the file with BLAKE2b-512 ``file_blake2b``, carrying ``statement``."""
        ...

    def generate_key(self) -> SigningKey:
        """A fresh secret key, held in memory only."""
        ...


SCHEME: SignatureScheme = MINISIGN


def signature_path(signed: Path) -> Path:
    """The signature file beside a signed file (``NAME.lbz.minisig``)."""
    return signed.with_name(signed.name + SCHEME.suffix)
