"""Node commands that read a bundle and install nothing: verify (signatures, then every member), inspect."""

from __future__ import annotations

from pathlib import Path

import click

from lockbuild.commands.clikit import (
    Command,
    emit,
    json_option,
    models_option,
    progress_of,
    setup_output,
    store_option,
    threshold_option,
    trust_option,
)
from lockbuild.documents import JSON
from lockbuild.times import iso


@click.command(cls=Command, epilog="Example: lockbuild verify demo.lbz --trust /etc/lockbuild/keys --threshold 2")
@click.argument("bundle", metavar="BUNDLE", required=False)
@store_option
@trust_option
@threshold_option
@models_option
@click.option("--members", "check_members", is_flag=True, help="Also decompress a framed bundle and check each member.")
@json_option
@click.pass_context
def verify(
    ctx: click.Context,
    bundle: str | None,
    store_dir: Path | None,
    trust_dir: Path | None,
    threshold: int | None,
    as_json: bool,
    models_dir: Path | None = None,
    check_members: bool = False,
) -> None:
    """Check a bundle's signatures, then every frame of a framed .lbz against the signed frame table (every
    byte of the file), or every member against its manifest (--members, and every other source). Exit 0
    only if all hold.

    \b
    BUNDLE is a .lbz (its .minisig beside it), a NAME.lbz.parts.toml from `split`, a NAME.delta.lbz
    from `delta`, or ENGINE/VERSION-VARIANT with --store DIR; or an image FILE.sqfs from `image`
    (its .minisig and record FILE.sqfs.json beside it). --models DIR [ORG/NAME]: the installed models.
    """
    setup_output(ctx, as_json)
    if models_dir is not None:
        from lockbuild.commands.models import verify_models_cli

        verify_models_cli(ctx, models_dir, bundle, trust_dir=trust_dir, threshold=threshold)
        return
    if bundle is None:
        raise click.UsageError("expected BUNDLE (or --models DIR).")
    from lockbuild.image.imagefile import ImageFile
    from lockbuild.site.sources import named_source
    from lockbuild.trust import load_trust_store, verify_source
    from lockbuild.trust import trust_dir as resolve_trust_dir

    with named_source(bundle, store=store_dir, images=True) as source:
        if isinstance(source, ImageFile):  # FILE.sqfs from `lockbuild image`
            from lockbuild.image.judge import verify_image

            done = verify_image(source.image, load_trust_store(resolve_trust_dir(trust_dir)), threshold=threshold)
            emit(
                ctx,
                done.to_json(),
                f"OK {Path(bundle).name}: signed by {', '.join(done.signers)}; the image, its "
                f"record and its marker hold {done.to_json()['build']} for {done.record.prefix}",
            )
            return
        store = load_trust_store(resolve_trust_dir(trust_dir))
        res = verify_source(source, store, threshold=threshold, progress=progress_of(ctx), members=check_members)
    left = f"; {len(res.absent)} left to a store (pass --store to check them too)" if res.absent else ""
    checked = res.members - len(res.absent)
    said = f"{checked} members match the signed manifest{left}"
    if res.frames is not None and not check_members:
        said = f"{res.frames:,} frames match the signed table"
    emit(ctx, res.to_json(), f"OK {Path(bundle).name}: signed by {', '.join(res.signers)}; {said}")


@click.command(cls=Command, epilog="Example: lockbuild inspect demo.lbz --json")
@click.argument("bundle", metavar="BUNDLE")
@store_option
@json_option
@click.pass_context
def inspect(ctx: click.Context, bundle: str, store_dir: Path | None, as_json: bool) -> None:
    """Show a bundle's engine, build, target, as-of, signers and file table (signatures NOT checked).

    \b
    BUNDLE is a .lbz (its .minisig beside it), a NAME.lbz.parts.toml from `split`, a NAME.delta.lbz
    from `delta`, or ENGINE/VERSION-VARIANT with --store DIR.
    """
    setup_output(ctx, as_json)
    from lockbuild.bundle.firstuse import bundle_first_use
    from lockbuild.bundle.manifestparse import parse_manifest
    from lockbuild.errors import SignatureError as SigErr
    from lockbuild.limits import DEFAULT_LIMITS
    from lockbuild.site.sources import named_source, report_place
    from lockbuild.trust.scheme import SCHEME
    from lockbuild.vulns.signed import glance, glance_text

    with named_source(bundle, store=store_dir) as source:
        manifest = parse_manifest(source.manifest_bytes(DEFAULT_LIMITS))
        vulns = glance(report_place(source))
        attested = dict(manifest.provenance)  # PEP 740 publishers recorded at lock time, unverified
        try:
            blocks = SCHEME.parse(source.signature_blocks(DEFAULT_LIMITS), source=source.label)
            sigs = [{"key_id": s.key_id_hex, "trusted_comment": s.trusted_comment} for s in blocks]
        except SigErr:
            sigs = []
    uses = bundle_first_use(manifest)
    data: dict[str, JSON] = {
        "first_use": [u.to_json() for u in uses],
        "engine": manifest.engine,
        "version": manifest.version,
        "variant": manifest.variant,
        "python": manifest.python,
        "platform": manifest.platform,
        "as_of": iso(manifest.as_of),
        "serial": manifest.serial,
        "builder": {"lockbuild": manifest.lockbuild_version, "uv": manifest.uv_version},
        "exclude_newer_package": {name: when or False for name, when in manifest.exclude_newer_package},
        "signatures": sigs,
        "vulnerabilities": vulns,
        "unpacked_size": manifest.unpacked_size,
        "install": manifest.install.to_json() if manifest.model is None else None,
        **({"model": manifest.model.to_json()} if manifest.model is not None else {}),
        "files": [
            {
                "path": m.path,
                "size": m.size,
                "sha256": m.sha256,
                "kind": m.kind,
                "origin": m.origin,
                **({"provenance": attested[m.path].to_json()} if m.path in attested else {}),
            }
            for m in manifest.members
        ],
    }
    lines = [
        f"{manifest.engine} {manifest.version} ({manifest.variant}) "
        f"for Python {manifest.python} on {manifest.platform}",
        f"as of {data['as_of']}, built by lockbuild {manifest.lockbuild_version} with uv {manifest.uv_version}",
        f"signatures (not checked here; use verify): {', '.join(s['key_id'] for s in sigs) or 'none'}",
        glance_text(vulns),
        *(
            f"exclude-newer-package: {name} = {when or 'false (no cut-off)'}"
            for name, when in manifest.exclude_newer_package
        ),
        *(f"install: {line}" for line in (manifest.model or manifest.install).summary()),
        *(
            f"interpreter: Python {manifest.python}, {m.path} (sha256 {m.sha256[:16]}…, from {m.origin})"
            for m in manifest.members
            if m.kind == "interpreter"
        ),
        *(
            [
                "build dependencies (the node builds the sdists offline from these only): "
                + ", ".join(m.path.rsplit("/", 1)[-1] for m in manifest.members if m.kind == "build-dep")
            ]
            if any(m.kind == "build-dep" for m in manifest.members)
            else []
        ),
        *(
            f"built on the builder: {m.path} from the sdist beside it ({m.origin}), with the build dependencies "
            "pinned in lock/build-requirements.txt"
            for m in manifest.members
            if m.kind == "wheel" and m.path.startswith("sdists/")
        ),
        *(
            [f"provenance (PEP 740, as the index stated it at lock time, unverified): {len(attested)} attested file(s)"]
            if attested
            else []
        ),
        *(f"  {path.rsplit('/', 1)[-1]}: {p.describe()}" for path, p in manifest.provenance),
        *(f"first use: {u.line()}" for u in uses),
        f"{len(manifest.members)} files, {manifest.unpacked_size / 1e6:.1f} MB unpacked:",
    ]
    lines += [f"  {m.size:>14,}  {m.kind:<7} {m.path}" for m in manifest.members]
    emit(ctx, data, "\n".join(lines))


COMMANDS = (verify, inspect)
