"""Node commands: verify, inspect, install, list, remove (no network code below them); doctor is beside."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import click

from lockbuild.clikit import (
    Command,
    emit,
    emit_warnings,
    json_option,
    progress_of,
    root_option,
    setup_output,
    threshold_option,
    trust_option,
)
from lockbuild.jsonio import JSON
from lockbuild.times import iso

if TYPE_CHECKING:  # no network code below the node's commands: the installer is imported when they run
    from lockbuild.install.installer import Installer, InstallOptions
    from lockbuild.site.sources import Choosing


store_option = click.option(
    "--store",
    "store_dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="A site store: where ENGINE/VERSION-VARIANT is looked up, and what completes a delta.",
)


models_option = click.option(
    "--models",
    "models_dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="A models folder: the Hugging Face cache model bundles are installed in.",
)


@click.command(cls=Command, epilog="Example: lockbuild verify demo.lbz --trust /etc/lockbuild/keys --threshold 2")
@click.argument("bundle", metavar="BUNDLE", required=False)
@store_option
@trust_option
@threshold_option
@models_option
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
) -> None:
    """Check a bundle's signatures, then every member against its manifest. Exit 0 only if all hold.

    \b
    BUNDLE is a .lbz (its .minisig beside it), a NAME.lbz.parts.toml from `split`, a NAME.delta.lbz
    from `delta`, or ENGINE/VERSION-VARIANT with --store DIR; or an image FILE.sqfs from `image`
    (its .minisig and record FILE.sqfs.json beside it). --models DIR [ORG/NAME]: the installed models.
    """
    setup_output(ctx, as_json)
    if models_dir is not None:
        from lockbuild.modelcli import verify_models_cli

        verify_models_cli(ctx, models_dir, bundle, trust_dir=trust_dir, threshold=threshold)
        return
    if bundle is None:
        raise click.UsageError("expected BUNDLE (or --models DIR).")
    from lockbuild.image.record import is_image
    from lockbuild.site.sources import named_source
    from lockbuild.trust import load_store, verify_source
    from lockbuild.trust import trust_dir as resolve_trust_dir

    if store_dir is None and is_image(Path(bundle)):  # FILE.sqfs from `lockbuild image` (its magic, not its name)
        from lockbuild.image.verify import verify_image

        done = verify_image(Path(bundle), load_store(resolve_trust_dir(trust_dir)), threshold=threshold)
        emit(
            ctx,
            done.to_json(),
            f"OK {Path(bundle).name}: signed by {', '.join(done.signers)}; the image, its "
            f"record and its marker hold {done.to_json()['build']} for {done.record.prefix}",
        )
        return
    with named_source(bundle, store=store_dir) as source:
        store = load_store(resolve_trust_dir(trust_dir))
        res = verify_source(source, store, threshold=threshold, progress=progress_of(ctx))
    left = f"; {len(res.absent)} left to a store (pass --store to check them too)" if res.absent else ""
    checked = res.members - len(res.absent)
    emit(
        ctx,
        res.to_json(),
        f"OK {Path(bundle).name}: signed by {', '.join(res.signers)}; {checked} members match "
        f"the signed manifest{left}",
    )


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
    from lockbuild.bundle.manifestparse import parse_manifest
    from lockbuild.errors import SignatureError as SigErr
    from lockbuild.limits import DEFAULT_LIMITS
    from lockbuild.minisign import parse_signatures
    from lockbuild.site.sources import named_source

    with named_source(bundle, store=store_dir) as source:
        manifest = parse_manifest(source.manifest_bytes(DEFAULT_LIMITS))
        attested = dict(manifest.provenance)  # PEP 740 publishers recorded at lock time, unverified
        try:
            blocks = parse_signatures(source.signature_blocks(DEFAULT_LIMITS), source=source.label)
            sigs = [{"key_id": s.key_id_hex, "trusted_comment": s.trusted_comment} for s in blocks]
        except SigErr:
            sigs = []
    data: dict[str, JSON] = {
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
        f"{len(manifest.members)} files, {manifest.unpacked_size / 1e6:.1f} MB unpacked:",
    ]
    lines += [f"  {m.size:>14,}  {m.kind:<7} {m.path}" for m in manifest.members]
    emit(ctx, data, "\n".join(lines))


@click.command(
    cls=Command, epilog="Example: lockbuild install demo.lbz --root /opt/engines --trust /etc/lockbuild/keys"
)
@click.argument("bundle", metavar="BUNDLE|ENGINE/VERSION-VARIANT|ENGINE/VERSION|ENGINE|DIR/")
@root_option
@store_option
@click.option(
    "--allow-cpu",
    is_flag=True,
    help="When choosing on a GPU node where no GPU build fits, take a CPU build (without it such a node is refused).",
)
@trust_option
@threshold_option
@click.option(
    "--python",
    "python",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Interpreter to use (default: the bundle's own, else pythonX.Y on PATH).",
)
@click.option(
    "--gpu-check",
    type=click.Choice(["auto", "require", "skip"]),
    default="auto",
    show_default=True,
    help="Run the GPU probe: auto = only where an NVIDIA driver is present.",
)
@click.option("--force", is_flag=True, help="Reinstall even if this bundle is already installed.")
@click.option("--allow-downgrade", is_flag=True, help="Accept a bundle older (lower serial) than the installed one.")
@click.option("--wait", type=float, default=0.0, show_default=True, help="Seconds to wait for another installer.")
@models_option
@json_option
@click.pass_context
def install(
    ctx: click.Context,
    bundle: str,
    root: Path,
    store_dir: Path | None,
    trust_dir: Path | None,
    threshold: int | None,
    python: Path | None,
    gpu_check: str,
    force: bool,
    allow_downgrade: bool,
    wait: float,
    as_json: bool,
    allow_cpu: bool = False,
    models_dir: Path | None = None,
) -> None:
    """Install a signed bundle offline into ROOT/ENGINE/VERSION-VARIANT, atomically.

    Signatures are checked before anything is unpacked; every file is checked against the manifest;
    the environment is built under a .partial name with the bundled uv (no index, --require-hashes),
    the engine's verify command and GPU probe run, and only then is it swapped into place. A failure
    leaves the previous install untouched.

    \b
    BUNDLE is a .lbz (its .minisig beside it), a NAME.lbz.parts.toml from `split`, a NAME.delta.lbz
    from `delta`, or ENGINE/VERSION-VARIANT with --store DIR; or
    ENGINE/VERSION or ENGINE with --store DIR, or a folder DIR/ of bundles: the node chooses the build that
    fits its GPUs and driver (the asked version first, then the newest CUDA it runs, then the narrowest
    capability range) and says why each other one was passed over.
    """
    setup_output(ctx, as_json)
    from lockbuild.install.fit import gpu_check_of
    from lockbuild.install.installer import Installer, InstallOptions
    from lockbuild.site.sources import choosing_form

    opts = InstallOptions(
        root=root,
        trust_dir=trust_dir,
        python=python,
        gpu_check=gpu_check_of(gpu_check),
        force=force,
        allow_downgrade=allow_downgrade,
        threshold=threshold,
        wait=wait,
        environ=dict(os.environ),  # the installer passes only allow-listed names on to uv and the engine
        models=models_dir,
    )
    installer = Installer(opts, progress=progress_of(ctx))
    from lockbuild.site.sources import named_source  # no network code either

    request = choosing_form(bundle, store=store_dir)
    if request is not None:
        _install_chosen(ctx, installer, request, opts, allow_cpu)
        return
    if models_dir is not None:  # a model bundle placed there, or an engine that reads its models there
        from lockbuild.modelcli import install_model_cli

        with named_source(bundle, store=store_dir) as source:
            install_model_cli(ctx, source, models_dir, opts=opts, installer=installer)
        return
    with named_source(bundle, store=store_dir) as source:
        result = installer.install(source)
    verb = "installed" if result.status == "installed" else "already installed"
    emit_warnings(ctx, result.warnings)
    emit(
        ctx,
        result.to_json(),
        f"{verb}: {result.engine} {result.version}-{result.variant} at {result.path}" + result.python_line(),
    )


def _install_chosen(
    ctx: click.Context, installer: Installer, request: Choosing, opts: InstallOptions, allow_cpu: bool
) -> None:
    """install ENGINE/VERSION, ENGINE (--store) or DIR/: choose among the signed candidates, then install
    the chosen one from its opening; nothing fits: exit 1, nothing placed, every candidate's reasons."""
    import json
    import time

    from lockbuild.install.choose import chosen, refusal
    from lockbuild.install.node import detect
    from lockbuild.site.sources import place_for
    from lockbuild.text import for_terminal, mask_data
    from lockbuild.trust import load_store
    from lockbuild.trust import trust_dir as resolve_trust_dir

    started = time.monotonic()
    node = detect(environ=os.environ)
    trust = load_store(resolve_trust_dir(opts.trust_dir))
    with chosen(
        place_for(request),
        trust=trust,
        threshold=opts.threshold,
        node=node,
        root=opts.root.absolute(),
        allow_cpu=allow_cpu,
        gpu_check=opts.gpu_check,
    ) as got:
        if got.opened is None:
            if ctx.obj.get("json"):
                err = refusal(got)
                click.echo(
                    json.dumps(
                        mask_data(
                            {
                                "ok": False,
                                "error": {
                                    "type": type(err).__name__,
                                    "message": err.message,
                                    "tip": err.tip,
                                    "exit_code": err.exit_code,
                                },
                                **got.to_json(),
                            }
                        )
                    )
                )
                click.echo(for_terminal("ERROR " + err.message + (f"\nTIP {err.tip}" if err.tip else "")), err=True)
                ctx.exit(1)
            raise refusal(got)
        if not (ctx.obj.get("json") or ctx.obj.get("quiet")):  # the choice, said before the install runs
            click.echo(for_terminal("\n".join(got.lines())), err=True)
        result = installer.install_opened(got.opened, started, node)
    verb = "installed" if result.status == "installed" else "already installed"
    text = (
        f"{verb}: {result.engine} {result.version}-{result.variant} at {result.path} (chosen for this node)"
        + result.python_line()
    )
    emit_warnings(ctx, result.warnings)
    emit(ctx, {**result.to_json(), **got.to_json()}, text)


@click.command("list", cls=Command, epilog="Example: lockbuild list --root /opt/engines --json")
@root_option
@click.option(
    "--images",
    "images_dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="List the images (FILE.sqfs from `image`) in this folder instead, with what they hold.",
)
@models_option
@json_option
@click.pass_context
def list_(
    ctx: click.Context, root: Path, as_json: bool, images_dir: Path | None = None, models_dir: Path | None = None
) -> None:
    """List installed engines with version, variant, installed time and bundle digest (or, with --images, the
    images in a folder; with --models, the models installed there)."""
    setup_output(ctx, as_json)
    if models_dir is not None:
        from lockbuild.modelcli import list_models_cli

        list_models_cli(ctx, models_dir)
        return
    if images_dir is not None:
        _list_images(ctx, images_dir)
        return
    from lockbuild.install.marker import list_installed

    rows = list_installed(root.absolute())
    data = [{"path": str(p), **m.to_json()} for p, m in rows]
    text = (
        "\n".join(
            f"{m.engine:<16} {m.version}-{m.variant:<12} installed {m.installed}  sha256 {m.bundle_sha256[:16]}…  {p}"
            + "".join(f"\n    env {k}={v}" for k, v in m.env)
            for p, m in rows
        )
        or f"no engines under {root}"
    )
    emit(ctx, {"root": str(root.absolute()), "installed": data}, text)


def _list_images(ctx: click.Context, folder: Path) -> None:
    """list --images DIR: each image's build, prefix, size and digest, as its record and marker say (not
    verified: `lockbuild verify FILE.sqfs` checks them)."""
    from lockbuild.image.record import list_images
    from lockbuild.text import one_line

    rows = list_images(folder)
    lines = []
    for x in rows:
        if x.record is None or x.marker is None:
            lines.append(one_line(f"{x.image.name}: {x.problem}"))
            continue
        m, r = x.marker, x.record
        lines.append(
            one_line(
                f"{m.engine:<16} {m.version}-{m.variant:<12} prefix {r.prefix}  {r.image_size:,} bytes  "
                f"sha256 {r.image_sha256[:16]}…  {x.signature}  {x.image}"
            )
        )
    text = "\n".join(lines) or f"no images in {folder}"
    emit(
        ctx,
        {"folder": str(folder.absolute()), "images": [x.to_json() for x in rows]},
        text + ("\n(read, not verified: lockbuild verify FILE.sqfs --trust DIR checks one)" if rows else ""),
    )


@click.command(cls=Command, epilog="Example: lockbuild remove vllm 0.11.0-cu128 --root /opt/engines")
@click.argument("engine")
@click.argument("build_id", metavar="VERSION-VARIANT")
@root_option
@click.option("--wait", type=float, default=0.0, show_default=True, help="Seconds to wait for another installer.")
@json_option
@click.pass_context
def remove(ctx: click.Context, engine: str, build_id: str, root: Path, wait: float, as_json: bool) -> None:
    """Remove an installed engine environment."""
    setup_output(ctx, as_json)
    from lockbuild.install.installer import remove as do_remove

    path = do_remove(root, engine, build_id, wait=wait)
    emit(ctx, {"removed": str(path)}, f"removed {path}")


COMMANDS = (verify, inspect, install, list_, remove)
