"""OSV records, parsed once and strictly into frozen dataclasses, and OSV's matching rule (pure).

A record is refused (AdvisoryDataError) when its shape is not OSV's or it is over a bound. Matching follows
OSV's own: PyPI ``affected[]`` entries for the PEP 503 name, ECOSYSTEM or SEMVER ranges with PEP 440
ordering, and the explicit ``versions``; a withdrawn record matches nothing."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from lockbuild.documents import JSON, loads_json
from lockbuild.errors import AdvisoryDataError
from lockbuild.limits import MiB
from lockbuild.times import parse_time

ECOSYSTEM = "PyPI"
MAX_RECORD = 8 * MiB  # a record with a long explicit version list is a few hundred KiB
MAX_LIST = 20_000  # aliases, affected entries, ranges, events, severities
MAX_VERSIONS = 200_000  # one affected entry's explicit versions
MAX_TEXT = MiB  # one string
EventKind = Literal["introduced", "fixed", "last_affected", "limit"]
EVENT_KINDS: tuple[EventKind, ...] = ("introduced", "fixed", "last_affected", "limit")


@dataclass(frozen=True)
class Event:
    kind: EventKind
    version: str


@dataclass(frozen=True)
class Range:
    type: str  # ECOSYSTEM or SEMVER (GIT ranges are kept but never match a package version)
    events: tuple[Event, ...]


@dataclass(frozen=True)
class Affected:
    name: str  # PEP 503 normalised
    ranges: tuple[Range, ...]
    versions: frozenset[str]  # as written
    parsed: frozenset[Version]  # those PEP 440 reads (2.0 is 2.0.0)


@dataclass(frozen=True)
class Severity:
    type: str  # CVSS_V3, CVSS_V4, ...
    score: str


@dataclass(frozen=True)
class OsvRecord:
    """One OSV record: what matching and the report need, and the record as received (``raw``)."""

    id: str
    modified: str
    published: str
    withdrawn: str
    aliases: tuple[str, ...]
    summary: str
    severity: tuple[Severity, ...]
    label: str  # database_specific.severity where the database gives one (GHSA: LOW … CRITICAL), else ""
    affected: tuple[Affected, ...]  # PyPI entries only
    raw: Mapping[str, JSON]

    @property
    def cves(self) -> tuple[str, ...]:
        return tuple(a for a in self.aliases if a.startswith("CVE-"))

    def severity_text(self) -> str:
        parts = [self.label] if self.label else []
        parts += [f"{s.type} {s.score}" for s in self.severity]
        return "; ".join(parts) or "unrated"

    def fixed_in(self, name: str) -> tuple[str, ...]:
        """The versions that fix it for package ``name`` (the ``fixed`` events of its PyPI ranges)."""
        n = canonicalize_name(name)
        out = {e.version for a in self.affected if a.name == n for r in a.ranges for e in r.events if e.kind == "fixed"}
        return tuple(sorted(out, key=_sort_key))

    def matches(self, name: str, version: str) -> bool:
        """Whether this record says ``name`` ``version`` (PyPI) is affected, by OSV's rule."""
        if self.withdrawn:
            return False
        n = canonicalize_name(name)
        v = _version(version)
        for a in self.affected:
            if a.name != n:
                continue
            if version in a.versions or (v is not None and v in a.parsed):
                return True
            if v is not None and any(_in_range(v, r) for r in a.ranges):
                return True
        return False


def _version(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None


def _sort_key(text: str) -> tuple[int, Version | str]:
    v = Version("0") if text == "0" else _version(text)
    return (0, v) if v is not None else (1, text)


def _in_range(v: Version, r: Range) -> bool:
    """OSV's evaluation of one ECOSYSTEM/SEMVER range: events sorted by version, introduced turns
    "affected" on at or above it, fixed turns it off at or above it, last_affected off above it; a limit
    at or below the version rules the range out."""
    if r.type not in ("ECOSYSTEM", "SEMVER"):
        return False
    events = sorted(r.events, key=lambda e: _sort_key(e.version))
    if any(e.kind == "limit" and e.version != "*" and v >= Version(e.version) for e in events):
        return False
    affected = False
    for e in events:
        at = Version("0") if e.version == "0" else Version(e.version)
        if e.kind == "introduced" and (e.version == "0" or v >= at):
            affected = True
        elif (e.kind == "fixed" and v >= at) or (e.kind == "last_affected" and v > at):
            affected = False
    return affected


# --- the strict reader -------------------------------------------------------------------------


def _bad(where: str, expected: str, found: object) -> AdvisoryDataError:
    shown = repr(found)[:80] if not isinstance(found, (dict, list)) else type(found).__name__
    return AdvisoryDataError(f"{where}: expected {expected}, found {shown}.")


def _text(obj: Mapping[str, Any], key: str, where: str, *, required: bool = False) -> str:
    if key not in obj:
        if required:
            raise AdvisoryDataError(f"{where}: the field {key!r} is missing; expected it, as every OSV record has.")
        return ""
    value = obj[key]
    if not isinstance(value, str) or len(value) > MAX_TEXT:
        raise _bad(f"{where}.{key}", f"a string of at most {MAX_TEXT} characters", value)
    return value


def _list(obj: Mapping[str, Any], key: str, where: str, limit: int = MAX_LIST) -> list[Any]:
    value = obj.get(key, [])
    if not isinstance(value, list):
        raise _bad(f"{where}.{key}", "a list", value)
    if len(value) > limit:
        raise AdvisoryDataError(f"{where}.{key} has {len(value)} entries; expected at most {limit}.")
    return value


def _object(value: object, where: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise _bad(where, "an object", value)
    return value


def _strings(obj: Mapping[str, Any], key: str, where: str, limit: int = MAX_LIST) -> tuple[str, ...]:
    out = _list(obj, key, where, limit)
    for i, s in enumerate(out):
        if not isinstance(s, str) or len(s) > 1024:
            raise _bad(f"{where}.{key}[{i}]", "a string of at most 1024 characters", s)
    return tuple(out)


def _timestamp(obj: Mapping[str, Any], key: str, where: str, *, required: bool = False) -> str:
    text = _text(obj, key, where, required=required)
    if text and (len(text) > 40 or (t := parse_time(text)) is None or t.tzinfo is None):
        raise _bad(f"{where}.{key}", "an RFC 3339 time with a zone (2026-01-02T00:00:00Z)", text)
    return text


def _pep440(text: str, where: str) -> str:
    if text == "0" or _version(text) is not None:
        return text
    raise AdvisoryDataError(
        f"{where}: expected a PEP 440 version (a PyPI range is ordered by PEP 440), found {text!r}."
    )


def _range(obj: Mapping[str, Any], where: str, pypi: bool) -> Range:
    kind = _text(obj, "type", where, required=True)
    if kind not in ("ECOSYSTEM", "SEMVER", "GIT"):
        raise _bad(f"{where}.type", "ECOSYSTEM, SEMVER or GIT", kind)
    raw_events = _list(obj, "events", where)
    if not raw_events:
        raise AdvisoryDataError(f"{where}.events is empty; expected at least one event, as OSV requires.")
    events = []
    for i, e in enumerate(raw_events):
        e = _object(e, f"{where}.events[{i}]")
        if len(e) != 1 or next(iter(e)) not in EVENT_KINDS:
            raise AdvisoryDataError(
                f"{where}.events[{i}]: expected one of {', '.join(EVENT_KINDS)}, found {sorted(e)}."
            )
        key: EventKind = next(k for k in EVENT_KINDS if k in e)
        version = _text(e, key, f"{where}.events[{i}]")
        if pypi and kind != "GIT" and not (key == "limit" and version == "*"):
            version = _pep440(version, f"{where}.events[{i}].{key}")
        events.append(Event(key, version))
    return Range(kind, tuple(events))


def _affected(obj: Mapping[str, Any], where: str) -> Affected | None:
    if "package" not in obj:
        return None  # an entry without a package (a commit range only) names no PyPI version
    pkg = _object(obj["package"], f"{where}.package")
    eco = _text(pkg, "ecosystem", f"{where}.package", required=True)
    name = _text(pkg, "name", f"{where}.package", required=True)
    if eco != ECOSYSTEM:
        return None
    ranges = tuple(
        _range(_object(r, f"{where}.ranges[{i}]"), f"{where}.ranges[{i}]", True)
        for i, r in enumerate(_list(obj, "ranges", where))
    )
    versions = frozenset(_strings(obj, "versions", where, MAX_VERSIONS))
    parsed = frozenset(v for v in map(_version, versions) if v is not None)
    return Affected(canonicalize_name(name), ranges, versions, parsed)


def parse_record(data: object, *, where: str) -> OsvRecord:
    """One OSV record from its parsed JSON; AdvisoryDataError names the field that is not OSV's."""
    obj = _object(data, where)
    rid = _text(obj, "id", where, required=True)
    if not rid or len(rid) > 200 or not rid.isprintable() or any(c in rid for c in "/\\ "):
        raise _bad(f"{where}.id", "an OSV id such as GHSA-xxxx-xxxx-xxxx or PYSEC-2024-1", rid)
    where = f"{where} ({rid})"
    severity = []
    for i, s in enumerate(_list(obj, "severity", where)):
        s = _object(s, f"{where}.severity[{i}]")
        severity.append(Severity(_text(s, "type", where, required=True), _text(s, "score", where, required=True)))
    label = ""
    db = obj.get("database_specific")
    if isinstance(db, dict) and isinstance(db.get("severity"), str):
        label = str(db["severity"])[:40]
    affected = []
    for i, a in enumerate(_list(obj, "affected", where)):
        got = _affected(_object(a, f"{where}.affected[{i}]"), f"{where}.affected[{i}]")
        if got is not None:
            affected.append(got)
    return OsvRecord(
        id=rid,
        modified=_timestamp(obj, "modified", where, required=True),
        published=_timestamp(obj, "published", where),
        withdrawn=_timestamp(obj, "withdrawn", where),
        aliases=_strings(obj, "aliases", where),
        summary=_text(obj, "summary", where),
        severity=tuple(severity),
        label=label,
        affected=tuple(affected),
        raw=obj,
    )


def read_record(raw: bytes, *, where: str) -> OsvRecord:
    """A record from its JSON bytes, bounded (size and depth first)."""
    return parse_record(loads_json(raw, what=where, max_bytes=MAX_RECORD, error=AdvisoryDataError), where=where)


def record_json(record: OsvRecord) -> str:
    """The record as received, as one canonical JSON text (what the report carries)."""
    return json.dumps(record.raw, sort_keys=True, separators=(",", ":"))


def findings_for(records: Sequence[OsvRecord], packages: Sequence[tuple[str, str]]) -> list[tuple[OsvRecord, str, str]]:
    """Each (record, name, version) where a record applies to a package, by id then name."""
    out = [(r, n, v) for r in records for n, v in packages if r.matches(n, v)]
    return sorted(out, key=lambda t: (t[0].id, canonicalize_name(t[1]), t[2]))
