"""Builder commands: lock, fetch and build (online; recipe to signed bundle)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click

from lockbuild import fsio
from lockbuild.commands.clikit import (
    Command,
    build_option,
    emit,
    emit_warnings,
    expires_option,
    fail_on_vulnerabilities_option,
    insecure_option,
    jobs_option,
    json_option,
    progress_of,
    settings_of,
    setup_output,
    take_password,
)
from lockbuild.documents import JSON
from lockbuild.proc.uvtool import uv_binary
from lockbuild.times import iso

if TYPE_CHECKING:  # the commands import the builder only when they run
    from lockbuild.builder.pack import Packed, UnsignedBundle
    from lockbuild.builder.plan import Plan
    from lockbuild.selftest.report import Report
    from lockbuild.vulns.cdx import Summary


REUSED_NOTE = " (uv's resolution remembered from an earlier lock; every pin checked on the index)"
fresh_lock_option = click.option(
    "--fresh-lock",
    is_flag=True,
    help="Run uv's resolution even when the cache remembers its answer for the same inputs (every pin is "
    "checked against the live index either way).",
)


def _with_provenance_report(plan: Plan, out: Path) -> tuple[Plan, str | None]:
    """The plan with the provenance warnings against the previous lock in OUT/VERSION-VARIANT,
    and the note saying when there was none to compare with."""
    from lockbuild.fetch.attestations import report

    got = report(plan.recipe.engine.name, plan.build.id, out / plan.build.id, plan.lock.files)
    return (dataclasses.replace(plan, warnings=(*plan.warnings, *got.warnings)) if got.warnings else plan), got.note


@click.command(cls=Command, epilog="Example: lockbuild lock bundles/vllm.toml --build cu128 --out locks/")
@click.argument("recipe", type=click.Path(path_type=Path, dir_okay=False))
@build_option
@click.option("--out", type=click.Path(path_type=Path, file_okay=False), required=True, help="Directory for the locks.")
@insecure_option
@fresh_lock_option
@json_option
@click.pass_context
def lock(
    ctx: click.Context,
    recipe: Path,
    build_spec: str | None,
    out: Path,
    allow_insecure_http: bool,
    fresh_lock: bool,
    as_json: bool,
) -> None:
    """Resolve a recipe's builds into hashed locks, as the index stood at each build's cut-off.

    Writes OUT/VERSION-VARIANT/ with requirements.txt (or pylock.toml for builds with a second index),
    extras.txt (the uv wheel and other bundled files, with sha256 and URL) and recipe.toml with as-of
    filled in. The primary index is LOCKBUILD_INDEX_URL (default PyPI).
    """
    setup_output(ctx, as_json)
    from lockbuild.builder.gpufit import measure_plan
    from lockbuild.builder.output import lock_json, plan_first_use, provenance_summary, write_plan_dir
    from lockbuild.builder.session import session
    from lockbuild.builder.vulnreport import Checks
    from lockbuild.recipe import load_recipe

    settings = dataclasses.replace(settings_of(ctx, allow_insecure_http), fresh_lock=fresh_lock)
    uv_binary()  # found once, before any thread starts (sysconfig is not thread-safe on 3.11)
    r = load_recipe(recipe)
    results: list[dict[str, JSON]] = []
    with session(settings, progress=progress_of(ctx)) as s:
        plans = [s.planner.plan(r, b) for b in r.select(build_spec)]
        fits = [measure_plan(p, s.cache) for p in plans]  # from the kept readings only: lock downloads nothing
    checks = Checks(settings, plans)  # on threads of their own, while the locks are written
    compared = [_with_provenance_report(p, out) for p in plans]  # each against the lock it replaces
    vulns: list[Summary | None] = [*checks.summaries()] or [None] * len(plans)
    for (plan, note), measured, v in zip(compared, fits, vulns, strict=True):
        write_plan_dir(plan, out)
        emit_warnings(ctx, plan.warnings)
        results.append(
            {
                **lock_json(plan),
                "provenance_note": note,
                **measured.to_json(),
                "vulnerabilities": v.to_json() if v else None,
            }
        )
    text = "\n".join(
        f"locked {plan.recipe.engine.name} {plan.build.id}: {len(plan.lock.files)} packages as of {iso(plan.as_of)} "
        f"-> {out / plan.build.id / plan.lock.format}"
        + (REUSED_NOTE if plan.resolution_reused else "")
        + provenance_summary(plan.lock.files)
        + (f"\n  provenance: {note}" if note else "")
        + f"\n  {measured.text()}"
        + (f"\n  {v.line()}" if v else "")
        + "".join(f"\n  first use: {u.line()}" for u in plan_first_use(plan))
        for (plan, note), measured, v in zip(compared, fits, vulns, strict=True)
    )
    emit(ctx, {"locks": results, "warnings": list(settings.warnings)}, text)


@click.command(cls=Command, epilog="Example: lockbuild fetch bundles/onnxruntime.toml --build cpu-py311 --out fetched/")
@click.argument("recipe", type=click.Path(path_type=Path, dir_okay=False))
@build_option
@click.option("--out", type=click.Path(path_type=Path, file_okay=False), required=True, help="Directory for the files.")
@jobs_option
@insecure_option
@fresh_lock_option
@json_option
@click.pass_context
def fetch(
    ctx: click.Context,
    recipe: Path,
    build_spec: str | None,
    out: Path,
    jobs: int,
    allow_insecure_http: bool,
    fresh_lock: bool,
    as_json: bool,
) -> None:
    """Lock, then download and verify every file a build needs (no bundle), for inspection.

    Files come through the content-addressed cache (LOCKBUILD_CACHE_DIR); each is checked against its
    sha256 and size. OUT/VERSION-VARIANT/ gets the lock, the recipe, wheels/, sdists/, source/, assets/, tools/.
    """
    setup_output(ctx, as_json)
    from lockbuild.builder.gpufit import measured_and_filled
    from lockbuild.builder.output import lock_json, write_plan_dir
    from lockbuild.builder.session import session
    from lockbuild.recipe import load_recipe

    settings = dataclasses.replace(settings_of(ctx, allow_insecure_http), fresh_lock=fresh_lock)
    uv_binary()  # found once, before any thread starts (sysconfig is not thread-safe on 3.11)
    r = load_recipe(recipe)
    results: list[dict[str, JSON]] = []
    lines: list[str] = []
    with session(settings, progress=progress_of(ctx), jobs=jobs) as s:
        for b in r.select(build_spec):
            plan, note = _with_provenance_report(s.planner.plan(r, b), out)
            emit_warnings(ctx, plan.warnings)
            paths, report = s.fetch(plan)
            plan, measured = measured_and_filled(plan, s.cache)  # a contradicted recipe: exit 2, nothing written
            write_plan_dir(plan, out, paths)
            lines.append(
                f"fetched {plan.recipe.engine.name} {plan.build.id}: {len(report.files)} files "
                f"({report.cached} cached) -> {out / plan.build.id}"
                + (f"\n  provenance: {note}" if note else "")
                + f"\n  {measured.text()}"
            )
            results.append(
                {
                    **lock_json(plan),
                    "provenance_note": note,
                    **measured.to_json(),
                    "files": len(report.files),
                    "cached": report.cached,
                    "downloaded_bytes": report.downloaded_bytes,
                    "seconds": round(report.seconds, 3),
                }
            )
    text = "\n".join(lines)
    emit(ctx, {"fetches": results, "warnings": list(settings.warnings)}, text)


@click.command(
    cls=Command,
    epilog="Example: lockbuild build bundles/onnxruntime.toml --build cpu-py311 --key release.key --out dist/",
)
@click.argument("recipe", type=click.Path(path_type=Path, dir_okay=False))
@build_option
@click.option("--key", type=click.Path(path_type=Path, dir_okay=False), required=True, help="minisign secret key.")
@click.option("--out", type=click.Path(path_type=Path, file_okay=False), required=True, help="Directory for bundles.")
@expires_option
@click.option("--threads", type=int, default=None, help="zstd workers (output is identical for any number).")
@jobs_option
@insecure_option
@fresh_lock_option
@click.option(
    "--self-test",
    "self_test",
    is_flag=True,
    help="Run `lockbuild test` on each bundle before it is signed, in the sandbox (its report follows).",
)
@click.option(
    "--trust",
    "trust_dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="With --self-test: also check the new signatures against this trust directory.",
)
@click.option(
    "--allow-readable-key",
    is_flag=True,
    help="Use a secret key file that its group or other users can read (refused otherwise).",
)
@fail_on_vulnerabilities_option
@json_option
@click.pass_context
def build(
    ctx: click.Context,
    recipe: Path,
    build_spec: str | None,
    key: Path,
    out: Path,
    expires: dt.datetime | None,
    threads: int | None,
    jobs: int,
    allow_insecure_http: bool,
    fresh_lock: bool,
    self_test: bool,
    trust_dir: Path | None,
    allow_readable_key: bool,
    fail_on_vulnerabilities: bool,
    as_json: bool,
) -> None:
    """Lock, fetch, pack and sign: OUT/ENGINE-VERSION-VARIANT-PLATFORM.lbz and .lbz.minisig.

    The bundle is bit-for-bit reproducible: the same recipe gives the same bytes on any machine. If any
    step fails, OUT gets nothing. The key's passphrase comes from LOCKBUILD_KEY_PASSWORD or a prompt.
    Other people's code (build backends, and with --self-test the engine and the recipe's commands) runs
    only in the sandbox and has exited before the key is read; the key is read, and the passphrase asked
    for, only in a fresh signing process (python -I -S) that loads nothing once it holds the key. Before
    anything is locked or downloaded, such a process opens and decrypts the key and exits (a typed
    passphrase is asked for then, and again to sign), so a bad key stops the build at once.
    """
    setup_output(ctx, as_json)
    from lockbuild.builder.gpufit import pack_measured
    from lockbuild.builder.pack import release
    from lockbuild.builder.session import session
    from lockbuild.builder.vulnreport import Checks, place_all
    from lockbuild.recipe import load_recipe
    from lockbuild.trust.sign import KeyFileSigner

    settings = dataclasses.replace(settings_of(ctx, allow_insecure_http), fresh_lock=fresh_lock)
    from lockbuild.recipe.modelrecipe import is_model_recipe_file

    if is_model_recipe_file(recipe):  # a [model] table: a Hugging Face revision (builder/modelbuild.py)
        build_model_cli(
            ctx,
            recipe,
            key=key,
            out=out,
            expires=expires,
            threads=threads,
            jobs=jobs,
            settings=settings,
            self_test=self_test,
            build_spec=build_spec,
            allow_readable_key=allow_readable_key,
        )
        return
    password = take_password()  # out of the environment before uv or anything else runs
    r = load_recipe(recipe)
    builds = r.select(build_spec)
    # The key opened and decrypted now, before anything is locked or downloaded and before any other
    # people's code starts, in a signing process that signs nothing and exits; it is read again to sign.
    key_signer = KeyFileSigner(key, password, allow_readable_key)
    checked = key_signer.check()
    uv_binary()  # found once, before any thread starts (sysconfig is not thread-safe on 3.11)
    progress = progress_of(ctx)
    results: list[dict[str, JSON]] = []
    with session(settings, progress=progress, jobs=jobs) as s:
        plans = []
        for b in builds:  # every lock first: uv and the index's answers are done with before any packing
            plan = s.planner.plan(r, b)
            emit_warnings(ctx, plan.warnings)
            plans.append(plan)
        checks = Checks(settings, plans)  # the vulnerability look-ups, beside the downloads
        written: list[UnsignedBundle] = []
        fits = []
        try:
            for n, plan in enumerate(plans, 1):  # fetched and packed at once, members in manifest order
                if len(plans) > 1:  # which of the builds the packing line below is about
                    progress.note(f"build {n} of {len(plans)}: {plan.build.id} ({plan.build.platform})")
                # the recipe's gpu checked against the binaries (exit 2) and filled in from them, before signing
                plans[n - 1], bundle, measured = pack_measured(plan, s.fetcher, out, threads=threads)
                written.append(bundle)
                fits.append(measured)
        except BaseException:
            for w in written:
                w.discard()
            raise
    try:
        # The self-test first, in its sandbox, on the unsigned bundles: all of it has exited before the key is read.
        reports = _self_test_before_signing(ctx, written) if self_test else None
        checks.refuse_findings(plans, asked=fail_on_vulnerabilities)
        vulns = checks.reports(written)  # signed in the same call as the bundles, placed after them
    except BaseException:
        for w in written:
            w.discard()
        raise
    # The key is read only now, and only in a fresh process; this one never holds it.
    packed_all, signer = release(written, key_signer, checked, expires=expires, extra=[v.item for v in vulns])
    signed = list(zip(plans, packed_all, strict=True))
    report_paths = place_all(vulns, signer.blocks[len(written) :], out)
    for (plan, packed), measured in zip(signed, fits, strict=True):
        results.append(
            {
                **_signed_json(packed, signer.key_id_hex),
                "as_of": iso(plan.as_of),
                "resolution_reused": plan.resolution_reused,
                "warnings": list(plan.warnings),
                "kept_signers": list(packed.kept_signers),
                "dropped_signers": list(packed.dropped_signers),
                **measured.to_json(),
                **checks.json_for(len(results), report_paths),
            }
        )

    def signatures_note(packed: Packed) -> str:
        note = ""
        if packed.kept_signers:
            note += f"\n  kept the signatures of {', '.join(packed.kept_signers)}: the bundle is byte-identical"
        if packed.dropped_signers:
            note += (
                f"\n  dropped the old signatures of {', '.join(packed.dropped_signers)}: the bundle changed,"
                " so they must sign it again (lockbuild sign)"
            )
        return note

    text = "\n".join(
        f"built {packed.bundle} ({packed.size / 1e6:.1f} MB, {len(packed.manifest.members) + 1} files with the "
        f"manifest)\n"
        f"  sha256 {packed.sha256}\n"
        f"  signed by {signer.key_id_hex} -> {packed.signature}"
        + signatures_note(packed)
        + f"\n  {measured.text()}"
        + checks.note(n)
        for n, ((_, packed), measured) in enumerate(zip(signed, fits, strict=True))
    )
    if reports is not None:  # the report follows the build's own result
        from lockbuild.commands.selftest import show_after_build

        if trust_dir is not None:
            _check_trusted(signed, trust_dir)
        if not ctx.obj.get("json"):
            emit(ctx, {}, text)
        show_after_build(ctx, reports, {"bundles": results, "warnings": list(settings.warnings)})
        return
    emit(ctx, {"bundles": results, "warnings": list(settings.warnings)}, text)


def _self_test_before_signing(ctx: click.Context, written: list[UnsignedBundle]) -> list[Report]:
    """``build --self-test``: each unsigned bundle tested in the self-test's sandbox, before any key is read.
    The self-test checks signatures first, so each bundle gets one from a throw-away key made here and
    trusted only by this run (a private directory beside OUT, removed afterwards); the bundle file tested
    is the one then signed (a hard link to it, read-only in the sandbox)."""
    from lockbuild.builder.pack import statement_for
    from lockbuild.selftest.run import SelfTestOptions, self_test
    from lockbuild.trust.scheme import SCHEME, signature_path
    from lockbuild.trust.sign import sign_statement

    throwaway = SCHEME.generate_key()
    reports = []
    with tempfile.TemporaryDirectory(prefix=".lockbuild-selftest-", dir=written[0].final.parent) as tmp:
        t = Path(tmp)
        (t / "trust").mkdir()
        fsio.write_new(t / "trust" / "build.pub", throwaway.public_key().to_text().encode("utf-8"))
        for w in written:
            tested = t / w.final.name
            tested.hardlink_to(w.tmp)
            block = sign_statement(throwaway, statement_for(w, None), w.digests.prehash(w.final.name))
            fsio.write_new(signature_path(t / w.final.name), block.encode("utf-8"))
            opts = SelfTestOptions(trust_dir=t / "trust", environ=dict(os.environ))
            reports.append(self_test(tested, opts, progress_of(ctx)))
    return reports


def _check_trusted(signed: Sequence[tuple[Plan, Packed]], trust_dir: Path) -> None:
    """``--trust`` with ``--self-test``: the new signatures must meet that trust directory's policy."""
    from lockbuild.trust.opener import load_trust_store, open_bundle

    store = load_trust_store(trust_dir)
    for _, packed in signed:
        open_bundle(packed.bundle, store)


COMMANDS = (lock, fetch, build)


if TYPE_CHECKING:
    from lockbuild.settings import Settings


def build_model_cli(
    ctx: click.Context,
    recipe: Path,
    *,
    key: Path,
    out: Path,
    expires: dt.datetime | None,
    threads: int | None,
    jobs: int,
    settings: Settings,
    self_test: bool,
    build_spec: str | None,
    allow_readable_key: bool,
) -> None:
    """``build MODEL.toml``: the bundle written here, then signed in the fresh signing process (the key
    is read there only) and moved into place with its signature, as an engine's."""
    from lockbuild.builder.modelbuild import build_model
    from lockbuild.builder.pack import release
    from lockbuild.commands.clikit import emit_warnings, take_password
    from lockbuild.errors import RecipeError
    from lockbuild.recipe.modelrecipe import load_model_recipe
    from lockbuild.trust.sign import KeyFileSigner

    password = take_password()
    if self_test or build_spec is not None:
        err = RecipeError(
            f"{recipe} is a model recipe: --self-test and --build apply to engine recipes only.",
            tip="Test a model with an engine: lockbuild test ENGINE.lbz --model MODEL.lbz.",
        )
        err.exit_code = 2
        raise err
    r = load_model_recipe(recipe)
    # The key opened and decrypted now, before anything is asked of the Hub, in a signing process that
    # signs nothing and exits (as for an engine); it is read again to sign.
    key_signer = KeyFileSigner(key, password, allow_readable_key)
    checked = key_signer.check()
    done = build_model(r, settings, out, jobs=jobs, threads=threads, progress=progress_of(ctx))
    emit_warnings(ctx, done.choice.warnings)
    w = done.written
    (packed,), signer = release([w], key_signer, checked, expires=expires)
    result: dict[str, JSON] = {
        **_signed_json(packed, signer.key_id_hex),
        "repo": r.repo,
        "commit": r.revision,
        "files": [f.path for f in done.choice.files],
        "pickles": list(done.choice.selection.pickles),
        "code": list(done.choice.selection.code),
        "warnings": list(done.choice.warnings),
    }
    emit(
        ctx,
        {"bundles": [result], "warnings": list(settings.warnings)},
        f"built {packed.bundle} ({packed.size / 1e6:.1f} MB, {len(done.choice.files)} files of {r.repo} at "
        f"{r.revision})\n  sha256 {packed.sha256}\n  signed by {signer.key_id_hex} -> {packed.signature}",
    )


def _signed_json(packed: Packed, signer: str) -> dict[str, JSON]:
    """What every build's JSON says of a bundle it signed and placed, engine or model."""
    return {
        "bundle": str(packed.bundle),
        "signature": str(packed.signature),
        "sha256": packed.sha256,
        "size": packed.size,
        "members": len(packed.manifest.members),
        "signer": signer,
    }
