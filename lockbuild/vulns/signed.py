"""The report's signature: its statement, and the report as a signed thing behind the one trust port.

The statement is a bundle statement's shape (``trust/statement.py``) about the report file: ``file`` the
report's name, ``sha256``/``size``/``manifest-sha256`` the report's own (the report is its own subject),
the bundle's engine, version, variant and serial, and two fields that bind it to its bundle and its
time: ``bundle-sha256`` and ``queried``. :class:`ReportFile` is plain I/O for
``trust/opener.py::decide``, which alone judges it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from pathlib import Path

from lockbuild import fsio
from lockbuild.bundle.manifest import Manifest
from lockbuild.errors import IntegrityError, SignatureError
from lockbuild.fsio import read_regular
from lockbuild.limits import DEFAULT_LIMITS, Limits
from lockbuild.trust.policy import FileDigests
from lockbuild.trust.source import SizeCheck, digest_signed_file, signature_path
from lockbuild.trust.statement import Statement
from lockbuild.vulns.report import MAX_REPORT, report_name


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
    """``NAME.lbz.vulns.cdx.json`` with its ``.minisig``: the report is the signed file and its own subject."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.label = str(path)
        self.file_name: str | None = path.name
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
