"""Compatibility names: the minisign codec now lives in :mod:`lockbuild.minisign` and the trust store in
:mod:`lockbuild.trust`. New code imports from there; this module only re-exports them."""

from lockbuild.minisign import (
    DEFAULT_MEMLIMIT,
    DEFAULT_OPSLIMIT,
    KEY_ID_LEN,
    MINISIGN_DEFAULT_MEMLIMIT,
    MINISIGN_DEFAULT_OPSLIMIT,
    PublicKey,
    SecretKey,
    Signature,
    decode_secret_key,
    encode_secret_key,
    format_key_id,
    generate_secret_key,
    parse_key_id,
    parse_public_key,
    parse_signatures,
    prehash,
    read_public_key,
    read_secret_key,
    scrypt_params,
    sign_prehashed,
    verify_signature,
    write_keypair,
)
from lockbuild.trust.opener import load_store as load_trust_dir
from lockbuild.trust.statement import format_trusted_comment, parse_trusted_comment
from lockbuild.trust.store import TrustStore

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
