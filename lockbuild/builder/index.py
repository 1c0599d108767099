"""A thin client for a package index's PEP 691 JSON simple API (with PEP 700 upload times)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin

import httpx
from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    canonicalize_version,
    parse_sdist_filename,
    parse_wheel_filename,
)

from lockbuild import times
from lockbuild.builder.http import get_json
from lockbuild.errors import RemoteError

SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"


@dataclass(frozen=True)
class IndexFile:
    filename: str
    url: str
    sha256: str | None
    size: int | None
    upload_time: dt.datetime | None
    yanked: bool

    @property
    def version(self) -> str | None:
        return file_version(self.filename)

    @property
    def is_wheel(self) -> bool:
        return self.filename.endswith(".whl")


def file_version(filename: str) -> str | None:
    """The normalised version a distribution file is for, or None if the name is not one."""
    try:
        if filename.endswith(".whl"):
            return canonicalize_version(parse_wheel_filename(filename)[1])
        return canonicalize_version(parse_sdist_filename(filename)[1])
    except (InvalidWheelFilename, InvalidSdistFilename):
        return None


def parse_time(value: object) -> dt.datetime | None:
    if not isinstance(value, str):
        return None
    parsed = times.parse_time(value)
    if parsed is None or parsed.tzinfo is not None:
        return parsed
    return parsed.replace(tzinfo=dt.UTC)  # the index gives UTC


def parse_project_page(data: Any, page_url: str, *, what: str) -> tuple[IndexFile, ...]:
    """The files of a PEP 691 project page; RemoteError when it is not one."""
    if not isinstance(data, dict) or not isinstance(data.get("files"), list):
        raise RemoteError(f"{what}: {page_url} is not a PEP 691 project page (no 'files' list).")
    out: list[IndexFile] = []
    for f in data["files"]:
        if not isinstance(f, dict) or not isinstance(f.get("filename"), str) or not isinstance(f.get("url"), str):
            raise RemoteError(f"{what}: {page_url} lists a file without a filename or url.")
        hashes = f.get("hashes") if isinstance(f.get("hashes"), dict) else {}
        sha = hashes.get("sha256") if isinstance(hashes, dict) else None
        size = f.get("size")
        out.append(
            IndexFile(
                filename=f["filename"],
                url=urljoin(page_url, f["url"]),
                sha256=sha.lower() if isinstance(sha, str) else None,
                size=size if isinstance(size, int) and not isinstance(size, bool) and size >= 0 else None,
                upload_time=parse_time(f.get("upload-time")),
                yanked=bool(f.get("yanked", False)),
            )
        )
    return tuple(out)


class Index:
    """One simple index (primary or second); project pages are read once per instance."""

    def __init__(self, url: str, client: httpx.Client, *, name: str = "the package index") -> None:
        self.url = url.rstrip("/")
        self.client = client
        self.name = name
        self._pages: dict[str, tuple[IndexFile, ...]] = {}

    def files(self, project: str) -> tuple[IndexFile, ...]:
        key = canonicalize_name(project)
        if key not in self._pages:
            data, final = get_json(
                self.client,
                f"{self.url}/{key}/",
                what=f"asking {self.name} for {project}",
                headers={"Accept": SIMPLE_JSON},
                not_found=f"{self.name} ({self.url}) has no project {project!r}.",
            )
            self._pages[key] = parse_project_page(data, final, what=f"reading {self.name}'s page for {project}")
        return self._pages[key]

    def publication_time(self, project: str, version: str) -> dt.datetime:
        """When the release's last file was uploaded (PEP 700), with the JSON API as a fallback."""
        want = canonicalize_version(version)
        files = [f for f in self.files(project) if f.version == want]
        if not files:
            raise RemoteError(
                f"{self.name} ({self.url}) has no release {project}=={version}.",
                tip="Check the version in the recipe, or set as-of explicitly.",
            )
        times = [f.upload_time for f in files if f.upload_time is not None]
        if not times:
            times = self._json_api_times(project, want)
        if not times:
            raise RemoteError(
                f"{self.name} publishes no upload times for {project}=={version}; "
                "expected PEP 700 upload-time on its files.",
                tip="Set as-of on the build to give the cut-off explicitly.",
            )
        return max(times)

    def _json_api_times(self, project: str, version: str) -> list[dt.datetime]:
        base = self.url.removesuffix("/simple")
        try:
            data, _ = get_json(self.client, f"{base}/pypi/{canonicalize_name(project)}/json", what="JSON API")
        except RemoteError:
            return []
        releases = data.get("releases") if isinstance(data, dict) else None
        if not isinstance(releases, dict):
            return []
        out: list[dt.datetime] = []
        for key, files in releases.items():
            if not isinstance(key, str) or canonicalize_version(key) != version or not isinstance(files, list):
                continue
            for f in files:
                if not isinstance(f, dict):
                    continue
                t = parse_time(f.get("upload_time_iso_8601")) or parse_time(f.get("upload_time"))
                if t is not None:
                    out.append(t)
        return out
