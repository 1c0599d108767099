"""``FILE.sqfs.json``, the record beside an image, and what the image itself says (its marker).

The record's keys are exactly :data:`KEYS`; it holds no time and nothing of the machine beyond the
interpreter path, so the same bundle gives the same record. It is the image's manifest: a signature of
the image signs the record's sha256."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lockbuild.digest import is_sha256
from lockbuild.documents import loads_json
from lockbuild.errors import IntegrityError, LockbuildError
from lockbuild.fsio import open_regular, read_regular
from lockbuild.install.marker import MARKER, Installed
from lockbuild.limits import DEFAULT_LIMITS, Limits, MiB
from lockbuild.proc.child import run_bounded
from lockbuild.trust.scheme import signature_path

KEYS = (
    "image_sha256",
    "image_size",
    "bundle_sha256",
    "manifest_sha256",
    "signers",
    "prefix",
    "interpreter",
    "lockbuild",
)
SUFFIX = ".sqfs"
MAGIC = b"hsqs"  # a squashfs superblock, little-endian
MAX_RECORD = MiB
UNSQUASHFS_TIMEOUT = 120
TOOLS_TIP = (
    "Install squashfs-tools (Debian/Ubuntu: apt-get install squashfs-tools; Fedora: dnf install squashfs-tools)."
)


@dataclass(frozen=True)
class ImageRecord:
    image_sha256: str
    image_size: int
    bundle_sha256: str
    manifest_sha256: str
    signers: tuple[str, ...]
    prefix: str
    interpreter: str
    lockbuild: str

    def to_json(self) -> dict[str, Any]:
        return {
            "image_sha256": self.image_sha256,
            "image_size": self.image_size,
            "bundle_sha256": self.bundle_sha256,
            "manifest_sha256": self.manifest_sha256,
            "signers": list(self.signers),
            "prefix": self.prefix,
            "interpreter": self.interpreter,
            "lockbuild": self.lockbuild,
        }

    def to_bytes(self) -> bytes:
        return (json.dumps(self.to_json(), indent=2, sort_keys=True) + "\n").encode()


def record_path(image: Path) -> Path:
    return image.with_name(image.name + ".json")


def parse_image_record(raw: bytes, where: Path) -> ImageRecord:
    data = loads_json(raw, what=f"the image record {where}", max_bytes=MAX_RECORD, error=IntegrityError)
    if not isinstance(data, dict) or sorted(data) != sorted(KEYS):
        found = ", ".join(sorted(data)) if isinstance(data, dict) else type(data).__name__
        raise IntegrityError(
            f"the image record {where} has the keys {found}; expected exactly {', '.join(KEYS)}.",
            tip="Use the record `lockbuild image` wrote beside the image.",
        )
    strings = [data[k] for k in KEYS if k not in ("image_size", "signers")]
    ok = (
        all(isinstance(v, str) for v in strings)
        and type(data["image_size"]) is int
        and data["image_size"] >= 0
        and isinstance(data["signers"], list)
        and all(isinstance(s, str) for s in data["signers"])
        and all(is_sha256(data[k]) for k in ("image_sha256", "bundle_sha256", "manifest_sha256"))
    )
    if not ok:
        raise IntegrityError(
            f"the image record {where} is malformed: expected sha256 digests, a size, a list of signers and strings.",
            tip="Use the record `lockbuild image` wrote beside the image.",
        )
    return ImageRecord(
        data["image_sha256"],
        data["image_size"],
        data["bundle_sha256"],
        data["manifest_sha256"],
        tuple(data["signers"]),
        data["prefix"],
        data["interpreter"],
        data["lockbuild"],
    )


def read_record(image: Path) -> tuple[ImageRecord, bytes]:
    """The record beside ``image`` and its exact bytes (what a signature of the image signs)."""
    where = record_path(image)
    try:
        raw = read_regular(where, what="image record", max_size=MAX_RECORD, error=IntegrityError)
    except FileNotFoundError:
        raise IntegrityError(
            f"no record {where} beside the image; expected the FILE.sqfs.json `lockbuild image` wrote.",
            tip="Copy the record with the image.",
        ) from None
    return parse_image_record(raw, where), raw


def is_image(path: Path) -> bool:
    """A regular file that starts as a squashfs image does (its magic, not its name)."""
    try:
        f, size = open_regular(path, what="image", max_size=1 << 50, error=LockbuildError)
    except (OSError, LockbuildError):
        return False
    with f:
        return size >= len(MAGIC) and f.read(len(MAGIC)) == MAGIC


def image_marker(image: Path, limits: Limits = DEFAULT_LIMITS) -> Installed:
    """The marker (lockbuild.json) at the image's root, read with ``unsquashfs -cat``: at most
    ``limits.max_image_marker`` bytes are read from its pipe, and it is killed past them (the image is not
    yet verified where ``list --images`` reads it, and its marker may be a sparse file of any size)."""
    bound = limits.max_image_marker
    try:
        proc = run_bounded(["unsquashfs", "-cat", str(image), MARKER], limit=bound, timeout=UNSQUASHFS_TIMEOUT)
    except FileNotFoundError:
        raise LockbuildError("expected unsquashfs on PATH to read the image; found none.", tip=TOOLS_TIP) from None
    except OSError as exc:
        raise LockbuildError(f"cannot run unsquashfs: {exc.strerror or exc}.", tip=TOOLS_TIP) from None
    if proc.timed_out:
        raise IntegrityError(f"unsquashfs did not read {image} within {UNSQUASHFS_TIMEOUT} s; it was stopped.")
    if proc.over:
        raise IntegrityError(
            f"the {MARKER} at the root of {image} is over {bound} bytes (unsquashfs was stopped there); expected "
            "the small marker of the environment it was built from.",
            tip="Build the image again with `lockbuild image`.",
        )
    if proc.returncode != 0:
        raise IntegrityError(
            f"{image} holds no readable {MARKER} at its root (unsquashfs exit {proc.returncode}); expected the "
            "marker of the environment it was built from.",
            tip="Build the image again with `lockbuild image`.",
        )
    data = loads_json(proc.stdout, what=f"the marker in {image}", max_bytes=bound, error=IntegrityError)
    try:
        data["requirements"] = tuple(data["requirements"])
        data["signers"] = tuple(data["signers"])
        data["env"] = tuple(sorted((str(k), str(v)) for k, v in dict(data.get("env", {})).items()))
        return Installed(**data)
    except (KeyError, TypeError, ValueError):
        raise IntegrityError(
            f"the marker in {image} is not a lockbuild marker.", tip="Build the image again with `lockbuild image`."
        ) from None


@dataclass(frozen=True)
class Listed:
    image: Path
    record: ImageRecord | None
    marker: Installed | None
    signature_file: bool  # a FILE.sqfs.minisig lies beside it: present, never read or verified here
    problem: str = ""

    @property
    def signature(self) -> str:
        """What the listing knows of its signature: only whether a file of that name is there."""
        return "signature file present (not verified)" if self.signature_file else "no signature file"

    def to_json(self) -> dict[str, Any]:
        m = self.marker
        return {
            "image": str(self.image),
            "engine": m.engine if m else None,
            "version": m.version if m else None,
            "variant": m.variant if m else None,
            "signature_file": "present (not verified)" if self.signature_file else "absent",
            "problem": self.problem,
            "record": self.record.to_json() if self.record else None,
        }


def list_images(folder: Path) -> list[Listed]:
    """Every ``*.sqfs`` in ``folder`` with its record and what it holds (read, not verified)."""
    if not folder.is_dir():
        raise LockbuildError(
            f"no folder {folder}; expected a folder of images (FILE.sqfs with FILE.sqfs.json).",
            tip="Pass --images DIR, the folder `lockbuild image --out` wrote into.",
        )
    out: list[Listed] = []
    for image in sorted(p for p in folder.iterdir() if p.name.endswith(SUFFIX) and not p.name.startswith(".")):
        if not is_image(image):
            out.append(Listed(image, None, None, False, "not a squashfs image"))
            continue
        beside = signature_path(image).is_file()
        try:
            record, _ = read_record(image)
            out.append(Listed(image, record, image_marker(image), beside))
        except LockbuildError as exc:
            out.append(Listed(image, None, None, beside, exc.message))
    return out
