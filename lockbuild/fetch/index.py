"""A thin client for a package index's PEP 691 JSON simple API (with PEP 700 upload times).

An index answer is untrusted input: every entry is checked as it is read (file names, times, digests,
duplicates), the number of entries is capped per page and per run (``Limits``), and only the files of
the releases a plan asks for are kept, never whole pages.
"""

from __future__ import annotations

import datetime as dt
import functools
import threading
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpx
from packaging.specifiers import InvalidSpecifier, Specifier
from packaging.utils import canonicalize_name, canonicalize_version
from packaging.version import InvalidVersion, Version

from lockbuild import times
from lockbuild.digest import is_sha256
from lockbuild.errors import RemoteError
from lockbuild.fetch.http import get_json
from lockbuild.limits import DEFAULT_LIMITS, Limits
from lockbuild.lock import file_name_and_version
from lockbuild.wire.urls import public

SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"
_SHOWN = 90


@dataclass(frozen=True)
class IndexFile:
    filename: str
    url: str
    sha256: str | None
    size: int | None
    upload_time: dt.datetime | None
    yanked: bool
    yank_reason: str = ""
    metadata_sha256: str | None = None  # PEP 658/714: the sha256 of the file's METADATA at URL + ".metadata"
    # PEP 740: the page's "provenance" key; absent (offers_provenance False), null (no attestations) or a URL
    offers_provenance: bool = False
    provenance_url: str | None = None

    @property
    def metadata_url(self) -> str:
        """Where PEP 658 puts the file's METADATA (meaningful only when ``metadata_sha256`` is set)."""
        return self.url.split("#", 1)[0] + ".metadata"

    @property
    def version(self) -> str | None:
        return file_version(self.filename)

    @property
    def is_wheel(self) -> bool:
        return self.filename.endswith(".whl")


@dataclass(frozen=True)
class Publication:
    """When a release's files were uploaded: the first (which sets the cut-off) and the last."""

    first: dt.datetime
    last: dt.datetime
    files: tuple[IndexFile, ...]


def file_version(filename: str) -> str | None:
    """The normalised version a distribution file is for, or None if the name is not one."""
    got = file_name_and_version(filename)
    return got[1] if got else None


def has_control_character(text: str) -> bool:
    """True when ``text`` holds a character of Unicode category C (control, format, unassigned...)."""
    if text.isascii() and text.isprintable():  # printable ASCII has no category C character (the common case)
        return False
    return any(unicodedata.category(c).startswith("C") for c in text)


@functools.lru_cache(maxsize=4096)
def _canonical_version(text: str) -> str | None:
    try:
        return canonicalize_version(Version(text))
    except InvalidVersion:
        return None


def _wheel_version_field(filename: str) -> str | None:
    """A wheel's normalised version from its second field, without parsing the rest of the name: the
    version ``file_version`` gives for it when that is not None (a page lists thousands of other versions'
    files, and parsing each name whole was most of a lock's time). None when not a plain wheel name."""
    if not filename.endswith(".whl"):
        return None
    parts = filename[:-4].split("-")
    return _canonical_version(parts[1]) if len(parts) in (5, 6) else None


_SDIST_SUFFIXES = (".tar.gz", ".zip")  # the only sdist names file_version reads (as packaging does)


def _sdist_version_field(filename: str) -> str | None:
    """An sdist's normalised version from after its last dash (how packaging splits it), without the rest
    of the parse: the version ``file_version`` gives when that is not None. None when not such a name."""
    for suffix in _SDIST_SUFFIXES:
        if filename.endswith(suffix):
            return _canonical_version(filename[: -len(suffix)].rpartition("-")[2])
    return None


def _origin(url: str) -> tuple[str, str, int | None]:
    """(scheme, host, port) of a URL, the port filled in for http and https."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = -1  # no origin matches an unreadable port
    scheme = parts.scheme.lower()
    return scheme, (parts.hostname or "").lower(), port or {"http": 80, "https": 443}.get(scheme)


def parse_time(value: object) -> dt.datetime | None:
    """An index's upload time in UTC, or None when it is not a readable time."""
    if not isinstance(value, str):
        return None
    parsed = times.parse_time(value)
    if parsed is None or parsed.tzinfo is not None:
        return parsed
    return parsed.replace(tzinfo=dt.UTC)  # the index gives UTC


def _yank(value: object) -> tuple[bool, str]:
    """PEP 592 / 691: ``yanked`` is false, true, or the reason as a string (any string means yanked)."""
    if value is None or value is False:
        return False, ""
    if isinstance(value, str):
        return True, value
    return bool(value), ""


def parse_project_page(
    data: Any,
    page_url: str,
    *,
    what: str,
    keep: Callable[[str | None], bool] | None = None,
    limits: Limits = DEFAULT_LIMITS,
) -> tuple[IndexFile, ...]:
    """The files of a PEP 691 project page (only those whose version ``keep`` accepts); RemoteError when
    the page is not one, is too long, or lists a file lockbuild refuses."""
    if not isinstance(data, dict) or not isinstance(data.get("files"), list):
        raise RemoteError(f"{what}: {page_url} is not a PEP 691 project page (no 'files' list).")
    entries: list[Any] = data["files"]
    if len(entries) > limits.max_index_files:
        raise RemoteError(
            f"{what}: {page_url} lists {len(entries)} files; expected at most {limits.max_index_files}.",
            tip="Check that the index URL points at a package index; the limit is Limits.max_index_files.",
        )
    out: dict[str, IndexFile] = {}
    for f in entries:
        if not isinstance(f, dict) or not isinstance(f.get("filename"), str) or not isinstance(f.get("url"), str):
            raise RemoteError(f"{what}: {page_url} lists a file without a filename or url.")
        filename: str = f["filename"]
        if has_control_character(filename) or len(filename) > 255:
            raise RemoteError(
                f"{what}: {page_url} lists a file named {filename[:_SHOWN]!r}; expected a plain file name "
                "without control characters (Unicode category C), at most 255 characters; refused."
            )
        if keep is not None:  # keep(None) is False for every caller: a quick "no" is the slow one's "no"
            if filename.endswith(".whl"):
                quick = _wheel_version_field(filename)
            elif filename.endswith(_SDIST_SUFFIXES):
                quick = _sdist_version_field(filename)
            else:
                continue  # neither a wheel nor an sdist: file_version would give None
            if quick is not None and not keep(quick):
                continue
        version = file_version(filename)
        if keep is not None and not keep(version):
            continue
        hashes = f.get("hashes") if isinstance(f.get("hashes"), dict) else {}
        sha = hashes.get("sha256") if isinstance(hashes, dict) else None
        size = f.get("size")
        raw_time = f.get("upload-time")
        upload_time = parse_time(raw_time)
        if raw_time is not None and upload_time is None:
            raise RemoteError(
                f"{what}: {page_url} gives {filename} an upload-time lockbuild cannot read "
                f"({str(raw_time)[:_SHOWN]!r}); expected an RFC 3339 time in years 1 to 9999; refused."
            )
        yanked, reason = _yank(f.get("yanked", False))
        meta = f.get("core-metadata", f.get("dist-info-metadata"))  # PEP 714's name, then PEP 658's
        meta_sha = meta.get("sha256") if isinstance(meta, dict) else None
        provenance = f.get("provenance")
        if provenance is not None and (
            not isinstance(provenance, str) or len(provenance) > 4096 or has_control_character(provenance)
        ):
            raise RemoteError(
                f"{what}: {page_url} gives {filename} a provenance of {str(provenance)[:_SHOWN]!r}; expected "
                "null or a URL of at most 4096 characters (PEP 740); refused."
            )
        # the provenance must come from the index that served the page (PyPI serves both from pypi.org): a
        # mirror that serves another file cannot point at the genuine file's provenance elsewhere
        if isinstance(provenance, str) and _origin(urljoin(page_url, provenance)) != _origin(page_url):
            raise RemoteError(
                f"{what}: {page_url} gives {filename} a provenance at "
                f"{public(urljoin(page_url, provenance))[:_SHOWN]!r}, another origin than the page's; expected "
                "the provenance from the index that lists the file (scheme, host and port); refused."
            )
        got = IndexFile(
            filename=filename,
            url=public(urljoin(page_url, f["url"])),  # a URL that is recorded carries no credentials
            sha256=sha.lower() if isinstance(sha, str) else None,
            size=size if isinstance(size, int) and not isinstance(size, bool) and size >= 0 else None,
            upload_time=upload_time,
            yanked=yanked,
            yank_reason=reason,
            metadata_sha256=meta_sha.lower() if isinstance(meta_sha, str) and is_sha256(meta_sha.lower()) else None,
            offers_provenance="provenance" in f,
            provenance_url=public(urljoin(page_url, provenance)) if isinstance(provenance, str) else None,
        )
        before = out.get(filename)
        if before is not None and (before.sha256 != got.sha256 or before.sha256 is None):
            raise RemoteError(
                f"{what}: {page_url} lists {filename} twice, with different digests "
                f"({before.sha256 or 'none'} and {got.sha256 or 'none'}); expected one file per name; refused."
            )
        out.setdefault(filename, got)
    return tuple(out.values())


class Index:
    """One simple index (primary or second).

    Only the releases asked for are kept (``release``), and at most ``limits.max_index_files_total``
    entries are read over all pages of one instance (one plan).
    """

    def __init__(
        self, url: str, client: httpx.Client, *, name: str = "the package index", limits: Limits = DEFAULT_LIMITS
    ) -> None:
        self.url = url.rstrip("/")
        self.client = client
        self.name = name
        self.limits = limits
        self._releases: dict[tuple[str, str], tuple[IndexFile, ...]] = {}
        self._read = 0  # entries read over all pages (look-ups run on several threads: counted under a lock)
        self._read_lock = threading.Lock()

    def _page(self, project: str, keep: Callable[[str | None], bool] | None) -> tuple[IndexFile, ...]:
        key = canonicalize_name(project)
        what = f"reading {self.name}'s page for {project}"
        try:
            data, final = get_json(
                self.client,
                f"{self.url}/{key}/",
                what=f"asking {self.name} for {project}",
                headers={"Accept": SIMPLE_JSON},
                not_found=self._missing(project),
            )
        except RecursionError:
            raise RemoteError(f"{what}: {self.url}/{key}/ is JSON nested too deeply to be a project page.") from None
        if isinstance(data, dict) and isinstance(data.get("files"), list):
            with self._read_lock:
                self._read += len(data["files"])
                read = self._read
            if read > self.limits.max_index_files_total:
                raise RemoteError(
                    f"{what}: {self.name} ({self.url}) has listed {read} files in this run; expected at most "
                    f"{self.limits.max_index_files_total} (Limits.max_index_files_total); refused."
                )
        return parse_project_page(data, final, what=what, keep=keep, limits=self.limits)

    def _missing(self, project: str) -> str:
        return f"{self.name} ({self.url}) has no project {project!r}."

    def serves(self, project: str) -> bool:
        """Whether this index has a page for ``project`` (an answer other than 404). No file of it is kept;
        any other failure is raised: an index that cannot say is not taken to serve nothing."""
        try:
            self._page(project, lambda _v: False)
        except RemoteError as exc:
            if exc.message == self._missing(project):  # the 404 answer get_json gives for this page
                return False
            raise
        return True

    def files(self, project: str) -> tuple[IndexFile, ...]:
        """Every file the project's page lists (not kept)."""
        return self._page(project, None)

    def release(self, project: str, version: str) -> tuple[IndexFile, ...]:
        """The files of ``project==version`` (normalised); kept for the rest of this instance's life."""
        want = canonicalize_version(version)
        key = (canonicalize_name(project), want)
        if key not in self._releases:
            self._releases[key] = self._page(project, lambda v: v == want)
        return self._releases[key]

    def matching(self, project: str, version: str) -> tuple[IndexFile, ...]:
        """The files whose version ``==version`` matches under PEP 440 (local labels such as +cu129 match
        a version without one)."""
        try:
            spec = Specifier(f"=={version}")
        except InvalidSpecifier:
            return ()

        def keep(v: str | None) -> bool:
            return v is not None and spec.contains(v, prereleases=True)

        return self._page(project, keep)

    def publication(self, project: str, version: str) -> Publication:
        """When the release's files were uploaded (PEP 700), with the JSON API as a fallback."""
        files = self.release(project, version)
        if not files:
            raise RemoteError(
                f"{self.name} ({self.url}) has no release {project}=={version}.",
                tip="Check the version in the recipe, or set as-of explicitly.",
            )
        found = [f.upload_time for f in files if f.upload_time is not None]
        if not found:
            found = self._json_api_times(project, canonicalize_version(version))
        if not found:
            raise RemoteError(
                f"{self.name} publishes no upload times for {project}=={version}; "
                "expected PEP 700 upload-time on its files.",
                tip="Set as-of on the build to give the cut-off explicitly.",
            )
        return Publication(min(found), max(found), files)

    def _json_api_times(self, project: str, version: str) -> list[dt.datetime]:
        base = self.url.removesuffix("/simple")
        try:
            data, _ = get_json(self.client, f"{base}/pypi/{canonicalize_name(project)}/json", what="JSON API")
        except (RemoteError, RecursionError):
            return []
        releases = data.get("releases") if isinstance(data, dict) else None
        if not isinstance(releases, dict):
            return []
        out: list[dt.datetime] = []
        for key, files in releases.items():
            if not isinstance(key, str) or not isinstance(files, list):
                continue
            try:
                if canonicalize_version(key) != version:
                    continue
            except InvalidVersion:
                continue
            for f in files[: self.limits.max_index_files]:
                if not isinstance(f, dict):
                    continue
                t = parse_time(f.get("upload_time_iso_8601")) or parse_time(f.get("upload_time"))
                if t is not None:
                    out.append(t)
        return out
