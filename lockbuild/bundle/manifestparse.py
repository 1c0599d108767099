"""Reading bundle.toml strictly: every field typed, every path plain, no duplicates or collisions.

What it gives is a :class:`lockbuild.bundle.manifest.Manifest`; what a manifest may say (its kinds, its
formats, its lock formats) is written beside that model.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import urlsplit

from lockbuild import __version__
from lockbuild.bundle.installparse import check_text
from lockbuild.bundle.instructions import FORMAT_5
from lockbuild.bundle.manifest import KINDS, LOCK_FORMATS, MANIFEST, NEWEST, Manifest, Member
from lockbuild.bundle.modelinfo import MODEL_FORMAT, NO_LOCK, instructions
from lockbuild.bundle.paths import check_member_path, collision_key
from lockbuild.digest import is_sha256
from lockbuild.documents import TomlRefusal, loads_toml
from lockbuild.errors import IntegrityError
from lockbuild.limits import DEFAULT_LIMITS, Limits
from lockbuild.provenance import Provenance, parse_recorded
from lockbuild.times import iso, parse_time

READS = (2, 3, MODEL_FORMAT, FORMAT_5)  # format 4: a model bundle (bundle/modelinfo.py); 5: this wave's
# The lockbuild releases that read each older manifest format, for the refusal message.
READ_BY = {1: "lockbuild 0.1.x"}
_PLAIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}")
_VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+-]{0,63}")

_TOP_KEYS = (
    "format",
    "engine",
    "version",
    "variant",
    "as-of",
    "serial",
    "recipe-sha256",
    "lock-format",
    "target",
    "builder",
    "install",
    "files",
    "exclude-newer-package",
    "model",
)
_CANONICAL_NAME = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")  # a PEP 503 normalised project name
MAX_EXEMPT = 256
_TIP = "The bundle is malformed; do not install it. Fetch it again from its publisher, or rebuild it."


def _bad(message: str) -> IntegrityError:
    return IntegrityError(message, tip=_TIP)


def _require(data: dict[str, Any], key: str, kind: type, where: str) -> Any:
    value = data.get(key)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise _bad(f"the manifest's {where}{key} is missing or not {kind.__name__}; the bundle is malformed.")
    return value


def _name(data: dict[str, Any], key: str, where: str) -> str:
    """engine, version, variant, python and platform name directories and files on a node: plain words."""
    value: str = _require(data, key, str, where)
    if not _PLAIN.fullmatch(value):
        raise _bad(f"the manifest's {where}{key} {value[:80]!r} is not a plain name; the bundle is malformed.")
    return value


def _time(text: str, key: str) -> dt.datetime:
    when = parse_time(text)
    if when is None or when.tzinfo is None:
        raise _bad(f"the manifest's {key} {text[:40]!r} is not a time with a zone.")
    return when.astimezone(dt.UTC)


def _member(f: object, i: int, limits: Limits) -> Member:
    if not isinstance(f, dict):
        raise _bad(f"the manifest's files[{i}] is not a table.")
    path = check_member_path(_require(f, "path", str, f"files[{i}]."), limits)
    size = _require(f, "size", int, f"files[{i}].")
    sha = _require(f, "sha256", str, f"files[{i}].")
    kind = _require(f, "kind", str, f"files[{i}].")
    origin = f.get("origin", "")
    if not 0 <= size <= limits.max_member:
        raise _bad(f"the manifest gives {path} a size of {size}; expected 0..{limits.max_member}.")
    if not is_sha256(sha):
        raise _bad(f"the manifest's sha256 for {path} is malformed.")
    if kind not in KINDS:
        raise _bad(f"the manifest gives {path} the unknown kind {kind[:40]!r}; expected one of {', '.join(KINDS)}.")
    if not isinstance(origin, str):
        raise _bad(f"the manifest's origin for {path} is not a string.")
    return Member(path, size, sha, kind, _origin(origin, path))


MAX_ORIGIN = 4096


def _origin(value: str, path: str) -> str:
    """Where a member came from: empty, or an http(s) URL of bounded length with no userinfo (a
    credential is never recorded, so a manifest carrying one was not made by lockbuild) and no control
    or format character."""
    check_text(value, f"origin for {path}")
    if not value:
        return value
    try:
        parts = urlsplit(value)
    except ValueError:
        parts = None
    if len(value) > MAX_ORIGIN or parts is None or parts.scheme not in ("https", "http") or not parts.hostname:
        raise _bad(
            f"the manifest's origin for {path} {value[:60]!r} is not an http(s) URL of at most "
            f"{MAX_ORIGIN} characters; the bundle is malformed."
        )
    if "@" in parts.netloc:
        raise _bad(
            f"the manifest's origin for {path} carries userinfo (user:password@); lockbuild never "
            "records credentials, so the bundle is malformed."
        )
    return value


def _version(data: dict[str, Any], key: str, where: str) -> str:
    """Builder versions: plain version strings (they are shown to operators and compared)."""
    value: str = _require(data, key, str, where)
    if not _VERSION.fullmatch(value):
        raise _bad(f"the manifest's {where}{key} {value[:60]!r} is not a plain version string.")
    return value


def _check_format(data: dict[str, Any]) -> int:
    fmt: int = _require(data, "format", int, "")
    if fmt in READS:
        return fmt
    builder = data.get("builder")
    made_by = builder.get("lockbuild") if isinstance(builder, dict) else None
    if not (isinstance(made_by, str) and _VERSION.fullmatch(made_by)):
        made_by = ""
    by = f" by lockbuild {made_by}" if made_by else ""
    if fmt in READ_BY:
        raise IntegrityError(
            f"the bundle's manifest is format {fmt} (made{by or ' by an older lockbuild'}); this lockbuild "
            f"({__version__}) reads formats {', '.join(map(str, READS))} only, and {READ_BY[fmt]} reads format {fmt}.",
            tip=f"Rebuild the bundle with lockbuild {__version__} or later, or install it with {READ_BY[fmt]}.",
        )
    if isinstance(fmt, int) and fmt > max(READS):
        raise IntegrityError(
            f"the bundle's manifest is format {fmt} (made{by or ' by a newer lockbuild'}); this lockbuild "
            f"({__version__}) reads formats {', '.join(map(str, READS))}.",
            tip=f"Upgrade lockbuild on this node{' to ' + made_by if by else ''} to install it.",
        )
    raise _bad(f"the bundle's manifest format is {fmt}; no lockbuild writes that format.")


def parse_manifest(raw: bytes, limits: Limits = DEFAULT_LIMITS) -> Manifest:
    """Read bundle.toml strictly: every field typed, every path plain, no duplicates or collisions."""

    def refuse(why: TomlRefusal) -> IntegrityError:
        if why.kind == "size":
            return _bad(f"the manifest is {why.size} bytes; expected at most {limits.max_manifest}.")
        return _bad(f"the manifest is not valid TOML: {why.detail}; the bundle is malformed.")

    data = loads_toml(raw, max_bytes=limits.max_manifest, refuse=refuse)
    fmt = _check_format(data)
    unknown = sorted(set(data) - set(_TOP_KEYS))
    if unknown:
        raise _bad(f"the manifest has the unknown key(s) {', '.join(unknown)[:80]}; the bundle is malformed.")
    target = _require(data, "target", dict, "")
    builder = _require(data, "builder", dict, "")
    files = _require(data, "files", list, "")
    if len(files) > limits.max_members:
        raise _bad(f"the manifest lists {len(files)} members; expected at most {limits.max_members}.")
    members = tuple(_member(f, i, limits) for i, f in enumerate(files))
    provenance = _provenance(files, members)
    _check_collisions(members)
    total = sum(m.size for m in members)
    if total > limits.max_bundle:
        raise _bad(f"the bundle unpacks to {total} bytes; expected at most {limits.max_bundle}.")
    serial = _require(data, "serial", int, "")
    recipe_sha256 = _require(data, "recipe-sha256", str, "")
    if serial < 0 or not is_sha256(recipe_sha256):
        raise _bad("the manifest's serial is negative or its recipe-sha256 is malformed.")
    lock_format = _require(data, "lock-format", str, "")
    is_model = fmt == MODEL_FORMAT or (fmt == FORMAT_5 and "model" in data)
    if lock_format not in (LOCK_FORMATS if not is_model else (NO_LOCK,)):
        raise _bad(f"the manifest's lock-format {lock_format[:40]!r} is not one of {', '.join(LOCK_FORMATS)}.")
    zstd = builder.get("zstd", "")
    if not isinstance(zstd, str) or (zstd and not _VERSION.fullmatch(zstd)):
        raise _bad("the manifest's builder.zstd is not a plain version string.")
    model, install = instructions(data, fmt, files, members)  # a model bundle's table, or the [install] table
    if fmt != FORMAT_5 and install.needs_format == FORMAT_5:
        raise _bad(
            f"the manifest is format {fmt}, but its [install] table carries what format 5 adds "
            "(install.gpu.measured, install.extra-files); the bundle is malformed."
        )
    if fmt != FORMAT_5 and install.needs_format != fmt and max(fmt, install.needs_format) == NEWEST:
        raise _bad(
            f"the manifest is format {fmt}, but its [install] table "
            f"{'carries' if fmt < NEWEST else 'lacks'} what format {NEWEST} adds (install.gpu.max-capability, "
            "install.serves); the bundle is malformed."
        )
    exempt = _exclude_newer_package(data.get("exclude-newer-package", {}))
    return Manifest(
        engine=_name(data, "engine", ""),
        version=_name(data, "version", ""),
        variant=_name(data, "variant", ""),
        python=_name(target, "python", "target."),
        platform=_name(target, "platform", "target."),
        as_of=_time(_require(data, "as-of", str, ""), "as-of"),
        serial=serial,
        recipe_sha256=recipe_sha256,
        lockbuild_version=_version(builder, "lockbuild", "builder."),
        uv_version=_version(builder, "uv", "builder."),
        lock_format=lock_format,
        members=members,
        install=install,
        format=fmt,
        zstd_version=zstd,
        exclude_newer_package=exempt,
        provenance=provenance,
        upload_times=_upload_times(files, members),
        model=model,
    )


def _upload_times(files: list[Any], members: tuple[Member, ...]) -> tuple[tuple[str, str], ...]:
    """The optional per-file upload time, on wheels and sdists only, as the builder writes it (iso: UTC, Z)."""
    out: list[tuple[str, str]] = []
    for f, m in zip(files, members, strict=True):
        if "upload-time" not in f:
            continue
        when = f["upload-time"]
        if m.kind not in ("wheel", "sdist"):
            raise _bad(f"the manifest gives {m.path} (kind {m.kind}) an upload-time; only wheels and sdists have one.")
        parsed = parse_time(when) if isinstance(when, str) else None
        if parsed is None or parsed.tzinfo is None or iso(parsed) != when:
            raise _bad(f"the manifest's upload-time of {m.path} is not a UTC time such as 2024-06-01T00:00:00Z.")
        out.append((m.path, when))
    return tuple(out)


def _provenance(files: list[Any], members: tuple[Member, ...]) -> tuple[tuple[str, Provenance], ...]:
    """The optional per-file provenance (bounded by lockbuild/provenance.py), on wheels and sdists only."""
    out: list[tuple[str, Provenance]] = []
    for f, m in zip(files, members, strict=True):
        if "provenance" not in f:
            continue
        if m.kind not in ("wheel", "sdist"):
            raise _bad(f"the manifest gives {m.path} (kind {m.kind}) a provenance; only wheels and sdists have one.")
        out.append((m.path, parse_recorded(f["provenance"], f"the manifest's provenance of {m.path}", IntegrityError)))
    return tuple(out)


def _exclude_newer_package(value: object) -> tuple[tuple[str, str | None], ...]:
    """``exclude-newer-package = { setuptools = "2024-06-01T00:00:00Z", docopt = false }``: the recipe's
    per-package cut-offs, as the builder writes them (normalised names in order, UTC times with a Z)."""
    if not isinstance(value, dict) or len(value) > MAX_EXEMPT:
        raise _bad(f"the manifest's exclude-newer-package is not a table of at most {MAX_EXEMPT} packages.")
    out: list[tuple[str, str | None]] = []
    for name, when in value.items():
        if not _CANONICAL_NAME.fullmatch(name) or len(name) > 128:
            raise _bad(f"the manifest's exclude-newer-package names {name[:60]!r}, not a normalised package name.")
        if when is False:
            out.append((name, None))
            continue
        parsed = parse_time(when) if isinstance(when, str) else None
        if parsed is None or parsed.tzinfo is None or iso(parsed) != when:
            raise _bad(
                f"the manifest's exclude-newer-package time for {name} is not a UTC time such as "
                "2024-06-01T00:00:00Z, nor false."
            )
        out.append((name, when))
    if [n for n, _ in out] != sorted(n for n, _ in out):
        raise _bad("the manifest's exclude-newer-package is not in name order; the bundle is malformed.")
    return tuple(out)


def _check_collisions(members: tuple[Member, ...]) -> None:
    """No two members may be one file after Unicode and case normalisation, none may be the manifest,
    and a file may not also be a directory of another member (a/b and a/b/c)."""
    seen: dict[str, str] = {collision_key(MANIFEST): MANIFEST}
    for m in members:
        key = collision_key(m.path)
        if key in seen:
            other = seen[key]
            same = "twice" if other == m.path else f"and {other}, one name after Unicode and case folding"
            raise _bad(f"the manifest lists {m.path} {same}; each member needs a name of its own.")
        seen[key] = m.path
    for key, path in seen.items():
        parent = PurePosixPath(key).parent
        while str(parent) != ".":
            if str(parent) in seen:
                raise _bad(f"the manifest lists {seen[str(parent)]} as a file and as a directory of {path}.")
            parent = parent.parent
