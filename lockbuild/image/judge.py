"""Verifying an image: the one trust decision (``lockbuild.trust.opener.decide``, through the image's
adapter ``lockbuild.image.imagefile.ImageFile``), then what only an image has: its record and its marker
(:func:`verify_image`)."""

from __future__ import annotations

import datetime as dt
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lockbuild.errors import IntegrityError
from lockbuild.image.imagefile import ImageFile
from lockbuild.image.record import ImageRecord, image_marker, parse_image_record, read_record, record_path
from lockbuild.install.marker import Installed
from lockbuild.trust.opener import decide
from lockbuild.trust.policy import FileDigests
from lockbuild.trust.statement import Statement
from lockbuild.trust.truststore import TrustStore

_REBUILD = "Do not mount this image: build it again with `lockbuild image`, or copy the image and its record again."


@dataclass(frozen=True)
class ImageVerified:
    image: Path
    record: ImageRecord
    marker: Installed
    signers: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        m = self.marker
        return {
            "image": str(self.image),
            "build": f"{m.engine}/{m.version}-{m.variant}",
            "signers": list(self.signers),
            "bundle_sha256": self.record.bundle_sha256,
            "image_sha256": self.record.image_sha256,
            "prefix": self.record.prefix,
            "interpreter": self.record.interpreter,
        }


def checked_contents(
    image: Path,
    digests: FileDigests,
    read: tuple[ImageRecord, bytes] | None = None,
) -> tuple[ImageRecord, bytes, Installed]:
    """The record beside ``image`` (``read``: as already read) and the marker inside it, where the record
    describes this very image and the marker names the bundle the record names (what `sign` checks
    before it signs, `verify` after the signatures)."""
    record, raw = read or read_record(image)
    if (record.image_sha256, record.image_size) != (digests.sha256, digests.size):
        raise IntegrityError(
            f"{image.name} has sha256 {digests.sha256} ({digests.size:,} bytes); its record says "
            f"{record.image_sha256} ({record.image_size:,} bytes).",
            tip=_REBUILD,
        )
    marker = image_marker(image)
    if marker.bundle_sha256 != record.bundle_sha256:
        raise IntegrityError(
            f"the marker inside {image.name} names the bundle sha256 {marker.bundle_sha256}; its record says "
            f"{record.bundle_sha256}.",
            tip=_REBUILD,
        )
    return record, raw, marker


def statement_of(
    image: Path, digests: FileDigests, raw_record: bytes, marker: Installed, expires: dt.datetime | None
) -> Statement:
    return Statement(
        image.name,
        marker.engine,
        marker.version,
        marker.variant,
        digests.whole,
        digests.size,
        hashlib.sha256(raw_record).hexdigest(),
        marker.serial,
        expires,
    )


def verify_image(
    image: Path, store: TrustStore, *, threshold: int | None = None, now: dt.datetime | None = None
) -> ImageVerified:
    """The image passed through the one trust decision, then its record and its marker checked.

    An image's statement names ``FILE.sqfs`` with the image's sha256 and size, ``manifest-sha256`` is the
    record's sha256, and engine, version, variant and serial are the marker's: one signature covers the
    image and its record, and stock ``minisign -Vm FILE.sqfs`` checks the image's bytes. After the decision
    (an image no trusted statement names is refused before a byte of it is read), the record must describe
    this image and, only once the image is the signed one, its marker (unsquashfs) must name the signed build."""
    decided = decide(ImageFile(image), store, threshold=threshold, now=now)
    statement, digests = decided.statement, decided.digests
    if digests is None:
        raise IntegrityError(f"internal: {image.name} was judged without its digests.")
    raw = decided.subject_bytes  # the record, exactly the bytes the counted signatures sign
    record, raw, marker = checked_contents(image, digests, (parse_image_record(raw, record_path(image)), raw))
    if statement_of(image, digests, raw, marker, statement.expires).subject != statement.subject:
        raise IntegrityError(
            f"the marker inside {image.name} is {marker.engine} {marker.version}-{marker.variant} (serial "
            f"{marker.serial}); the signatures sign {statement.engine} {statement.version}-{statement.variant} "
            f"(serial {statement.serial}).",
            tip=_REBUILD,
        )
    signers = tuple(v.signer.key_id_hex for v in decided.evaluation.counted if v.signer)
    return ImageVerified(image, record, marker, signers)
