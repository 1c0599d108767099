"""The report's signature: its statement, and the report as a signed thing behind the one trust port.

The statement has a bundle statement's shape about the report file (its own subject), plus
``bundle-sha256`` and ``queried``, which bind it to its bundle and its time. :class:`ReportFile` is plain
I/O for ``trust/opener.py::decide``, which alone judges it."""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from lockbuild import fsio
from lockbuild.bundle.manifest import Manifest
from lockbuild.documents import JSON
from lockbuild.errors import AdvisoryDataError, IntegrityError, SignatureError
from lockbuild.fsio import read_regular
from lockbuild.limits import DEFAULT_LIMITS, Limits
from lockbuild.times import iso
from lockbuild.trust.opener import counted_blocks, decide
from lockbuild.trust.policy import FileDigests
from lockbuild.trust.source import SizeCheck, digest_signed_file, signature_path
from lockbuild.trust.statement import Statement
from lockbuild.trust.truststore import TrustStore
from lockbuild.vulns.cdx import CHECKED, MAX_REPORT, NOT_CHECKED, VulnReport, read_report, report_name


def report_statement(manifest: Manifest, report: bytes, *, bundle_sha256: str, queried: dt.datetime) -> Statement:
    """What the signing process signs about a report of the bundle with ``manifest``."""
    digest = hashlib.sha256(report).hexdigest()
    return Statement(
        report_name(manifest.bundle_name),
        manifest.engine,
        manifest.version,
        manifest.variant,
        digest,
        len(report),
        digest,
        manifest.serial,
        None,
        bundle_sha256,
        queried,
    )


def prehash(report: bytes) -> bytes:
    """minisign's prehash (BLAKE2b-512) of the report: what its ED block signs."""
    return hashlib.blake2b(report, digest_size=64).digest()


def place_report(out: Path, name: str, report: bytes, block: str) -> tuple[Path, Path]:
    """The report and its signature beside the bundle, each replaced whole (a newer look-up's report
    replaces the older one; the bundle is not touched)."""
    path = out / name
    fsio.write_replacing(path, report)
    fsio.write_replacing(signature_path(path), block.encode("utf-8"))
    return path, signature_path(path)


class ReportFile:
    """``NAME.lbz.vulns.cdx.json`` with its ``.minisig``: the report is the signed file and its own subject.
    ``name``: the file name its statements must name (a store keeps it under another)."""

    def __init__(self, path: Path, name: str | None = None) -> None:
        self.path = path
        self.label = str(path)
        self.file_name: str | None = name or path.name
        self.subject = f"the report {path.name}"

    def signature_blocks(self, limits: Limits = DEFAULT_LIMITS) -> bytes:
        where = signature_path(self.path)
        try:
            return read_regular(where, what="signature file", max_size=limits.max_signature_file, error=SignatureError)
        except FileNotFoundError:
            raise SignatureError(
                f"no signature file {where}; expected the report's .minisig beside it.",
                tip="Copy the report's .minisig with it, or refresh it: lockbuild report BUNDLE --key K.",
            ) from None

    def file_digests(self, check: SizeCheck, limits: Limits = DEFAULT_LIMITS) -> FileDigests:
        return digest_signed_file(self.path, limits, check, prehash=False, what="report")

    def manifest_bytes(self, limits: Limits = DEFAULT_LIMITS, signed_sha256: str | None = None) -> bytes:
        try:
            return read_regular(self.path, what="vulnerability report", max_size=MAX_REPORT, error=IntegrityError)
        except FileNotFoundError:
            raise IntegrityError(f"the report {self.path} vanished while it was checked.") from None


@dataclass(frozen=True)
class CheckedReport:
    """A report whose signatures met the policy: what it says, its exact bytes and the blocks that counted."""

    report: VulnReport
    data: bytes
    signatures: bytes


def signed_report(path: Path, name: str, store: TrustStore, bundle_sha256: str) -> CheckedReport | None:
    """The report at ``path`` after the one trust decision (``decide``) met the policy, bound to the bundle
    whose signed sha256 is ``bundle_sha256`` and to the query time its statement signs; None when there is
    no report there. SignatureError (exit 3) when its signatures fall short or it is another bundle's."""
    if not path.exists() and not path.is_symlink():
        return None
    try:
        d = decide(ReportFile(path, name), store)
    except IntegrityError as exc:  # an altered or cut report: its signatures do not hold (exit 3 for audit)
        raise SignatureError(f"the report {path.name}: {exc.message}", tip=exc.tip) from None
    if d.statement.bundle_sha256 != bundle_sha256 or d.statement.queried is None:
        raise SignatureError(
            f"the report {path.name} is signed for the bundle with sha256 {d.statement.bundle_sha256}; expected "
            f"{bundle_sha256}, the bundle audited.",
            tip="Use the report published with this bundle, or refresh it: lockbuild report BUNDLE --key K.",
        )
    report = read_report(d.subject_bytes, where=f"the report {path.name}")
    if report.bundle_sha256 != bundle_sha256 or report.queried != d.statement.queried:
        raise SignatureError(f"the report {path.name} says another bundle or query time than its signature.")
    # what a store keeps: the blocks that counted, as for a bundle
    return CheckedReport(report, d.subject_bytes, counted_blocks(d.evaluation, d.blocks))


def glance(path: Path | None) -> dict[str, JSON] | None:
    """What a kept report says, its signature NOT checked (``inspect`` and ``store list`` show it; ``audit``
    judges it): status, as-of, the number of records found; None when there is none."""
    if path is None:
        return None
    try:
        raw = read_regular(path, what="vulnerability report", max_size=MAX_REPORT, error=AdvisoryDataError)
        r = read_report(raw, where=f"the report {path.name}")
    except FileNotFoundError:
        return None
    except AdvisoryDataError as exc:
        return {"status": "unreadable", "reason": exc.message}
    found = len({rid for rid, _, _ in r.findings})
    return {"status": CHECKED if r.checked else NOT_CHECKED, "queried": iso(r.queried), "known": found}


def glance_text(g: Mapping[str, JSON] | None) -> str:
    """One line for :func:`glance`'s answer."""
    if g is None:
        return "vulnerabilities: no report"
    if g["status"] == CHECKED:
        return f"vulnerabilities: {g['known']} known as of {g['queried']} (report not checked here: use audit)"
    return f"vulnerabilities: {g['status']} ({g.get('reason') or 'as of ' + str(g.get('queried'))})"
