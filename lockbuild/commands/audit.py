"""Vulnerability commands: audit (offline, for a security officer) and report (refresh a bundle's report)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from lockbuild.commands.clikit import (
    Command,
    emit,
    insecure_option,
    json_option,
    settings_of,
    setup_output,
    store_option,
    take_password,
    trust_option,
)
from lockbuild.documents import JSON
from lockbuild.times import iso

if TYPE_CHECKING:
    from lockbuild.vulns.cdx import VulnReport

EXIT_FINDINGS = 7


def _installed(ref: str, root: Path) -> tuple[str, str, list[tuple[str, str]]]:
    """An installed engine's kept manifest (the install checked its signatures): its name, sha256 and
    packages."""
    from lockbuild.bundle.manifestparse import parse_manifest
    from lockbuild.documents import loads_json
    from lockbuild.errors import LockbuildError
    from lockbuild.fsio import read_regular
    from lockbuild.install.marker import MARKER
    from lockbuild.vulns.findings import packages_of

    engine, _, build = ref.partition("/")
    record = root / engine / build / "lockbuild"
    try:
        manifest = parse_manifest(read_regular(record / "bundle.toml", what="kept manifest", max_size=16 << 20))
        raw = read_regular(root / engine / build / MARKER, what="marker", max_size=16 << 20)
        marker = loads_json(raw, what="the marker", max_bytes=16 << 20, error=LockbuildError)
    except FileNotFoundError:
        raise LockbuildError(
            f"no installed engine {ref} under {root}.", tip="lockbuild list --root R names what is installed."
        ) from None
    sha256 = str(marker.get("bundle_sha256", "")) if isinstance(marker, dict) else ""
    return manifest.bundle_name, sha256, packages_of(manifest)


@click.command(
    cls=Command, epilog="Example: lockbuild audit vllm-0.11.0-cu128-x86_64.lbz --osv all.zip --vex site.vex.json"
)
@click.argument("source", metavar="SOURCE")
@click.option(
    "--osv",
    "db",
    type=click.Path(path_type=Path),
    help="The OSV database carried in: a directory of OSV JSON records, or osv.dev's PyPI/all.zip.",
)
@click.option(
    "--vex",
    "vex_files",
    multiple=True,
    type=click.Path(path_type=Path, dir_okay=False),
    help="An OpenVEX document: not_affected (with its justification) or fixed hides a finding. Repeatable.",
)
@trust_option
@store_option
@click.option(
    "--root",
    "root",
    type=click.Path(path_type=Path, file_okay=False),
    help="Audit the engine ENGINE/VERSION-VARIANT installed under this root.",
)
@json_option
@click.pass_context
def audit(
    ctx: click.Context,
    source: str,
    db: Path | None,
    vex_files: tuple[Path, ...],
    trust_dir: Path | None,
    store_dir: Path | None,
    root: Path | None,
    as_json: bool,
) -> int:
    """Check a build's packages against known vulnerabilities, offline.

    \b
    SOURCE is a .lbz (its .minisig and its report NAME.lbz.vulns.cdx.json
    beside it), ENGINE/VERSION-VARIANT with --store DIR (the report kept by
    import), or ENGINE/VERSION-VARIANT with --root R (an installed engine).

    The bundle's and the report's signatures are checked against the trust directory first (exit 3). Each
    finding names its id, aliases, package and version, severity, fixed versions, and whether the signed
    report named it or it is new since the report's query time. Without --osv the report's own records are
    checked. Exit 0: nothing applies; 7: findings; 2: a bad database or VEX document; 3: signatures.
    """
    setup_output(ctx, as_json)
    from lockbuild.trust import load_trust_store
    from lockbuild.trust import trust_dir as resolve_trust_dir
    from lockbuild.vulns.cdx import report_name
    from lockbuild.vulns.database import load_database
    from lockbuild.vulns.findings import audit as run_audit
    from lockbuild.vulns.findings import packages_of, since_text
    from lockbuild.vulns.signed import signed_report
    from lockbuild.vulns.vex import read_vex

    report: VulnReport | None = None
    if root is not None:
        name, sha256, packages = _installed(source, root)
        note = "installed engine: its signatures were checked by install; no report is installed with it"
    else:
        from lockbuild.site.sources import named_source, report_place
        from lockbuild.trust import open_source

        trust = load_trust_store(resolve_trust_dir(trust_dir))
        with named_source(source, store=store_dir) as src:
            trusted = open_source(src, trust)
            name, sha256 = trusted.manifest.bundle_name, trusted.sha256
            packages = packages_of(trusted.manifest)
            where = report_place(src)
            checked = signed_report(where, report_name(name), trust, sha256) if where is not None else None
            report = checked.report if checked is not None else None
        note = f"signatures checked against {resolve_trust_dir(trust_dir)}"
    records = load_database(db) if db is not None else (report.records if report is not None else ())
    statements = [s for f in vex_files for s in read_vex(f)]
    found = run_audit(packages, records, report, statements)
    since = since_text(report)
    shown = [f for f in found if not f.hidden]
    data: dict[str, JSON] = {
        "source": source,
        "bundle": name,
        "sha256": sha256,
        "packages": len(packages),
        "database": str(db) if db is not None else "the signed report's records",
        "records": len(records),
        "report": None
        if report is None
        else {
            "status": "checked" if report.checked else "not checked",
            "queried": iso(report.queried),
            "service": report.service,
            "findings": len(report.findings),
        },
        "note": note,
        "findings": [f.to_json(since) for f in found],
        "open": len(shown),
        "hidden": len(found) - len(shown),
    }
    head = (
        f"{name}: {len(shown)} vulnerabilit{'y' if len(shown) == 1 else 'ies'} apply to {len(packages)} packages "
        f"({len(found) - len(shown)} hidden by VEX), checked against {data['database']} ({len(records)} records)"
    )
    report_line = (
        f"signed report: {'checked' if report.checked else 'not checked'} as of {iso(report.queried)}"
        if report is not None
        else "signed report: none beside it"
    )
    emit(ctx, data, "\n".join([head, report_line, *(f"  {f.line(since)}" for f in found)]))
    return EXIT_FINDINGS if shown else 0


@click.command(cls=Command, epilog="Example: lockbuild report dist/vllm-0.11.0-cu128-x86_64.lbz --key release.key")
@click.argument("bundle", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--key", type=click.Path(path_type=Path, dir_okay=False), required=True, help="minisign secret key.")
@click.option(
    "--allow-readable-key", is_flag=True, help="Use a secret key file that its group or other users can read."
)
@insecure_option
@json_option
@click.pass_context
def report(
    ctx: click.Context, bundle: Path, key: Path, allow_readable_key: bool, allow_insecure_http: bool, as_json: bool
) -> None:
    """Refresh a bundle's vulnerability report without rebuilding it: ask the OSV service (LOCKBUILD_OSV_URL)
    about every package in its SBOM and write NAME.lbz.vulns.cdx.json and its .minisig beside it, signed by
    the signing process (python -I -S), which alone reads the key."""
    setup_output(ctx, as_json)
    import tempfile

    from lockbuild.builder.vulnreport import report_to_sign, summary_of
    from lockbuild.fetch.osvclient import PendingLookup
    from lockbuild.settings import SettingsError
    from lockbuild.trust.sign import read_member_unverified, sign_in_fresh_process
    from lockbuild.vulns.cdx import read_sbom
    from lockbuild.vulns.signed import place_report

    settings = settings_of(ctx, allow_insecure_http)
    if settings.osv_url is None:
        raise SettingsError("LOCKBUILD_OSV_URL is none: there is no service to ask for a report.")
    password = take_password()
    with tempfile.TemporaryDirectory(prefix=".lockbuild-report-") as work:
        manifest, digests, sbom = read_member_unverified(bundle, "sbom.cdx.json", Path(work))
    bom = read_sbom(sbom)
    summary = summary_of(PendingLookup(settings, bom.packages).result())
    made = report_to_sign(summary, bom, manifest, digests.whole)
    signed = sign_in_fresh_process(key, [made.item], password=password, allow_readable_key=allow_readable_key)
    path, sig = place_report(bundle.parent, made.name, made.data, signed.blocks[0])
    emit(
        ctx,
        {
            "bundle": str(bundle),
            "sha256": digests.sha256,
            "report": str(path),
            "signature": str(sig),
            "vulnerabilities": summary.to_json(),
        },
        f"{bundle.name}: {summary.line()}\n  report -> {path} (signed by {signed.key_id_hex})",
    )


COMMANDS = (audit, report)
