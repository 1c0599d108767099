"""A static package index of a store's wheels and sdists, rendered (pure: names and records in, bytes out).

The layout is docs/site-administrators.md's, "A package index for pip and uv" (PEP 503, 691, 700, 658).
Every address is relative, so the tree works from any URL and from ``file://``; every text from a manifest
or a wheel is escaped for HTML and written by ``json`` for JSON."""

from __future__ import annotations

import email.parser
import html
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import quote

from packaging.version import InvalidVersion, Version

from lockbuild import wheelfile
from lockbuild.errors import LockbuildError
from lockbuild.trust.scheme import SCHEME

API_VERSION = "1.1"  # PEP 700: versions, size, upload-time
FILES = "files"
SIMPLE = "simple"
SUMS = "SHA256SUMS"
SUMS_SIGNATURE = "SHA256SUMS" + SCHEME.suffix
METADATA_SUFFIX = ".metadata"
MAX_METADATA = wheelfile.MAX_METADATA  # a wheel's METADATA, read by the one reader of wheel members
_META_TAG = f'<meta name="pypi:repository-version" content="{API_VERSION}">'
_PROJECT = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class ExportError(LockbuildError):
    """The package index cannot be written (a file another build names differently, a place others can write)."""

    default_tip = (
        "Fix what the message names and run `lockbuild store index` again: the old index stays as it was "
        "until a new one is whole."
    )


def normalize(name: str) -> str:
    """A project name as PEP 503 normalises it (runs of -, _ and . become one -, lower case)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def project_of(filename: str) -> tuple[str, str]:
    """(normalised project, version) of a wheel or sdist file name; ExportError when it is neither."""
    if filename.endswith(".whl"):
        parts = filename[:-4].split("-")
        name, version = (parts[0], parts[1]) if len(parts) in (5, 6) else ("", "")
    else:
        stem = next((filename[: -len(s)] for s in (".tar.gz", ".zip") if filename.endswith(s)), "")
        name, _, version = stem.rpartition("-")
    project = normalize(name)
    if not _PROJECT.fullmatch(project) or not version or _CONTROL.search(version) or "/" in version:
        raise ExportError(
            f"{filename[:120]!r} is not a wheel or sdist file name (NAME-VERSION…whl, .tar.gz or "
            ".zip); expected one to name its project.",
            tip="The store's build is malformed: run `lockbuild store verify --store DIR`.",
        )
    return project, version


def requires_python(metadata: bytes) -> str | None:
    """The Requires-Python of a wheel's METADATA (email headers), or None; one with a control character is
    left out rather than passed to a client."""
    headers = email.parser.BytesHeaderParser().parsebytes(metadata)
    value = headers.get("Requires-Python")
    if value is None:
        return None
    text = " ".join(str(value).split())
    return text if text and not _CONTROL.search(text) else None


@dataclass(frozen=True)
class Dist:
    """One file of the index: a wheel or sdist, as the signed manifest lists it."""

    filename: str
    project: str
    version: str
    sha256: str
    size: int
    upload_time: str | None  # the original index's, as the manifest recorded it (iso: UTC, to the second)
    requires_python: str | None = None
    metadata_sha256: str | None = None  # the wheel's METADATA, written beside it

    @property
    def path(self) -> str:
        """Where the file lies in the export."""
        return f"{FILES}/{self.filename}"

    @property
    def href(self) -> str:
        """Its address from its project's page (simple/<project>/), with the sha256 fragment."""
        return f"../../{FILES}/{quote(self.filename)}#sha256={self.sha256}"


def _version_key(version: str) -> tuple[int, Version | str]:
    try:
        return (0, Version(version))
    except InvalidVersion:
        return (1, version)


def _page(title: str, body: Iterable[str]) -> bytes:
    lines = [
        "<!DOCTYPE html>",
        "<html>",
        "  <head>",
        f"    {_META_TAG}",
        f"    <title>{html.escape(title)}</title>",
        "  </head>",
        "  <body>",
        f"    <h1>{html.escape(title)}</h1>",
        *(f"    {line}" for line in body),
        "  </body>",
        "</html>",
        "",
    ]
    return "\n".join(lines).encode()


def _json(data: object) -> bytes:
    return (json.dumps(data, sort_keys=True, indent=1) + "\n").encode()


def root_html(projects: Sequence[str]) -> bytes:
    return _page("Simple index", (f'<a href="{html.escape(p)}/">{html.escape(p)}</a><br>' for p in projects))


def root_json(projects: Sequence[str]) -> bytes:
    return _json({"meta": {"api-version": API_VERSION}, "projects": [{"name": p} for p in projects]})


def _anchor(d: Dist) -> str:
    attrs = [f'href="{html.escape(d.href)}"']
    if d.requires_python is not None:
        attrs.append(f'data-requires-python="{html.escape(d.requires_python)}"')
    if d.metadata_sha256 is not None:
        attrs += [
            f'data-dist-info-metadata="sha256={d.metadata_sha256}"',
            f'data-core-metadata="sha256={d.metadata_sha256}"',
        ]
    if d.upload_time is not None:
        attrs.append(f'data-upload-time="{html.escape(d.upload_time)}"')
    attrs.append(f'data-size="{d.size}"')
    return f"<a {' '.join(attrs)}>{html.escape(d.filename)}</a><br>"


def project_html(project: str, dists: Sequence[Dist]) -> bytes:
    return _page(f"Links for {project}", (_anchor(d) for d in dists))


def project_json(project: str, dists: Sequence[Dist]) -> bytes:
    files: list[dict[str, object]] = []
    for d in dists:
        f: dict[str, object] = {
            "filename": d.filename,
            "url": d.href.partition("#")[0],
            "hashes": {"sha256": d.sha256},
            "size": d.size,
        }
        if d.requires_python is not None:
            f["requires-python"] = d.requires_python
        if d.metadata_sha256 is not None:
            f["core-metadata"] = f["dist-info-metadata"] = {"sha256": d.metadata_sha256}
        if d.upload_time is not None:
            f["upload-time"] = d.upload_time
        files.append(f)
    versions = sorted({d.version for d in dists}, key=_version_key)
    return _json({"meta": {"api-version": API_VERSION}, "name": project, "versions": versions, "files": files})


def pages(dists: Sequence[Dist]) -> list[tuple[str, bytes]]:
    """Every page of the index, as (path in the export, bytes), in a fixed order."""
    by_project: dict[str, list[Dist]] = {}
    for d in sorted(dists, key=lambda d: d.filename):
        by_project.setdefault(d.project, []).append(d)
    projects = sorted(by_project)
    out = [(f"{SIMPLE}/index.html", root_html(projects)), (f"{SIMPLE}/index.json", root_json(projects))]
    for p in projects:
        out += [
            (f"{SIMPLE}/{p}/index.html", project_html(p, by_project[p])),
            (f"{SIMPLE}/{p}/index.json", project_json(p, by_project[p])),
        ]
    return out


def sums_text(files: Iterable[tuple[str, str]]) -> bytes:
    """SHA256SUMS: one ``<sha256>  <path>`` line per file, sorted by path, as ``sha256sum -c`` reads it."""
    return "".join(f"{sha}  {path}\n" for path, sha in sorted(files)).encode()


def trusted_comment(sums_sha256: str, count: int) -> str:
    """The signature's trusted comment: what the listing is, and nothing that changes between exports."""
    return f"lockbuild package index SHA256SUMS sha256={sums_sha256} files={count}"
