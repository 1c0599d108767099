"""Checks of single recipe values: names, versions, tags, paths, URLs, requirements, times.

Every pattern is used with ``fullmatch``: ``re.match`` with ``^...$`` lets a trailing newline through.
"""

from __future__ import annotations

import datetime as dt
import re
import unicodedata
from pathlib import PurePosixPath
from urllib.parse import unquote, urlsplit

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from lockbuild.digest import SHA256_HEX
from lockbuild.documents import Problems
from lockbuild.recipe.fields import SHOWN, describe
from lockbuild.times import parse_time
from lockbuild.wire.urls import redacted, secret_parameter

NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
PROJECT = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,126}[A-Za-z0-9])?")
VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}")
SHA256 = SHA256_HEX  # one definition: lockbuild.digest
REPO = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9._-]+")
PYTHON = re.compile(r"3\.\d{1,2}")
FILE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}")
_TAG_CHARS = re.compile(r"[A-Za-z0-9._+/-]{1,128}")
_ARCHIVE_SUFFIXES = (".whl", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".zip", ".tar")
URLS_REFUSED = (
    "URLs are not allowed in requirements: they would install what the lock never saw; "
    'name a wheel from a URL with the build\'s wheel key: wheel = { url = "https://...", sha256 = "..." }'
)


def git_tag(value: str) -> bool:
    """A release tag that is a valid Git ref name (git check-ref-format) of plain characters: no "..",
    no leading or trailing "/", no "//", no component starting with "." or ending in ".lock", no "@{"."""
    if not _TAG_CHARS.fullmatch(value) or ".." in value or "//" in value:
        return False
    if value.startswith("/") or value.endswith(("/", ".")) or value == "@":
        return False
    return all(part and not part.startswith(".") and not part.endswith(".lock") for part in value.split("/"))


TAG_EXPECTED = 'a release tag that is a Git ref name, e.g. "v1.2" (letters, digits, ".", "_", "+", "-", "/"; no "..")'
_FILE_PART = re.compile(r"[A-Za-z0-9._+-]{1,128}")
_WHEEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,254}")


def file_part(value: str) -> bool:
    """A piece of a file name (a wheel's prefix or suffix): plain characters only."""
    return bool(_FILE_PART.fullmatch(value))


def wheel_filename(url: str) -> str | None:
    """The wheel file name a URL ends in, or None when it does not end in a valid one."""
    name = unquote(PurePosixPath(urlsplit(url).path).name)
    if not _WHEEL_NAME.fullmatch(name) or not name.endswith(".whl"):
        return None
    try:
        parse_wheel_filename(name)
    except InvalidWheelFilename:
        return None
    return name


def github_repo(value: str) -> bool:
    return bool(REPO.fullmatch(value))


def plain_name_or_file(value: str) -> bool:
    return bool(FILE.fullmatch(value))


def relative_path(value: str) -> bool:
    if not value or "\\" in value or "\0" in value:
        return False
    p = PurePosixPath(value)
    return not p.is_absolute() and ".." not in p.parts and all(part not in ("", ".") for part in value.split("/"))


def plain_name(value: str) -> bool:
    return bool(NAME.fullmatch(value))


def https_url(value: str) -> bool:
    """An http(s) URL without spaces, control characters or credentials (``user:token@`` would be recorded
    in the bundle's recipe, lock and manifest; credentials come from netrc or the environment)."""
    clean = value.startswith(("https://", "http://")) and not any(
        c.isspace() or unicodedata.category(c).startswith("C") for c in value
    )
    return clean and secret_parameter(value) is None


def url_problem(value: str, expected: str) -> str | None:
    """Why ``value`` is not a URL a recipe may hold, or None. A URL that looks like it carries a credential
    (userinfo, or a query or fragment parameter such as ``X-Amz-Signature``, ``sig``, ``token``) is refused,
    naming the parameter and never its value: the recipe is signed into every bundle, and its URLs are
    recorded in the manifest, the SBOM and ``inspect``."""
    try:
        urlsplit(value)
    except ValueError:  # an unclosed "[" in the host, a port out of range: not a URL at all
        return f"expected {expected}, found {value[:SHOWN]!r}, which is not a readable URL; check its host part"
    secret = secret_parameter(value)
    if secret == "userinfo":  # noqa: S105 (the name of a URL part, not a password)
        return (
            f"expected {expected} without credentials, found one with user:password@ ({redacted(value)[:SHOWN]!r}); "
            "a recipe is signed into every bundle, so a credential in it would be published"
        )
    if secret is not None:
        return (
            f"expected {expected} without credentials, found a query or fragment parameter {secret[:40]!r} that "
            f"looks like one ({redacted(value)[:SHOWN]!r}; its value is not shown); a recipe is signed into every "
            "bundle, so a presigned or token URL would be published. Use a URL that needs no secret, or give the "
            "index's credentials through netrc or LOCKBUILD_INDEX_TOKEN"
        )
    if not https_url(value):
        return f"expected {expected}, found {redacted(value)[:SHOWN]!r}"
    return None


def project_name(value: str) -> bool:
    return bool(PROJECT.fullmatch(value))


def requirement(value: str) -> Requirement | str:
    """A plain requirement (name, extras, specifier, marker), or why the text is not one."""
    if any(ord(c) < 32 and c != "\t" for c in value):
        return "expected one requirement on one line, found a control character or line break"
    if "://" in value or value.strip().lower().startswith(("git+", "hg+", "svn+", "bzr+")):
        return URLS_REFUSED
    try:
        req = Requirement(value)
    except InvalidRequirement as exc:
        first = str(exc).splitlines()[0] if str(exc) else "cannot parse"
        return f"not a valid requirement ({first})"
    if req.url:
        return URLS_REFUSED
    if req.name.lower().endswith(_ARCHIVE_SUFFIXES):
        return "uv reads a name ending in an archive suffix as a local file path; name the project instead"
    return req


_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s;]*")


def shown_requirement(value: str) -> str:
    """A refused requirement as a message shows it: any URL in it without userinfo, query or fragment."""
    return _URL_IN_TEXT.sub(lambda m: redacted(m.group()), value)


def pinned_version(req: Requirement) -> str | None:
    specs = list(req.specifier)
    if len(specs) == 1 and specs[0].operator == "==" and "*" not in specs[0].version:
        return specs[0].version
    return None


def parse_as_of(value: object, key: str, p: Problems) -> dt.datetime | None:
    if isinstance(value, dt.datetime):
        parsed = value
    elif isinstance(value, str):
        got = parse_time(value)
        if got is None:
            p.add(key, f"expected an RFC 3339 time such as 2025-10-05T01:40:00Z, found {value[:40]!r}")
            return None
        parsed = got
    elif isinstance(value, dt.date):
        p.add(key, f"expected a date and a time with a zone such as 2025-10-05T01:40:00Z, found only a date ({value})")
        return None
    else:
        p.add(key, f"expected an RFC 3339 time such as 2025-10-05T01:40:00Z, found {describe(value)}")
        return None
    if isinstance(value, str) and "T" not in value.upper() and " " not in value:
        p.add(key, f"expected a date and a time with a zone such as 2025-10-05T01:40:00Z, found only a date ({value})")
        return None
    if parsed.tzinfo is None:
        p.add(key, "expected a time with a zone (add Z for UTC), found a local time")
        return None
    return parsed.astimezone(dt.UTC)
