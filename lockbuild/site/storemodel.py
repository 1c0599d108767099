"""The site store's names and records: what a store calls a build, a blob and damage (pure, no I/O but
listing a directory by descriptor)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from lockbuild.bundle.manifest import Manifest
from lockbuild.digest import SHA256_HEX
from lockbuild.documents import JSON
from lockbuild.errors import LockbuildError
from lockbuild.fsio import list_dir
from lockbuild.limits import DEFAULT_LIMITS, Limits
from lockbuild.trust.scheme import SCHEME, Block

HEX = re.compile(SHA256_HEX)
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}")


class StoreError(LockbuildError):
    """The store directory is not usable as a store (not one, or holds a link or a stray file)."""

    default_tip = "Check the --store directory: lockbuild store verify --store DIR says what is wrong in it."


def check_name(value: str, what: str) -> str:
    """Engine, version and variant name directories: plain words, no '/', never '.' or '..'."""
    if not _NAME.fullmatch(value) or value in (".", ".."):
        raise StoreError(f"the {what} {value[:80]!r} is not a plain name (letters, digits, . _ + -).")
    return value


def check_hex(value: str) -> str:
    if not HEX.fullmatch(value):
        raise StoreError(f"{value[:80]!r} is not a sha256 (64 lower-case hex digits).")
    return value


def parse_build_ref(ref: str) -> tuple[str, str, str]:
    """ENGINE/VERSION-VARIANT, as `store list` shows it. The variant is the text after the last '-'."""
    engine, sep, build = ref.partition("/")
    version, dash, variant = build.rpartition("-")
    if not sep or not dash:
        raise StoreError(
            f"{ref[:120]!r} is not ENGINE/VERSION-VARIANT (for example vllm/0.11.0-cu128).",
            tip="`lockbuild store list --store DIR` shows the builds a store holds.",
        )
    return check_name(engine, "engine"), check_name(version, "version"), check_name(variant, "variant")


def merge_signatures(old: bytes, new: bytes, limits: Limits = DEFAULT_LIMITS) -> bytes:
    """A build's kept blocks after another accepted import or pull: ``new`` holds only blocks that
    counted under the importer's trust store (``TrustedBundle.counted_signatures``). One block per key:
    a key's newer block replaces its older one, a key seen only in ``old`` stays (a co-signature is
    never removed by a later import with fewer signatures). The result is bounded by the readers' own
    limits (the scheme's ``max_blocks``, ``limits.max_signature_file`` bytes), so no sequence of
    accepted imports can make the store's signatures unreadable. The blocks are the signature scheme's
    (``trust/scheme.py``): the store knows whom each names, not their format."""
    fresh = SCHEME.parse(new, source="the new signatures")
    keys = {b.key_id for b in fresh}
    kept = [b for b in SCHEME.parse(old, source="the stored signatures") if b.key_id not in keys]
    out: list[Block] = []
    for b in (*fresh, *kept):
        if len(out) == SCHEME.max_blocks or len(SCHEME.join([*out, b])) > limits.max_signature_file:
            break
        out.append(b)
    return SCHEME.join(out)


@dataclass(frozen=True)
class StoredBuild:
    """One engine/version-variant in the store: its signed manifest and signature blocks."""

    manifest: Manifest
    manifest_bytes: bytes
    signatures: bytes

    @property
    def ref(self) -> str:
        m = self.manifest
        return f"{m.engine}/{m.version}-{m.variant}"


def list_row(b: StoredBuild, present: int) -> dict[str, JSON]:
    """A build's row in ``store list --json``: an engine's fields, and for a model build (one per commit)
    also its ``repo`` and ``commit``."""
    m = b.manifest
    row: dict[str, JSON] = {
        "build": b.ref,
        "engine": m.engine,
        "version": m.version,
        "variant": m.variant,
        "platform": m.platform,
        "serial": m.serial,
        "members": len(m.members),
        "present": present,
        "complete": present == len(m.members),
        "size": m.unpacked_size,
    }
    if m.model is not None:
        row.update(kind="model", repo=m.model.repo, commit=m.model.commit)
    return row


def list_line(b: StoredBuild, present: int) -> str:
    """A build's line in ``store list``: an engine's platform, or a model's repo."""
    m = b.manifest
    where = m.platform if m.model is None else f"model {m.model.repo}"
    note = "" if present == len(m.members) else f"  INCOMPLETE ({present}/{len(m.members)} blobs)"
    return f"{b.ref:<40} {where:<28} {m.unpacked_size / 1e6:>10.1f} MB{note}"


@dataclass(frozen=True)
class Damage:
    path: str  # relative to the store
    problem: str


list_names = list_dir  # the store lists by descriptor (lockbuild.fsio)
