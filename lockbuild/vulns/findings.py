"""The audit (pure): a build's packages against an offline database, beside its signed report and VEX.

Each finding says whether the signed report already named it (known at its query time) or is new since,
and whether a VEX statement hides it (``not_affected`` with its justification, or ``fixed``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)

from lockbuild.bundle.lockfiles import KIND as BUILD_KIND
from lockbuild.bundle.manifest import Manifest
from lockbuild.documents import JSON
from lockbuild.times import iso
from lockbuild.vulns.cdx import Finding, VulnReport
from lockbuild.vulns.osv import OsvRecord, findings_for
from lockbuild.vulns.vex import VexStatement, applicable


def packages_of(manifest: Manifest) -> list[tuple[str, str]]:
    """(normalised name, version) of every wheel, sdist and build dependency the signed manifest lists."""
    out = set()
    for m in manifest.members:
        if m.kind not in ("wheel", "sdist", BUILD_KIND):
            continue
        filename = m.path.rsplit("/", 1)[-1]
        try:
            if filename.endswith(".whl"):
                name, version, _, _ = parse_wheel_filename(filename)
            else:
                name, version = parse_sdist_filename(filename)
        except (InvalidWheelFilename, InvalidSdistFilename):
            continue  # a file no index names by its version (a recipe's source archive) is no PyPI package
        out.add((canonicalize_name(name), str(version)))
    return sorted(out)


@dataclass(frozen=True)
class AuditFinding:
    finding: Finding
    in_report: bool
    vex: VexStatement | None

    @property
    def hidden(self) -> bool:
        return self.vex is not None and self.vex.hides

    def to_json(self, since: str) -> dict[str, JSON]:
        return {
            **self.finding.to_json(),
            "known": "in the signed report" if self.in_report else f"new since {since}",
            "in_report": self.in_report,
            "hidden_by_vex": self.hidden,
            "vex": self.vex.why() if self.vex is not None else None,
        }

    def line(self, since: str) -> str:
        r = self.finding.record
        aliases = f" [{', '.join(r.aliases)}]" if r.aliases else ""
        fixed = ", ".join(self.finding.fixed) or "no fixed version"
        known = "in the signed report" if self.in_report else f"NEW since {since}"
        head = (
            f"{r.id}{aliases}: {self.finding.name} {self.finding.version}, {r.severity_text()}, fixed in {fixed}; "
            f"{known}"
        )
        if self.vex is None:
            return head
        return head + ("; hidden by VEX: " if self.hidden else "; VEX says ") + self.vex.why()


def audit(
    packages: Sequence[tuple[str, str]],
    records: Sequence[OsvRecord],
    report: VulnReport | None,
    vex: Sequence[VexStatement],
) -> tuple[AuditFinding, ...]:
    reported = (
        {(rid, canonicalize_name(n)) for rid, n, _ in report.findings}
        if report is not None and report.checked
        else set()
    )
    out = []
    for record, name, version in findings_for(records, packages):
        statement = applicable(vex, (record.id, *record.aliases), name, version)
        out.append(
            AuditFinding(Finding(record, name, version), (record.id, canonicalize_name(name)) in reported, statement)
        )
    return tuple(out)


def since_text(report: VulnReport | None) -> str:
    """How a finding's novelty is dated: the report's query time, or why there is none."""
    if report is None:
        return "the build (no signed report)"
    if not report.checked:
        return f"the build (its report says not checked: {report.reason})"
    return iso(report.queried)
