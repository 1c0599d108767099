"""The image command: an installed engine as one reproducible squashfs file for HPC sites."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import click

from lockbuild.clikit import (
    Command,
    emit,
    gpu_check_option,
    json_option,
    progress_of,
    setup_output,
    threshold_option,
    trust_option,
)


@click.command(
    cls=Command,
    epilog="Example: lockbuild image vllm-0.11.0-cu128-py312-x86_64-manylinux_2_28.lbz "
    "--trust /etc/lockbuild/keys --prefix /opt/engines/vllm-0.11.0 --out /srv/images/vllm-0.11.0.sqfs",
)
@click.argument("bundle", metavar="BUNDLE|ENGINE/VERSION-VARIANT")
@click.option(
    "--store",
    "store_dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="A site store: where ENGINE/VERSION-VARIANT is looked up.",
)
@trust_option
@threshold_option
@click.option(
    "--prefix",
    type=click.Path(path_type=Path),
    required=True,
    help="Where the nodes will mount the image (need not exist here).",
)
@click.option(
    "--out",
    type=click.Path(path_type=Path, dir_okay=False),
    required=True,
    help="The image to write, FILE.sqfs (its record FILE.sqfs.json beside it).",
)
@click.option(
    "--python",
    "python",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Interpreter to use (default: the bundle's own, placed inside the image; else pythonX.Y on PATH).",
)
@gpu_check_option
@json_option
@click.pass_context
def image(
    ctx: click.Context,
    bundle: str,
    store_dir: Path | None,
    trust_dir: Path | None,
    threshold: int | None,
    prefix: Path,
    out: Path,
    python: Path | None,
    gpu_check: str,
    as_json: bool,
) -> None:
    """Install a signed bundle for PREFIX and pack it into one reproducible squashfs image, FILE.sqfs.

    The install is `install`'s: the signatures, every member, uv offline with --require-hashes, the
    verify command and the GPU probe where a GPU is present. The environment is built for PREFIX (the
    path where the nodes mount the image), its bytecode compiled in checked-hash mode, and the tree
    packed with the bundle's cut-off as every time. FILE.sqfs appears whole or not at all, with the record
    FILE.sqfs.json beside it. Nothing is signed: `lockbuild sign FILE.sqfs --key KEY` does that.

    \b
    BUNDLE is a .lbz (its .minisig beside it), a NAME.lbz.parts.toml from `split`, a NAME.delta.lbz
    from `delta`, or ENGINE/VERSION-VARIANT with --store DIR.
    """
    setup_output(ctx, as_json)
    from lockbuild.image.build import make_image
    from lockbuild.install.installer import InstallOptions
    from lockbuild.install.nodecheck import gpu_check_of
    from lockbuild.site.sources import named_source

    opts = InstallOptions(
        root=Path("/"),
        trust_dir=trust_dir,
        python=python,
        threshold=threshold,
        gpu_check=gpu_check_of(gpu_check),
        environ=dict(os.environ),
    )
    with named_source(bundle, store=store_dir) as source:
        res = make_image(source, opts, prefix, out, progress=progress_of(ctx))
    sign = f"lockbuild sign {shlex.quote(str(out))} --key KEY"  # the path as the user gave it, from where they are
    emit(
        ctx,
        {**res.to_json(), "sign_command": sign},
        f"image: {res.engine} {res.version}-{res.variant} for {res.record.prefix} at "
        f"{res.image} ({res.record.image_size:,} bytes, sha256 {res.record.image_sha256}); not signed: {sign}",
    )


COMMANDS = (image,)
