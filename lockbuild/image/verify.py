"""Verifying an image: its signatures by the one policy evaluation (``lockbuild.trust.policy``), its
digest, its record, and the marker inside it.

An image's signature is a lockbuild statement like a bundle's (``lockbuild.trust.statement``): the
file is ``FILE.sqfs``, its sha256 and size are the image's, ``manifest-sha256`` is the sha256 of the
record ``FILE.sqfs.json`` (the image's manifest), and engine, version, variant and serial are those of
the marker at the image's root. So one signature covers the image and its record, and stock
``minisign -Vm FILE.sqfs`` checks the image's bytes. Order: the signature blocks are parsed, the size
is checked against the signed sizes before a byte is hashed, the image is hashed once, the policy is
evaluated, then the record and, only once the image is the signed one, its marker (unsquashfs).
"""

from __future__ import annotations

import datetime as dt
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lockbuild.errors import IntegrityError
from lockbuild.image.record import Record, image_marker, read_record
from lockbuild.install.marker import Installed
from lockbuild.trust import check_complete, check_dates, digest_bundle, evaluate, read_signatures, signature_path
from lockbuild.trust.policy import FileDigests
from lockbuild.trust.statement import Statement
from lockbuild.trust.store import TrustStore

_REBUILD = "Do not mount this image: build it again with `lockbuild image`, or copy the image and its record again."


@dataclass(frozen=True)
class ImageVerified:
    image: Path
    record: Record
    marker: Installed
    signers: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        m = self.marker
        return {"image": str(self.image), "build": f"{m.engine}/{m.version}-{m.variant}", "signers": list(self.signers),
                "bundle_sha256": self.record.bundle_sha256, "image_sha256": self.record.image_sha256,
                "prefix": self.record.prefix, "interpreter": self.record.interpreter}


def checked_contents(image: Path, digests: FileDigests, read: tuple[Record, bytes] | None = None,
                     ) -> tuple[Record, bytes, Installed]:
    """The record beside ``image`` (``read``: as already read) and the marker inside it, where the record
    describes this very image and the marker names the bundle the record names (what `sign` checks
    before it signs, `verify` after the signatures)."""
    record, raw = read or read_record(image)
    if (record.image_sha256, record.image_size) != (digests.sha256, digests.size):
        raise IntegrityError(
            f"{image.name} has sha256 {digests.sha256} ({digests.size:,} bytes); its record says "
            f"{record.image_sha256} ({record.image_size:,} bytes).", tip=_REBUILD)
    marker = image_marker(image)
    if marker.bundle_sha256 != record.bundle_sha256:
        raise IntegrityError(
            f"the marker inside {image.name} names the bundle sha256 {marker.bundle_sha256}; its record says "
            f"{record.bundle_sha256}.", tip=_REBUILD)
    return record, raw, marker


def statement_of(image: Path, digests: FileDigests, raw_record: bytes, marker: Installed,
                 expires: dt.datetime | None) -> Statement:
    return Statement(image.name, marker.engine, marker.version, marker.variant, digests.sha256, digests.size,
                     hashlib.sha256(raw_record).hexdigest(), marker.serial, expires)


def verify_image(image: Path, store: TrustStore, *, threshold: int | None = None,
                 now: dt.datetime | None = None) -> ImageVerified:
    blocks = read_signatures(signature_path(image))
    digests = digest_bundle(image, check=lambda size: check_complete(blocks, store, name=image.name, size=size),
                            prehash=False)
    evaluation = evaluate(blocks, store, name=image.name, now=now or dt.datetime.now(dt.UTC), file=digests,
                          threshold=threshold)
    statement = evaluation.require()
    check_dates(statement, store.policy)
    record, raw = read_record(image)
    if hashlib.sha256(raw).hexdigest() != statement.manifest_sha256:
        raise IntegrityError(
            f"the record {image.name}.json has sha256 {hashlib.sha256(raw).hexdigest()}; the signatures sign "
            f"{statement.manifest_sha256}.", tip="The record is not the signed one: copy it again with the image.")
    record, raw, marker = checked_contents(image, digests, (record, raw))
    if statement_of(image, digests, raw, marker, statement.expires).subject != statement.subject:
        raise IntegrityError(
            f"the marker inside {image.name} is {marker.engine} {marker.version}-{marker.variant} (serial "
            f"{marker.serial}); the signatures sign {statement.engine} {statement.version}-{statement.variant} "
            f"(serial {statement.serial}).", tip=_REBUILD)
    return ImageVerified(image, record, marker, tuple(v.signer.key_id_hex for v in evaluation.counted if v.signer))
