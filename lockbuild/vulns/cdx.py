"""The vulnerability report beside a bundle: a standalone CycloneDX BOM (pure: written and read here).

``NAME.lbz.vulns.cdx.json``: the service, the query time, the bundle's sha256, one entry per OSV record
pointing at the bundle's SBOM components by BOM-link. A look-up that did not happen says "not checked"
with its reason, never an empty list of findings."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

from packaging.utils import canonicalize_name

from lockbuild import __version__
from lockbuild.documents import JSON, loads_json
from lockbuild.errors import AdvisoryDataError
from lockbuild.limits import MiB
from lockbuild.times import iso, parse_time
from lockbuild.vulns.osv import OsvRecord, parse_record, record_json

SUFFIX = ".vulns.cdx.json"
MAX_REPORT = 64 * MiB
CHECKED, NOT_CHECKED = "checked", "not checked"
_RATING = {"CVSS_V2": "CVSSv2", "CVSS_V3": "CVSSv3", "CVSS_V4": "CVSSv4"}
_LABEL = {"critical": "critical", "high": "high", "moderate": "medium", "medium": "medium", "low": "low"}


def report_name(bundle_name: str) -> str:
    return bundle_name + SUFFIX


@dataclass(frozen=True)
class Sbom:
    """What the report needs of a bundle's SBOM: its BOM-link base and each PyPI component's bom-refs."""

    serial: str  # urn:uuid:...
    version: int
    refs: Mapping[tuple[str, str], tuple[str, ...]]  # (normalised name, version) -> bom-refs

    @property
    def packages(self) -> list[tuple[str, str]]:
        return sorted(self.refs)

    def link(self, ref: str) -> str:
        return f"urn:cdx:{self.serial.removeprefix('urn:uuid:')}/{self.version}#{quote(ref, safe='')}"


def read_sbom(raw: bytes) -> Sbom:
    """The bundle's SBOM (``sbom.cdx.json``, written by the builder)."""
    doc = loads_json(raw, what="the bundle's SBOM", max_bytes=MAX_REPORT, error=AdvisoryDataError)
    if not isinstance(doc, dict) or not isinstance(doc.get("serialNumber"), str):
        raise AdvisoryDataError("the bundle's SBOM has no serialNumber; expected the CycloneDX SBOM lockbuild writes.")
    refs: dict[tuple[str, str], list[str]] = {}
    for c in doc.get("components", []):
        purl = c.get("purl", "") if isinstance(c, dict) else ""
        if isinstance(purl, str) and purl.startswith("pkg:pypi/") and isinstance(c.get("bom-ref"), str):
            key = (canonicalize_name(str(c.get("name", ""))), str(c.get("version", "")))
            refs.setdefault(key, []).append(c["bom-ref"])
    version = doc.get("version", 1)
    return Sbom(doc["serialNumber"], version if isinstance(version, int) else 1, {k: tuple(v) for k, v in refs.items()})


@dataclass(frozen=True)
class Finding:
    record: OsvRecord
    name: str
    version: str

    @property
    def fixed(self) -> tuple[str, ...]:
        return self.record.fixed_in(self.name)

    def line(self) -> str:
        fixed = f", fixed in {', '.join(self.fixed)}" if self.fixed else ", no fixed version"
        return f"{self.record.id} ({self.name} {self.version}{fixed})"

    def to_json(self) -> dict[str, JSON]:
        return {
            "id": self.record.id,
            "aliases": list(self.record.aliases),
            "package": self.name,
            "version": self.version,
            "severity": self.record.severity_text(),
            "summary": self.record.summary,
            "fixed_in": list(self.fixed),
        }


@dataclass(frozen=True)
class Summary:
    """What the build says of one bundle's look-up (one line; ``--json`` carries the rest)."""

    checked: bool
    reason: str
    service: str
    queried: dt.datetime
    packages: int
    findings: tuple[Finding, ...]

    def line(self) -> str:
        if not self.checked:
            return f"vulnerabilities not checked ({self.reason})"
        n = len(self.findings)
        head = f"{n} known vulnerabilit{'y' if n == 1 else 'ies'} in {self.packages} packages as of {iso(self.queried)}"
        return head + (": " + ", ".join(f.line() for f in self.findings) if n else "")

    def to_json(self) -> dict[str, JSON]:
        return {
            "status": CHECKED if self.checked else NOT_CHECKED,
            "reason": self.reason,
            "service": self.service,
            "queried": iso(self.queried),
            "packages": self.packages,
            "findings": [f.to_json() for f in self.findings],
        }


def _prop(name: str, value: str) -> dict[str, str]:
    return {"name": f"lockbuild:{name}", "value": value}


def _ratings(r: OsvRecord) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if r.label.lower() in _LABEL:
        out.append({"source": {"name": "OSV"}, "severity": _LABEL[r.label.lower()]})
    for s in r.severity:
        method = _RATING.get(s.type, "other")
        if method == "CVSSv3" and s.score.startswith("CVSS:3.1/"):
            method = "CVSSv31"
        out.append({"source": {"name": "OSV"}, "method": method, "vector": s.score})
    return out


def _vulnerability(record: OsvRecord, hits: Sequence[Finding], sbom: Sbom, service: str) -> dict[str, Any]:
    affects: list[dict[str, Any]] = []
    props = []
    for f in hits:
        for ref in sbom.refs.get((canonicalize_name(f.name), f.version), ()):
            affects.append({"ref": sbom.link(ref), "versions": [{"version": f.version, "status": "affected"}]})
        props.append(_prop(f"fixed-in:{f.name}", " ".join(f.fixed) or "none"))
    fixes = [f"{f.name} {', '.join(f.fixed)}" for f in hits if f.fixed]
    v: dict[str, Any] = {
        "bom-ref": f"vuln:{record.id}",
        "id": record.id,
        "source": {"name": "OSV", "url": f"{service}/v1/vulns/{quote(record.id, safe='')}"},
        "references": [{"id": a, "source": {"name": "OSV"}} for a in record.aliases],
        "ratings": _ratings(record),
        "description": record.summary,
        "affects": affects,
        "properties": [*props, _prop("osv-record", record_json(record))],
    }
    if fixes:
        v["recommendation"] = "Upgrade to a fixed version: " + "; ".join(fixes) + "."
    return v


def make_report(summary: Summary, sbom: Sbom, *, bundle: str, version: str, bundle_sha256: str) -> bytes:
    """The report's bytes (deterministic for the same look-up and bundle)."""
    serial = uuid.uuid5(uuid.NAMESPACE_URL, f"lockbuild-vulns:{bundle_sha256}:{iso(summary.queried)}")
    by_id: dict[str, list[Finding]] = {}
    for f in summary.findings:
        by_id.setdefault(f.record.id, []).append(f)
    props = [
        _prop("status", CHECKED if summary.checked else NOT_CHECKED),
        _prop("osv-service", summary.service),
        _prop("queried", iso(summary.queried)),
        _prop("packages", str(summary.packages)),
        _prop("bundle-sha256", bundle_sha256),
        _prop("sbom", f"urn:cdx:{sbom.serial.removeprefix('urn:uuid:')}/{sbom.version}"),
    ]
    if not summary.checked:
        props.append(_prop("reason", summary.reason))
    doc: dict[str, Any] = {
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "serialNumber": f"urn:uuid:{serial}",
        "version": 1,
        "metadata": {
            "timestamp": iso(summary.queried),
            "tools": {"components": [{"type": "application", "name": "lockbuild", "version": __version__}]},
            "component": {
                "type": "application",
                "bom-ref": "bundle",
                "name": bundle,
                "version": version,
                "hashes": [{"alg": "SHA-256", "content": bundle_sha256}],
            },
            "properties": props,
        },
        "vulnerabilities": [_vulnerability(fs[0].record, fs, sbom, summary.service) for _, fs in sorted(by_id.items())],
    }
    return (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()


@dataclass(frozen=True)
class VulnReport:
    """A report read back (after its signature met the policy): what it says was checked and found."""

    checked: bool
    reason: str
    service: str
    queried: dt.datetime
    bundle_sha256: str
    findings: tuple[tuple[str, str, str], ...]  # (record id, name, version) as the report states them
    records: tuple[OsvRecord, ...]


def _props(obj: Mapping[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for p in obj.get("properties", []) if isinstance(obj.get("properties", []), list) else []:
        if isinstance(p, dict) and isinstance(p.get("name"), str) and isinstance(p.get("value"), str):
            out.setdefault(p["name"].removeprefix("lockbuild:"), p["value"])
    return out


def read_report(raw: bytes, *, where: str) -> VulnReport:
    """A report lockbuild wrote, strictly: its status, query time, bundle and findings."""
    try:
        return _read_report(raw, where)
    except (AttributeError, TypeError, KeyError):  # a shape lockbuild never writes
        raise AdvisoryDataError(f"{where} is not shaped as the reports lockbuild writes.") from None


def _read_report(raw: bytes, where: str) -> VulnReport:
    doc = loads_json(raw, what=where, max_bytes=MAX_REPORT, error=AdvisoryDataError)
    meta = doc.get("metadata") if isinstance(doc, dict) else None
    props = _props(meta) if isinstance(meta, dict) else {}
    queried = parse_time(props.get("queried", ""))
    if props.get("status") not in (CHECKED, NOT_CHECKED) or queried is None or "bundle-sha256" not in props:
        raise AdvisoryDataError(f"{where} is not a lockbuild vulnerability report (no status, query time or bundle).")
    findings: list[tuple[str, str, str]] = []
    records: list[OsvRecord] = []
    vulns = doc.get("vulnerabilities", [])
    for i, v in enumerate(vulns if isinstance(vulns, list) else []):
        vp = _props(v) if isinstance(v, dict) else {}
        raw_record = loads_json(
            vp.get("osv-record", "").encode(), what=f"{where} entry {i}", max_bytes=MAX_REPORT, error=AdvisoryDataError
        )
        record = parse_record(raw_record, where=f"{where} entry {i}")
        records.append(record)
        for a in v.get("affects", []):
            for ver in a.get("versions", []) if isinstance(a, dict) else []:
                ref = str(a.get("ref", ""))
                name = ref.split("#", 1)[-1]
                findings.append((record.id, _name_of(name), str(ver.get("version", ""))))
    return VulnReport(
        props["status"] == CHECKED,
        props.get("reason", ""),
        props.get("osv-service", ""),
        queried,
        props["bundle-sha256"],
        tuple(sorted(set(findings))),
        tuple(records),
    )


def _name_of(fragment: str) -> str:
    """The package name in a BOM-link's fragment (``pkg%3Apypi%2FNAME%40VERSION...``)."""
    purl = unquote(fragment).removeprefix("build:")
    return canonicalize_name(purl.removeprefix("pkg:pypi/").split("@", 1)[0])
