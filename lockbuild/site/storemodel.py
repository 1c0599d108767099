"""The site store's names and records: what a store calls a build, a blob and damage (pure, no I/O but
listing a directory by descriptor)."""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass

from lockbuild.bundle.manifest import Manifest
from lockbuild.digest import SHA256_HEX
from lockbuild.errors import LockbuildError
from lockbuild.minisign import parse_signatures

_HEX = re.compile(SHA256_HEX)
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}")


class StoreError(LockbuildError):
    """The store directory is not usable as a store (not one, or holds a link or a stray file)."""


def check_name(value: str, what: str) -> str:
    """Engine, version and variant name directories: plain words, no '/', never '.' or '..'."""
    if not _NAME.fullmatch(value) or value in (".", ".."):
        raise StoreError(f"the {what} {value[:80]!r} is not a plain name (letters, digits, . _ + -).")
    return value


def check_hex(value: str) -> str:
    if not _HEX.fullmatch(value):
        raise StoreError(f"{value[:80]!r} is not a sha256 (64 lower-case hex digits).")
    return value


def parse_ref(ref: str) -> tuple[str, str, str]:
    """ENGINE/VERSION-VARIANT, as `store list` shows it. The variant is the text after the last '-'."""
    engine, sep, build = ref.partition("/")
    version, dash, variant = build.rpartition("-")
    if not sep or not dash:
        raise StoreError(f"{ref[:120]!r} is not ENGINE/VERSION-VARIANT (for example vllm/0.11.0-cu128).",
                         tip="`lockbuild store list --store DIR` shows the builds a store holds.")  # fmt: skip
    return check_name(engine, "engine"), check_name(version, "version"), check_name(variant, "variant")


def merge_signatures(old: bytes, new: bytes) -> bytes:
    """The blocks of ``old`` followed by those of ``new`` it lacks: a co-signature is added, and a
    later import with fewer signatures never removes one. (Each node judges them all with its keys.)"""
    seen = [b.to_text() for b in parse_signatures(old, source="the stored signatures")]
    for b in parse_signatures(new, source="the new signatures"):
        if b.to_text() not in seen:
            seen.append(b.to_text())
    return "".join(seen).encode()


@dataclass(frozen=True)
class Build:
    """One engine/version-variant in the store: its signed manifest and signature blocks."""

    manifest: Manifest
    manifest_bytes: bytes
    signatures: bytes

    @property
    def ref(self) -> str:
        m = self.manifest
        return f"{m.engine}/{m.version}-{m.variant}"


@dataclass(frozen=True)
class Damage:
    path: str  # relative to the store
    problem: str


def _names(dir_fd: int) -> list[str]:
    """The entries of a directory opened by descriptor (pathlib cannot list by descriptor)."""
    return sorted(os.listdir(dir_fd))


def _fsync_dir(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.fsync(fd)


