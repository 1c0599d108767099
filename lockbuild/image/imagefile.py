"""An image behind the one trust port: ``FILE.sqfs`` is the signed file, its record ``FILE.sqfs.json``
the statement's subject (where a bundle's statement binds its manifest). Plain I/O, no decision: the
blocks, the image's size and sha256, and the record's bytes, asked for only after the blocks met the
policy. :func:`lockbuild.trust.opener.decide` judges them."""

from __future__ import annotations

from pathlib import Path

from lockbuild.errors import IntegrityError, SignatureError
from lockbuild.fsio import read_regular
from lockbuild.image.record import MAX_RECORD, record_path
from lockbuild.limits import DEFAULT_LIMITS, Limits
from lockbuild.trust.policy import FileDigests
from lockbuild.trust.source import SizeCheck, digest_signed_file, signature_path


class ImageFile:
    """``FILE.sqfs`` with ``FILE.sqfs.minisig`` and ``FILE.sqfs.json`` beside it."""

    def __init__(self, image: Path) -> None:
        self.image = image
        self.record = record_path(image)
        self.label = str(image)
        self.file_name: str | None = image.name
        self.subject = f"the record {self.record.name}"

    def signature_blocks(self, limits: Limits = DEFAULT_LIMITS) -> bytes:
        where = signature_path(self.image)
        try:
            return read_regular(where, what="signature file", max_size=limits.max_signature_file, error=SignatureError)
        except FileNotFoundError:
            raise SignatureError(
                f"no signature file {where}; expected the image's .minisig beside it.",
                tip="Sign the image (`lockbuild sign FILE.sqfs`) or copy its .minisig with it.",
            ) from None

    def file_digests(self, check: SizeCheck, limits: Limits = DEFAULT_LIMITS) -> FileDigests:
        return digest_signed_file(self.image, limits, check, prehash=False, what="image")

    def manifest_bytes(self, limits: Limits = DEFAULT_LIMITS, signed_sha256: str | None = None) -> bytes:
        try:
            return read_regular(self.record, what="image record", max_size=MAX_RECORD, error=IntegrityError)
        except FileNotFoundError:
            raise IntegrityError(
                f"no record {self.record} beside the image; expected the FILE.sqfs.json `lockbuild image` wrote.",
                tip="Copy the record with the image.",
            ) from None
