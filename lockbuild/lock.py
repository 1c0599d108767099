"""The lock model: exactly which file of each package a node installs, from where, with which digest.

Pure logic: uv's output text and index listings in, frozen records out. The builder fetches and
bundles exactly ``Lock.files``; the bundle carries the lock rewritten to point at bundled files.
"""

from __future__ import annotations

import datetime as dt
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, Literal
from urllib.parse import unquote, urlsplit

from packaging.markers import InvalidMarker, Marker
from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    canonicalize_version,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion

from lockbuild.digest import is_sha256
from lockbuild.documents import loads_toml
from lockbuild.errors import ResolveError
from lockbuild.provenance import Provenance
from lockbuild.target import Target

Origin = Literal["primary", "second", "direct"]  # "second": any extra index (``index`` or ``indexes``)
# Where a file's time came from: "upload-time" when the index's upload time was checked against the
# cut-off; "exemption" when no cut-off applied to it (an extra index without upload times, whose file the
# recipe's == pin and the lock's hash hold instead; exclude-newer-package = false; a wheel the recipe pins
# by URL and sha256).
TimeFrom = Literal["upload-time", "exemption"]
MAX_PYLOCK = 64 << 20  # uv's pylock.toml (a large environment's is well under 1 MiB)
_COMMENT = re.compile(r"(^|\s)#.*$")


@dataclass(frozen=True)
class LockedFile:
    """One file the node installs."""

    name: str
    version: str
    filename: str
    url: str
    sha256: str
    size: int | None
    origin: Origin
    index: str = "primary"  # the name of the index that served it ("primary", "second", an indexes name; "" for a URL)
    time_from: TimeFrom = "upload-time"
    # PEP 740: what the index said of the file's attestations (None: it offers no provenance), recorded unverified
    provenance: Provenance | None = None
    # PEP 700: when the index says the file was uploaded (None: it gives no time, as PyTorch's index)
    upload_time: dt.datetime | None = None

    @property
    def kind(self) -> Literal["wheel", "sdist"]:
        return "wheel" if self.filename.endswith(".whl") else "sdist"

    @property
    def bundle_path(self) -> str:
        return f"{'wheels' if self.kind == 'wheel' else 'sdists'}/{self.filename}"


@dataclass(frozen=True)
class Pin:
    """One line of a hashed requirements lock: a version and the digests allowed for it."""

    name: str
    version: str
    hashes: frozenset[str]
    url: str | None = None


@dataclass(frozen=True)
class Candidate:
    """A file an index offers for a package."""

    filename: str
    url: str
    sha256: str | None
    size: int | None
    upload_time: dt.datetime | None = None
    yanked: bool = False
    yank_reason: str = ""


@dataclass(frozen=True)
class Lock:
    """The resolved lock of one build: uv's text, its format, and the exact file set."""

    format: Literal["requirements.txt", "pylock.toml"]
    text: str
    files: tuple[LockedFile, ...]
    as_of: dt.datetime

    @property
    def filename(self) -> str:
        return self.format


def safe_filename(name: str, *, what: str) -> str:
    """A distribution file name that can be a bundle member; ResolveError otherwise."""
    if (
        not name
        or "/" in name
        or "\\" in name
        or name in (".", "..")
        or len(name) > 255
        or any(unicodedata.category(c).startswith("C") for c in name)
    ):
        raise ResolveError(
            f"{what}: expected a plain file name (no slashes, no control characters), found {name[:80]!r}."
        )
    return name


def parse_requirements_lock(text: str) -> tuple[Pin, ...]:
    """Read ``uv pip compile --generate-hashes`` output; every entry must be pinned and hashed.

    Lines end at "\n" (or "\r\n") only, as uv reads them: ``str.splitlines`` would also break at U+2028,
    U+0085, form feeds..., and a pin hidden in a comment would be one lockbuild trusts and uv never sees. A
    lone carriage return, which a reader might take for a line end, is refused."""
    logical: list[str] = []
    buf = ""
    for raw in text.split("\n"):
        raw = raw.removesuffix("\r")
        if "\r" in raw:
            raise ResolveError(
                f"the lock has a carriage return inside a line ({raw[:80]!r}); expected lines ending in a "
                "line feed only."
            )
        line = _COMMENT.sub("", raw).strip()  # pip's rule: a comment starts at "#" after whitespace
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        if buf.strip():
            logical.append(buf.strip())
        buf = ""
    if buf.strip():
        logical.append(buf.strip())
    pins: list[Pin] = []
    for entry in logical:
        tokens = entry.split()
        hashes = {t.split(":", 1)[1].lower() for t in tokens if t.startswith("--hash=sha256:")}
        others = [t for t in tokens if t.startswith("-") and not t.startswith("--hash=")]
        if others:
            raise ResolveError(
                f"the lock has an option lockbuild does not allow: {others[0][:80]!r}; "
                "expected only NAME==VERSION lines with --hash=sha256:... ."
            )
        if any(not is_sha256(h) for h in hashes):
            raise ResolveError(f"the lock has a malformed sha256 in {entry[:80]!r}; expected 64 hex digits.")
        head = " ".join(t for t in tokens if not t.startswith("-"))
        if not hashes:
            raise ResolveError(
                f"the lock pins {head!r} without a hash; expected every entry to carry --hash=sha256:...",
                tip="Resolve with --generate-hashes.",
            )
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?\s*==\s*([^\s;=*]+)(?:\s*;.*)?", head)
        if m:
            pins.append(Pin(canonicalize_name(m[1]), m[2], frozenset(hashes)))
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?\s*@\s*(\S+)", head)
        if m:
            url = m[2].split("#", 1)[0]
            pins.append(Pin(canonicalize_name(m[1]), "", frozenset(hashes), url))
            continue
        raise ResolveError(
            f"the lock has an entry that is not pinned with == : {head[:80]!r}; expected NAME==VERSION.",
        )
    names = [p.name for p in pins]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ResolveError(f"the lock names {', '.join(dupes)} more than once; expected one pin per package.")
    return tuple(pins)


def file_name_and_version(filename: str) -> tuple[str, str] | None:
    """The canonical project name and normalised version a distribution file is for, or None."""
    try:
        if filename.endswith(".whl"):
            name, version, _, _ = parse_wheel_filename(filename)
        else:
            name, version = parse_sdist_filename(filename)
    except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion):
        return None
    return canonicalize_name(name), canonicalize_version(version)


def _check_names(pin: Pin, files: Sequence[Candidate]) -> None:
    """Each file the lock's hashes allow must be a file of the pinned project and version."""
    want = canonicalize_version(pin.version) if pin.version else None
    for c in files:
        safe_filename(c.filename, what=f"{pin.name}=={pin.version}")
        got = file_name_and_version(c.filename)
        if got is None or got[0] != pin.name or (want is not None and got[1] != want):
            found = f"{got[0]} {got[1]}" if got else "no distribution file name"
            raise ResolveError(
                f"the index offers {c.filename[:80]!r} for {pin.name}=={pin.version}, but its name says {found}; "
                f"expected a file of {pin.name} {pin.version}; refused."
            )


def choose_file(
    pin: Pin,
    candidates: Iterable[Candidate],
    target: Target,
    *,
    origin: Origin,
    as_of: dt.datetime | None = None,
    pinned_sha256: str | None = None,
    one_file: bool = False,
    index: str | None = None,
) -> LockedFile:
    """The one file of ``pin`` the node installs: the best wheel for its tags, else the sdist.

    Only files whose sha256 the lock allows are considered, and each must have a sha256 from the index.
    A file uploaded at or after ``as_of`` is absent; a yanked file (PEP 592) is never a candidate unless
    the recipe pins its sha256 (``pinned_sha256``). With ``one_file`` (an index without upload times),
    exactly one file may fit the node: anything more is ambiguous and refused. ``index`` names the index
    the candidates come from (default: "primary" for origin primary, "second" for second, "" for direct).
    """
    allowed = [c for c in candidates if c.sha256 is not None and c.sha256 in pin.hashes]
    what = f"{pin.name}=={pin.version}"
    if pinned_sha256 is not None:
        offered = ", ".join(sorted(c.filename for c in allowed)) or "none"
        allowed = [c for c in allowed if c.sha256 == pinned_sha256]
        if not allowed:
            raise ResolveError(
                f"the recipe pins {pin.name} to the file with sha256 {pinned_sha256}, but the lock's {what} "
                f"has no such file; it has {offered}.",
                tip="Check pin-sha256 in the recipe against the index's file.",
            )
    late = [c for c in allowed if as_of is not None and c.upload_time is not None and c.upload_time >= as_of]
    allowed = [c for c in allowed if c not in late]
    yanked = [c for c in allowed if c.yanked and pinned_sha256 is None]
    allowed = [c for c in allowed if c not in yanked]
    _check_names(pin, allowed)
    ranked: list[tuple[int, str, Candidate]] = []
    sdists: list[Candidate] = []
    for c in allowed:
        if c.filename.endswith(".whl"):
            rank = target.wheel_rank(c.filename)
            if rank is not None:
                ranked.append((rank, c.filename, c))
        elif c.filename.endswith((".tar.gz", ".zip")):
            sdists.append(c)
    if one_file and pinned_sha256 is None and len(ranked) + len(sdists) > 1:
        names = sorted(c.filename for _, _, c in ranked) + sorted(c.filename for c in sdists)
        raise ResolveError(
            f"{what} comes from an index without upload times, and {len(names)} of its files fit Python "
            f"{target.python} on {target.platform} ({', '.join(names[:8])}); expected exactly one, so that a file "
            "added later cannot change the lock; refused.",
            tip=f'Pin the one file by its sha256: pin-sha256 = {{ {pin.name} = "..." }} on the build.',
        )
    if ranked:
        best = min(ranked, key=lambda r: (r[0], r[1]))[2]
    elif sdists:
        best = sorted(sdists, key=lambda c: c.filename)[0]
    elif yanked:
        reasons = "; ".join(f"{c.filename}: {c.yank_reason or 'no reason given'}" for c in yanked[:5])
        raise ResolveError(
            f"{what} can only be met by yanked files ({reasons}); a yanked file is never locked.",
            tip=f'Pick another version, or, if this file is meant, pin it: pin-sha256 = {{ {pin.name} = "..." }}.',
        )
    elif late:
        raise ResolveError(
            f"{what}'s only files that fit were uploaded after the cut-off {as_of:%Y-%m-%dT%H:%M:%SZ} "
            f"({', '.join(sorted(c.filename for c in late)[:5])}); they are treated as absent.",
            tip="Set as-of on the build to a later time if these files are meant.",
        )
    else:
        raise ResolveError(
            f"no file of {what} fits Python {target.python} on {target.platform}: "
            f"the index offers {len(allowed)} file(s) with the locked hashes and none is a compatible wheel or sdist.",
            tip="Check the build's python and platform, or pick a version that publishes a matching wheel.",
        )
    if best.sha256 is None:  # only files with the index's sha256 were allowed above
        raise ResolveError(f"the index gave no sha256 for {best.filename} ({what}); expected one for each file locked.")
    return LockedFile(
        name=pin.name,
        version=pin.version,
        filename=safe_filename(best.filename, what=what),
        url=best.url,
        sha256=best.sha256,
        size=best.size,
        origin=origin,
        index=index if index is not None else {"primary": "primary", "second": "second", "direct": ""}[origin],
        time_from="upload-time" if as_of is not None and best.upload_time is not None else "exemption",
        upload_time=best.upload_time,
    )


def _hash_of(entry: Mapping[str, Any], what: str) -> str:
    hashes = entry.get("hashes")
    sha = hashes.get("sha256") if isinstance(hashes, dict) else None
    if not isinstance(sha, str) or not is_sha256(sha.lower()):
        raise ResolveError(f"the pylock entry for {what} has no sha256; expected hashes = {{ sha256 = ... }}.")
    return sha.lower()


def _name_of(entry: Mapping[str, Any], what: str) -> str:
    name = entry.get("name")
    if not isinstance(name, str):
        url = entry.get("url")
        if not isinstance(url, str):
            raise ResolveError(f"the pylock entry for {what} has neither a name nor a url.")
        name = unquote(PurePosixPath(urlsplit(url).path).name)
    return safe_filename(name, what=what)


def parse_pylock(text: str, target: Target) -> tuple[Pin, ...]:
    """The pins of a PEP 751 lock that apply to the target: each package's version and allowed hashes."""
    refused = "uv wrote a pylock.toml lockbuild cannot read"
    data = loads_toml(text, max_bytes=MAX_PYLOCK, refuse=lambda why: ResolveError(f"{refused}: {why.detail}"))
    packages = data.get("packages")
    if not isinstance(packages, list):
        raise ResolveError("the pylock.toml has no [[packages]].")
    env = target.marker_environment()
    out: list[Pin] = []
    for pkg in packages:
        if not isinstance(pkg, dict):
            raise ResolveError("the pylock.toml has a package entry that is not a table.")
        name = canonicalize_name(str(pkg.get("name", "")))
        version = str(pkg.get("version", ""))
        what = f"{name}=={version}"
        marker = pkg.get("marker")
        if isinstance(marker, str):
            try:
                if not Marker(marker).evaluate(env):
                    continue
            except InvalidMarker:
                raise ResolveError(f"the pylock entry for {what} has an invalid marker {marker!r}.") from None
        hashes: set[str] = set()
        entries = [w for w in pkg.get("wheels", []) or [] if isinstance(w, dict)]
        for key in ("sdist", "archive"):
            if isinstance(pkg.get(key), dict):
                entries.append(pkg[key])
        for entry in entries:
            _name_of(entry, what)
            hashes.add(_hash_of(entry, what))
        if not hashes:
            raise ResolveError(f"the pylock entry for {what} names no wheel, sdist or archive with a hash.")
        archive = pkg.get("archive")
        url = str(archive.get("url")) if isinstance(archive, dict) and archive.get("url") else None
        out.append(Pin(name, version, frozenset(hashes), url))
    return tuple(out)
