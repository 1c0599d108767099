"""Node commands on what is installed: list (engines, images or models), remove."""

from __future__ import annotations

from pathlib import Path

import click

from lockbuild.commands.clikit import (
    Command,
    emit,
    json_option,
    models_option,
    modulefiles_format_option,
    modulefiles_option,
    root_option,
    setup_output,
)


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
        from lockbuild.commands.models import list_models_cli

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
@modulefiles_option
@modulefiles_format_option
@json_option
@click.pass_context
def remove(
    ctx: click.Context,
    engine: str,
    build_id: str,
    root: Path,
    wait: float,
    as_json: bool,
    modulefiles_dir: Path | None = None,
    modulefiles_format: str = "lua",
) -> None:
    """Remove an installed engine environment, and its module file (where the install wrote one, or in
    --modulefiles DIR), moving the engine's default."""
    setup_output(ctx, as_json)
    import os

    from lockbuild.install.installer import remove as do_remove
    from lockbuild.install.moduledir import module_target

    mods = module_target(modulefiles_dir, modulefiles_format, os.environ)
    path = do_remove(root, engine, build_id, wait=wait, modulefiles=mods, environ=os.environ)
    emit(ctx, {"removed": str(path)}, f"removed {path}")


COMMANDS = (list_, remove)
