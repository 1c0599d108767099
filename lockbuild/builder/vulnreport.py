"""The build's vulnerability look-up and report: started beside the downloads, read before signing.

One :class:`Checks` per command: a look-up per plan on its own thread (``fetch/osvclient.py``), the
one line each build prints, the refusal ``--fail-on-vulnerabilities`` asks for (before anything is
signed), and each report with the statement the signing process signs in the same call as the bundles.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from lockbuild.builder.pack import UnsignedBundle, sbom
from lockbuild.builder.plan import Plan
from lockbuild.bundle.manifest import Manifest
from lockbuild.documents import JSON
from lockbuild.errors import VulnerableError
from lockbuild.fetch.osvclient import Lookup, PendingLookup
from lockbuild.settings import Settings
from lockbuild.trust.statement import Statement
from lockbuild.vulns.cdx import Finding, Sbom, Summary, make_report, read_sbom, report_name
from lockbuild.vulns.signed import prehash, report_statement


def summary_of(lookup: Lookup) -> Summary:
    found = tuple(Finding(r, n, v) for r, n, v in lookup.findings())
    return Summary(lookup.checked, lookup.reason, lookup.service, lookup.queried, len(lookup.packages), found)


@dataclass(frozen=True)
class ReportToSign:
    name: str
    data: bytes
    statement: Statement

    @property
    def item(self) -> tuple[bytes, str]:
        return prehash(self.data), self.statement.to_comment()


def report_to_sign(summary: Summary, bom: Sbom, manifest: Manifest, bundle_sha256: str) -> ReportToSign:
    data = make_report(summary, bom, bundle=manifest.bundle_name, version=manifest.version, bundle_sha256=bundle_sha256)
    statement = report_statement(manifest, data, bundle_sha256=bundle_sha256, queried=summary.queried)
    return ReportToSign(report_name(manifest.bundle_name), data, statement)


class Checks:
    """The look-ups of a command's plans (none when LOCKBUILD_OSV_URL is none)."""

    def __init__(self, settings: Settings, plans: Sequence[Plan]) -> None:
        self.on = settings.osv_url is not None
        self.boms = [read_sbom(sbom(p)) for p in plans] if self.on else []
        self.pending = [PendingLookup(settings, b.packages) for b in self.boms]
        self._summaries: list[Summary] | None = None

    def summaries(self) -> list[Summary]:
        if self._summaries is None:
            self._summaries = [summary_of(p.result()) for p in self.pending]
        return self._summaries

    def note(self, n: int) -> str:
        """The n-th build's line, on a line of its own under the build's (nothing when not asked)."""
        return f"\n  {self.summaries()[n].line()}" if self.on else ""

    def json_for(self, n: int, reports: Sequence[Path]) -> dict[str, JSON]:
        """The n-th build's look-up and report under ``--json`` (nothing when not asked)."""
        if not self.on:
            return {}
        return {"vulnerabilities": self.summaries()[n].to_json(), "vulnerability_report": str(reports[n])}

    def refuse_findings(self, plans: Sequence[Plan], *, asked: bool) -> None:
        """``--fail-on-vulnerabilities`` (``asked``): VulnerableError (exit 7) when any build has a finding."""
        if not asked:
            return
        bad = [(p, s) for p, s in zip(plans, self.summaries(), strict=True) if s.findings]
        if bad:
            raise VulnerableError(
                "known vulnerabilities, and --fail-on-vulnerabilities: "
                + "; ".join(f"{p.build.id}: {s.line()}" for p, s in bad)
                + ". No bundle was written.",
                tip="Raise the versions named in the recipe (or its cut-off), or build without "
                "--fail-on-vulnerabilities.",
            )

    def reports(self, written: Sequence[UnsignedBundle]) -> list[ReportToSign]:
        if not self.on:
            return []
        return [
            report_to_sign(s, b, w.manifest, w.digests.whole)
            for s, b, w in zip(self.summaries(), self.boms, written, strict=True)
        ]


def place_all(reports: Sequence[ReportToSign], blocks: Sequence[str], out: Path) -> list[Path]:
    from lockbuild.vulns.signed import place_report

    return [place_report(out, r.name, r.data, b)[0] for r, b in zip(reports, blocks, strict=True)]
