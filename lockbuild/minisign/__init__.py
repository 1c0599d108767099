"""A minisign codec: keys (``keys``), signature files (``sigfile``), key files on disk (``keyfiles``).

Stock minisign reads what this writes and the other way round; lockbuild's own meaning of a trusted
comment (the signed statement about a bundle) lives in :mod:`lockbuild.trust`, not here.
"""

from lockbuild.minisign.encoding import (
    DEFAULT_MEMLIMIT,
    DEFAULT_OPSLIMIT,
    KEY_ID_LEN,
    MINISIGN_DEFAULT_MEMLIMIT,
    MINISIGN_DEFAULT_OPSLIMIT,
    format_key_id,
    parse_key_id,
)
from lockbuild.minisign.keyfiles import read_public_key, read_secret_key, write_keypair
from lockbuild.minisign.keys import (
    PublicKey,
    SecretKey,
    decode_secret_key,
    encode_secret_key,
    generate_secret_key,
    parse_public_key,
    scrypt_params,
)
from lockbuild.minisign.sigfile import (
    Signature,
    parse_signatures,
    prehash,
    sign_prehashed,
    verify_signature,
    verify_trusted_comment,
)

__all__ = [
    "DEFAULT_MEMLIMIT",
    "DEFAULT_OPSLIMIT",
    "KEY_ID_LEN",
    "MINISIGN_DEFAULT_MEMLIMIT",
    "MINISIGN_DEFAULT_OPSLIMIT",
    "PublicKey",
    "SecretKey",
    "Signature",
    "decode_secret_key",
    "encode_secret_key",
    "format_key_id",
    "generate_secret_key",
    "parse_key_id",
    "parse_public_key",
    "parse_signatures",
    "prehash",
    "read_public_key",
    "read_secret_key",
    "scrypt_params",
    "sign_prehashed",
    "verify_signature",
    "verify_trusted_comment",
    "write_keypair",
]
