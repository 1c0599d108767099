"""Signing an image: the image and its record checked first, then one block signed by the signing
process (``lockbuild.trust.sign.sign_in_fresh_process``, the only one that reads the key), written to
``FILE.sqfs.minisig`` in the same minisign format as a bundle's signature file."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lockbuild.image.judge import checked_contents, statement_of
from lockbuild.trust.policy import Evaluation
from lockbuild.trust.scheme import Block
from lockbuild.trust.sign import KeyFileSigner, judge_existing, write_with_block
from lockbuild.trust.source import digest_signed_file, read_signatures, signature_path
from lockbuild.trust.truststore import TrustStore


@dataclass(frozen=True)
class ImageSigned:
    image: Path
    signature: Path
    signer: str
    replaced: bool
    sha256: str
    existing: Evaluation | None

    def to_json(self) -> dict[str, Any]:
        return {
            "image": str(self.image),
            "signature": str(self.signature),
            "signer": self.signer,
            "replaced": self.replaced,
            "sha256": self.sha256,
            "existing": self.existing.to_json() if self.existing is not None else None,
        }


def sign_image(
    image: Path,
    key: Path,
    *,
    password: str | None,
    allow_readable_key: bool = False,
    expires: dt.datetime | None = None,
    store: TrustStore | None = None,
) -> ImageSigned:
    sig_path = signature_path(image)
    existing: tuple[Block, ...] = ()
    if sig_path.exists() or sig_path.is_symlink():
        existing = read_signatures(sig_path)
    digests = digest_signed_file(image, what="image")  # with minisign's prehash: the ED block signs the image's bytes
    _, raw, marker = checked_contents(image, digests)
    evaluation = judge_existing(existing, store, name=image.name, digests=digests)
    statement = statement_of(image, digests, raw, marker, expires)
    signed = KeyFileSigner(key, password, allow_readable_key).sign(
        [(digests.prehash(image.name), statement.to_comment())]
    )
    replaced = write_with_block(sig_path, existing, signed.key_id, signed.blocks[0])
    return ImageSigned(image, sig_path, signed.key_id_hex, replaced, digests.whole, evaluation)
