"""The signed statement: what a signer asserts about one bundle, carried in the signature's trusted comment.

``lockbuild file=NAME.lbz engine=E version=V variant=X sha256=HEX size=N manifest-sha256=HEX serial=S
[expires=T] [frames-sha256=HEX]``, values percent-encoded so it stays one line; the global signature covers
it, so a verified block proves the manifest digest (and the frame tables') without the file. Pure."""

from __future__ import annotations

import datetime as dt
import hashlib
import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass

from lockbuild.bundle.manifest import Manifest
from lockbuild.digest import is_sha256
from lockbuild.errors import SignatureError
from lockbuild.text import show
from lockbuild.times import iso, parse_time
from lockbuild.trust.scheme import SCHEME

TAG = "lockbuild"
_FIELD_KEY_RE = re.compile(r"[A-Za-z0-9_.-]+")
_FIELD_VALUE_RE = re.compile(r"(?:[A-Za-z0-9_.~-]|%[0-9A-F]{2})*")
_TIP = "The trusted comment was not written by this lockbuild; re-sign the bundle with `lockbuild sign`."
REQUIRED = ("file", "engine", "version", "variant", "sha256", "size", "manifest-sha256", "serial")
OPTIONAL = ("expires", "bundle-sha256", "queried", "frames-sha256")  # the last two: a vulnerability report's statement


def format_trusted_comment(fields: Mapping[str, str]) -> str:
    """``lockbuild k=v k=v ...`` in the given order, values percent-encoded."""
    parts = [TAG]
    for key, value in fields.items():
        if not _FIELD_KEY_RE.fullmatch(key):
            raise ValueError(f"trusted comment field names must match [A-Za-z0-9_.-]+, found {key!r}")
        parts.append(f"{key}={urllib.parse.quote(value, safe='')}")
    text = " ".join(parts)
    SCHEME.check_statement(text)
    return text


def parse_trusted_comment(text: str) -> dict[str, str]:
    """Inverse of :func:`format_trusted_comment`; strict about shape, encoding and duplicates."""
    tokens = text.split(" ")
    if tokens[0] != TAG:
        raise SignatureError(f"expected a trusted comment starting with {TAG!r}, found {show(text)}", tip=_TIP)
    fields: dict[str, str] = {}
    for token in tokens[1:]:
        key, sep, value = token.partition("=")
        if not sep or not _FIELD_KEY_RE.fullmatch(key) or not _FIELD_VALUE_RE.fullmatch(value):
            raise SignatureError(
                f"malformed trusted comment field: expected key=percent-encoded-value, found {show(token)}",
                tip=_TIP,
            )
        if key in fields:
            raise SignatureError(f"duplicated trusted comment field {key!r}", tip=_TIP)
        try:
            decoded = urllib.parse.unquote(value, errors="strict")
        except UnicodeDecodeError:
            raise SignatureError(
                f"trusted comment field {key!r}: value {show(value)} is not percent-encoded UTF-8", tip=_TIP
            ) from None
        if urllib.parse.quote(decoded, safe="") != value:
            raise SignatureError(
                f"trusted comment field {key!r}: value {show(value)} is not canonically percent-encoded", tip=_TIP
            )
        fields[key] = decoded
    return fields


def manifest_sha256(manifest: Manifest) -> str:
    """The sha256 of the bytes the builder writes as ``bundle.toml`` (``to_toml()``). A reader compares
    a signed digest with the bytes a bundle actually carries, never with this re-serialisation."""
    return hashlib.sha256(manifest.to_toml()).hexdigest()


def _count(text: str, what: str, digits: int) -> int:
    if not (text.isascii() and text.isdigit() and len(text) <= digits):
        raise SignatureError(
            f"the signed {what} {show(text[:40])} is not a number of {'seconds' if what == 'serial' else 'bytes'}."
        )
    return int(text)


@dataclass(frozen=True)
class Statement:
    """The signed facts about one bundle file."""

    file: str
    engine: str
    version: str
    variant: str
    sha256: str
    size: int
    manifest_sha256: str
    serial: int
    expires: dt.datetime | None = None
    bundle_sha256: str | None = None  # a vulnerability report's: the bundle it is about
    queried: dt.datetime | None = None  # a vulnerability report's: when the service was asked
    frames_sha256: str | None = None  # a framed bundle's: the sha256 of its frame tables

    def __post_init__(self) -> None:
        if self.frames_sha256 is not None and not is_sha256(self.frames_sha256):
            raise ValueError("a statement's frames_sha256 is 64 lowercase hex digits")
        if self.bundle_sha256 is not None and not is_sha256(self.bundle_sha256):
            raise ValueError("a statement's bundle_sha256 is 64 lowercase hex digits")
        if not (is_sha256(self.sha256) and is_sha256(self.manifest_sha256)):
            raise ValueError("a statement's sha256 and manifest_sha256 are 64 lowercase hex digits")
        if self.size < 0 or self.serial < 0:
            raise ValueError("a statement's size and serial are not negative")

    @classmethod
    def of(
        cls,
        manifest: Manifest,
        *,
        name: str,
        sha256: str,
        size: int,
        expires: dt.datetime | None,
        manifest_bytes: bytes | None = None,
        frames_sha256: str | None = None,
    ) -> Statement:
        """The statement for a bundle with ``manifest``; ``manifest_bytes``: the bytes the bundle carries
        (a co-signer signs those), else the builder's own serialisation."""
        digest = manifest_sha256(manifest) if manifest_bytes is None else hashlib.sha256(manifest_bytes).hexdigest()
        return cls(
            name,
            manifest.engine,
            manifest.version,
            manifest.variant,
            sha256,
            size,
            digest,
            manifest.serial,
            expires,
            frames_sha256=frames_sha256,
        )

    @property
    def subject(self) -> tuple[object, ...]:
        """What the statement says about the bundle (everything but how long it is valid)."""
        return (
            self.file,
            self.engine,
            self.version,
            self.variant,
            self.sha256,
            self.size,
            self.manifest_sha256,
            self.serial,
            self.bundle_sha256,
            self.queried,
            self.frames_sha256,
        )

    @property
    def as_of(self) -> dt.datetime:
        return dt.datetime.fromtimestamp(self.serial, dt.UTC)

    def to_comment(self) -> str:
        fields = {
            "file": self.file,
            "engine": self.engine,
            "version": self.version,
            "variant": self.variant,
            "sha256": self.sha256,
            "size": str(self.size),
            "manifest-sha256": self.manifest_sha256,
            "serial": str(self.serial),
        }
        if self.expires is not None:
            fields["expires"] = iso(self.expires)
        if self.bundle_sha256 is not None:
            fields["bundle-sha256"] = self.bundle_sha256
        if self.queried is not None:
            fields["queried"] = iso(self.queried)
        if self.frames_sha256 is not None:
            fields["frames-sha256"] = self.frames_sha256
        return format_trusted_comment(fields)

    @classmethod
    def from_comment(cls, text: str) -> Statement:
        """Parse a trusted comment; SignatureError says why it is not a lockbuild statement."""
        f = parse_trusted_comment(text)
        unknown = sorted(set(f) - set(REQUIRED) - set(OPTIONAL))
        if unknown:
            raise SignatureError(
                f"the trusted comment carries fields this lockbuild does not know: {', '.join(unknown)}.",
                tip="Upgrade lockbuild on this machine to read statements made by a newer one.",
            )
        missing = [k for k in REQUIRED if k not in f]
        if missing:
            older = "size" in missing or "manifest-sha256" in missing
            raise SignatureError(
                f"the trusted comment lacks {', '.join(missing)}"
                + (": it was made by an older lockbuild, which did not sign the manifest." if older else "."),
                tip="Re-sign the bundle with `lockbuild sign` (or rebuild it) with this lockbuild.",
            )
        for key in ("sha256", "manifest-sha256", "frames-sha256"):
            if key in f and not is_sha256(f[key]):
                raise SignatureError(f"the signed {key} {show(f[key][:80])} is not a sha256 (64 lowercase hex digits).")
        serial = _count(f["serial"], "serial", 12)
        try:
            dt.datetime.fromtimestamp(serial, dt.UTC)
        except (OverflowError, OSError, ValueError):
            raise SignatureError(f"the signed serial {f['serial']!r} is not a time.") from None
        size = _count(f["size"], "size", 16)
        expires = _time(f, "expires", "expiry")
        queried = _time(f, "queried", "query time")
        bundle = f.get("bundle-sha256")
        if bundle is not None and not is_sha256(bundle):
            raise SignatureError(f"the signed bundle-sha256 {show(bundle[:80])} is not a sha256.")
        return cls(
            f["file"],
            f["engine"],
            f["version"],
            f["variant"],
            f["sha256"],
            size,
            f["manifest-sha256"],
            serial,
            expires,
            bundle,
            queried,
            f.get("frames-sha256"),
        )


def _time(f: Mapping[str, str], key: str, what: str) -> dt.datetime | None:
    if key not in f:
        return None
    t = parse_time(f[key])
    if t is None or t.tzinfo is None:
        raise SignatureError(f"the signed {what} {show(f[key][:40])} is not a time with a zone.")
    return t
