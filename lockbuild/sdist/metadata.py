"""An sdist's dependency metadata as uv is given it: so that locking runs no build backend with the network.

``uv pip compile`` gets a ``uv.toml`` whose ``dependency-metadata`` states every version of every
``build-on-node`` package: the metadata read (:func:`static_metadata`, else ``sdist/metahook.py``), or "no
dependencies" for the rest (:func:`uv_config`). Pure: parsing and rendering only."""

from __future__ import annotations

import io
import json
from collections.abc import Iterable
from dataclasses import dataclass
from email.parser import BytesHeaderParser

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from lockbuild.errors import ResolveError

MAX_FIELDS = 2000  # Requires-Dist and Provides-Extra entries of one package
MAX_FIELD = 2000  # characters of one entry
DEPENDENCY_FIELDS = frozenset({"requires-dist", "requires-python", "provides-extra"})


@dataclass(frozen=True)
class SdistMetadata:
    """What uv needs of one sdist release to resolve with it: its dependencies, Python and extras."""

    name: str  # canonical
    version: str
    requires_dist: tuple[str, ...] = ()
    requires_python: str | None = None
    provides_extra: tuple[str, ...] = ()
    sha256: str = ""  # the sdist it was read from ("" for the stand-in of versions not read yet)


def refusal(project: str, version: str, why: str) -> ResolveError:
    """Why an sdist's metadata could not be had without running its backend with the network."""
    return ResolveError(
        f"cannot lock {project} {version}: its sdist's dependency metadata is dynamic, and lockbuild could not "
        f"produce it in the sandbox without network ({why}). lockbuild never lets a build backend run with the "
        "network while locking.",
        tip=f"Make sure this builder has the Python the build targets (outside any virtual environment) and that "
        f"the build dependencies of {project} are on the index as wheels by the cut-off; or require a version of "
        f"{project} that publishes a wheel for the target, or one whose sdist has static metadata (PKG-INFO 2.2+).",
    )


def parse_metadata(raw: bytes, project: str, version: str, sha256: str, *, what: str) -> SdistMetadata:
    """The dependency fields of a METADATA/PKG-INFO file, which must name ``project`` ``version``."""
    try:
        headers = BytesHeaderParser().parse(io.BytesIO(raw))
    except (ValueError, UnicodeError) as exc:
        raise refusal(project, version, f"{what} is not a metadata file ({exc})") from None
    name, got = str(headers.get("Name", "")), str(headers.get("Version", ""))
    try:
        same = canonicalize_name(name) == canonicalize_name(project) and Version(got) == Version(version)
    except InvalidVersion:
        same = False
    if not same:
        raise refusal(project, version, f"{what} names {name[:60]!r} {got[:40]!r}")
    requires = tuple(_requirement(str(v), project, version, what) for v in headers.get_all("Requires-Dist") or [])
    extras = tuple(sorted({_extra(str(v), project, version, what) for v in headers.get_all("Provides-Extra") or []}))
    if len(requires) + len(extras) > MAX_FIELDS:
        raise refusal(project, version, f"{what} has more than {MAX_FIELDS} dependencies and extras")
    python = headers.get("Requires-Python")
    python_spec = None
    if python is not None:
        text = _plain(str(python), project, version, what)
        try:
            python_spec = str(SpecifierSet(text))
        except InvalidSpecifier:
            raise refusal(project, version, f"{what} has an invalid Requires-Python {text[:80]!r}") from None
    return SdistMetadata(canonicalize_name(project), version, requires, python_spec, extras, sha256)


def static_metadata(raw: bytes, project: str, version: str, sha256: str) -> SdistMetadata | None:
    """PKG-INFO's metadata when it is static (PEP 643: Metadata-Version 2.2 or later, and no dependency
    field marked Dynamic), else None: then only the backend can say."""
    headers = BytesHeaderParser().parse(io.BytesIO(raw))
    try:
        declared = Version(str(headers.get("Metadata-Version", "0")))
    except InvalidVersion:
        return None
    dynamic = {str(v).strip().lower() for v in headers.get_all("Dynamic") or []}
    if declared < Version("2.2") or dynamic & DEPENDENCY_FIELDS:
        return None
    return parse_metadata(raw, project, version, sha256, what="its PKG-INFO")


def _plain(text: str, project: str, version: str, what: str) -> str:
    if len(text) > MAX_FIELD or not text.isascii() or not text.isprintable():
        raise refusal(project, version, f"{what} has a field that is not short printable ASCII ({text[:60]!r})")
    return text.strip()


def _requirement(text: str, project: str, version: str, what: str) -> str:
    text = _plain(text, project, version, what)
    try:
        req = Requirement(text)
    except InvalidRequirement:
        raise refusal(project, version, f"{what} has an invalid Requires-Dist {text[:80]!r}") from None
    if req.url:
        raise refusal(project, version, f"{what} requires a URL ({text[:80]!r}); only index packages can be locked")
    return str(req)


def _extra(text: str, project: str, version: str, what: str) -> str:
    text = _plain(text, project, version, what)
    if not text or not all(c.isalnum() or c in "-_." for c in text):
        raise refusal(project, version, f"{what} has an invalid Provides-Extra {text[:80]!r}")
    return canonicalize_name(text)


def uv_config(known: Iterable[SdistMetadata], names: Iterable[str]) -> str:
    """The uv.toml for the compile: an entry for each release read, and for each of ``names`` one entry
    without a version (every other release: no dependencies), so that uv runs no backend for any of them."""
    q = json.dumps  # a JSON string of printable ASCII is a TOML basic string
    out = []
    for m in sorted(known, key=lambda m: (m.name, m.version)):
        out.append(
            f"[[dependency-metadata]]\nname = {q(m.name)}\nversion = {q(m.version)}\n"
            f"requires-dist = [{', '.join(q(r) for r in m.requires_dist)}]\n"
            + (f"requires-python = {q(m.requires_python)}\n" if m.requires_python is not None else "")
            + f"provides-extras = [{', '.join(q(e) for e in m.provides_extra)}]\n"
        )
    for name in sorted({canonicalize_name(n) for n in names}):
        out.append(f"[[dependency-metadata]]\nname = {q(name)}\nrequires-dist = []\n")
    return "\n".join(out)
