"""Node command: install a signed bundle offline, or the build a store or folder offers that fits this node."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import click

from lockbuild.commands.clikit import (
    Command,
    emit,
    emit_warnings,
    gpu_check_option,
    json_option,
    models_option,
    modulefiles_format_option,
    modulefiles_option,
    progress_of,
    root_option,
    setup_output,
    store_option,
    threshold_option,
    trust_option,
)

if TYPE_CHECKING:  # no network code below the node's commands: the installer is imported when they run
    from lockbuild.install.installer import Installer, InstallOptions
    from lockbuild.site.sources import Choosing


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
@gpu_check_option
@click.option("--force", is_flag=True, help="Reinstall even if this bundle is already installed.")
@click.option("--allow-downgrade", is_flag=True, help="Accept a bundle older (lower serial) than the installed one.")
@click.option("--wait", type=float, default=0.0, show_default=True, help="Seconds to wait for another installer.")
@models_option
@modulefiles_option
@modulefiles_format_option
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
    modulefiles_dir: Path | None = None,
    modulefiles_format: str = "lua",
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
    from lockbuild.install.installer import Installer, InstallOptions
    from lockbuild.install.moduledir import module_target
    from lockbuild.install.nodecheck import gpu_check_of
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
        modulefiles=module_target(modulefiles_dir, modulefiles_format, os.environ),
    )
    installer = Installer(opts, progress=progress_of(ctx))
    from lockbuild.site.sources import named_source  # no network code either

    request = choosing_form(bundle, store=store_dir)
    if request is not None:
        _install_chosen(ctx, installer, request, opts, allow_cpu)
        return
    if models_dir is not None:  # a model bundle placed there, or an engine that reads its models there
        from lockbuild.commands.models import install_model_cli

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
    import time

    from lockbuild.choice.choose import chosen, refusal
    from lockbuild.install.node import detect
    from lockbuild.site.sources import place_for
    from lockbuild.text import for_terminal
    from lockbuild.trust import load_trust_store
    from lockbuild.trust import trust_dir as resolve_trust_dir

    started = time.monotonic()
    node = detect(environ=os.environ)
    trust = load_trust_store(resolve_trust_dir(opts.trust_dir))
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
            err = refusal(got)
            err.details = got.to_json()
            raise err
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


COMMANDS = (install,)
