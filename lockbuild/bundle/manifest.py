"""bundle.toml: the first member of every bundle, listing every other member with its size and sha256.

This module is the manifest as the builder writes it and the node holds it (:class:`Manifest`, its
members, its TOML); the strict reading of one is :func:`lockbuild.bundle.manifestparse.parse_manifest`.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass

from lockbuild.bundle.instructions import InstallTable
from lockbuild.bundle.modelinfo import MODEL_KIND, ModelTable
from lockbuild.errors import IntegrityError
from lockbuild.provenance import Provenance
from lockbuild.times import iso

FORMAT = 2  # what a manifest says unless its [install] table needs more (InstallTable.needs_format)
NEWEST = 3  # format 3: install.gpu.max-capability, variant-properties and install.serves
MANIFEST = "bundle.toml"
KINDS = (
    "recipe",
    "lock",
    "sbom",
    "tool",
    "wheel",
    "sdist",
    "source",
    "asset",
    "interpreter",
    "build-dep",
    "bootstrap",
    "extra-file",
    MODEL_KIND,
)
_ORDER = {
    "recipe.toml": 0,
    "lock": 1,
    "sbom.cdx.json": 2,
    "tools": 3,
    "python": 4,
    "wheels": 5,
    "sdists": 6,
    "source": 7,
    "assets": 8,
    "build-deps": 9,
    "extra-files": 10,
}
LOCK_FORMATS = ("requirements.txt", "pylock.toml")


@dataclass(frozen=True)
class Member:
    path: str
    size: int
    sha256: str
    kind: str
    origin: str = ""


@dataclass(frozen=True)
class Manifest:
    engine: str
    version: str
    variant: str
    python: str
    platform: str
    as_of: dt.datetime
    serial: int
    recipe_sha256: str
    lockbuild_version: str
    uv_version: str
    lock_format: str
    members: tuple[Member, ...]
    install: InstallTable
    format: int = FORMAT
    zstd_version: str = ""  # libzstd that compressed it: a rebuild must use the same to match bit for bit
    # The recipe's per-package cut-offs (uv's --exclude-newer-package): (canonical name, UTC time or None = none)
    exclude_newer_package: tuple[tuple[str, str | None], ...] = ()
    # PEP 740: a wheel's or sdist's provenance as its index stated it, unverified, by member path.
    # Optional: written in the member's [[files]] table, which readers before it pass over.
    provenance: tuple[tuple[str, Provenance], ...] = ()
    # PEP 700: a wheel's or sdist's upload time as its index gave it at lock time (UTC, to the second), by
    # member path. Optional, in the member's [[files]] table as upload-time, which readers before it pass over.
    upload_times: tuple[tuple[str, str], ...] = ()
    model: ModelTable | None = None  # a model bundle's repo, commit and files (format 4; no [install] table)

    @property
    def bundle_name(self) -> str:
        return bundle_name(self.engine, self.version, self.variant, self.platform)

    @property
    def unpacked_size(self) -> int:
        return sum(m.size for m in self.members)

    def member(self, path: str) -> Member:
        for m in self.members:
            if m.path == path:
                return m
        raise IntegrityError(f"the bundle has no member {path}; expected it in the manifest.")

    def to_toml(self) -> bytes:
        q = toml_string
        lines = [
            f"format = {max(self.format, self.install.needs_format) if self.format >= FORMAT else self.format}",
            f"engine = {q(self.engine)}",
            f"version = {q(self.version)}",
            f"variant = {q(self.variant)}",
            f"as-of = {q(iso(self.as_of))}",
            f"serial = {self.serial}",
            f"recipe-sha256 = {q(self.recipe_sha256)}",
            f"lock-format = {q(self.lock_format)}",
            *([f"exclude-newer-package = {{ {exempt} }}"] if (exempt := self._exempt_toml()) else []),
            "",
            "[target]",
            f"python = {q(self.python)}",
            f"platform = {q(self.platform)}",
            "",
            "[builder]",
            f"lockbuild = {q(self.lockbuild_version)}",
            f"uv = {q(self.uv_version)}",
            *([f"zstd = {q(self.zstd_version)}"] if self.zstd_version else []),
            "",
            *(self.install.toml_lines(q) if self.model is None else self.model.toml_lines(q)),
        ]
        attested, uploaded = dict(self.provenance), dict(self.upload_times)
        for m in self.members:
            lines += [
                "[[files]]",
                f"path = {q(m.path)}",
                f"size = {m.size}",
                f"sha256 = {q(m.sha256)}",
                f"kind = {q(m.kind)}",
                f"origin = {q(m.origin)}",
                *([f"provenance = {_provenance_toml(attested[m.path])}"] if m.path in attested else []),
                *([f"upload-time = {q(uploaded[m.path])}"] if m.path in uploaded else []),
                *(self.model.file_lines(m.path, q) if self.model is not None else []),
                "",
            ]
        return "\n".join(lines).encode()

    def _exempt_toml(self) -> str:
        return ", ".join(
            f"{name} = {'false' if when is None else toml_string(when)}" for name, when in self.exclude_newer_package
        )


def _provenance_toml(p: Provenance) -> str:
    pubs = ", ".join(
        "{ " + ", ".join(f"{k} = {toml_string(v)}" for k, v in pub.to_json().items()) + " }" for pub in p.publishers
    )
    return f"{{ attestations = {p.attestations}, publishers = [{pubs}], verified = false }}"


def toml_string(text: str) -> str:
    """A TOML basic string. JSON's escaping, which TOML shares, except for characters beyond the BMP:
    JSON writes them as surrogate pairs, which TOML refuses, so they get TOML's \\UXXXXXXXX."""
    if all(ord(c) <= 0xFFFF for c in text):
        quoted = json.dumps(text)
    else:
        quoted = '"' + "".join(f"\\U{ord(c):08x}" if ord(c) > 0xFFFF else json.dumps(c)[1:-1] for c in text) + '"'
    if any(0xD800 <= ord(c) <= 0xDFFF for c in text):
        raise IntegrityError(f"internal: {quoted[:80]} holds a lone surrogate, which TOML cannot carry.")
    return quoted


def bundle_name(engine: str, version: str, variant: str, platform: str) -> str:
    return f"{engine}-{version}-{variant}-{platform}.lbz"


def member_order(path: str) -> tuple[int, str]:
    """The fixed order of members: metadata first, then tools, wheels, sdists, source, assets."""
    return (_ORDER.get(path.split("/", 1)[0], 99), path)
