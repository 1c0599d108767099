"""The commands that cut a bundle for the way in: ``split`` (parts for media) and ``delta`` (only what the
site lacks)."""

from __future__ import annotations

from pathlib import Path

import click

from lockbuild.commands.clikit import (
    Command,
    emit,
    json_option,
    progress_of,
    setup_output,
    threshold_option,
    trust_option,
)
from lockbuild.documents import JSON


@click.command(
    "split",
    cls=Command,
    epilog="Example: lockbuild split vllm-0.11.0-cu128-x86_64-manylinux_2_28.lbz --size 4G --out /media/usb",
)
@click.argument("bundle", type=click.Path(path_type=Path, dir_okay=False, exists=True))
@click.option("--size", "size_text", required=True, help="Largest part: 4G = 4×10⁹ bytes (FAT32-safe), 700M, 4GiB.")
@click.option("--out", type=click.Path(path_type=Path, file_okay=False), required=True, help="Directory for parts.")
@json_option
@click.pass_context
def split_(ctx: click.Context, bundle: Path, size_text: str, out: Path, as_json: bool) -> None:
    """Cut a bundle into parts that `cat` joins into the identical file, with a part list of sha256s.
    `lockbuild import NAME.lbz.parts.toml` takes the part list directly."""
    setup_output(ctx, as_json)
    from lockbuild.site.partlist import parse_size, read_part_list, split

    listing_path = split(bundle, parse_size(size_text), out)
    listing = read_part_list(listing_path)
    data: dict[str, JSON] = {
        "part_list": str(listing_path),
        "sha256": listing.sha256,
        "size": listing.size,
        "parts": [{"name": p.name, "size": p.size, "sha256": p.sha256} for p in listing.parts],
    }
    emit(
        ctx,
        data,
        f"OK {len(listing.parts)} part(s) of {bundle.name} in {out}; part list {listing_path.name}",
    )


@click.command(
    "delta",
    cls=Command,
    epilog="Example: lockbuild delta vllm-0.11.0-cu128-x86_64-manylinux_2_28.lbz "
    "--base vllm-0.10.2-cu128-x86_64-manylinux_2_28.lbz --out deltas/ --trust /etc/lockbuild/keys",
)
@click.argument("new", type=click.Path(path_type=Path, dir_okay=False, exists=True))
@click.option(
    "--base",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    required=True,
    help="The older bundle the site already has.",
)
@click.option("--out", type=click.Path(path_type=Path, file_okay=False), required=True, help="Directory for the delta.")
@trust_option
@threshold_option
@json_option
@click.pass_context
def delta_(
    ctx: click.Context, new: Path, base: Path, out: Path, trust_dir: Path | None, threshold: int | None, as_json: bool
) -> None:
    """Write NAME.delta.lbz: NEW's signed manifest and only the members BASE lacks, with NEW's signatures
    (no key needed). NEW and BASE must meet --trust's policy first. `lockbuild import` completes the
    delta in a store that holds BASE's members."""
    setup_output(ctx, as_json)
    from lockbuild.site.delta import write_delta
    from lockbuild.trust import load_trust_store
    from lockbuild.trust import trust_dir as resolve_trust_dir

    done = write_delta(
        new,
        base,
        out,
        trust=load_trust_store(resolve_trust_dir(trust_dir)),
        threshold=threshold,
        progress=progress_of(ctx),
    )
    size = done.path.stat().st_size
    data: dict[str, JSON] = {
        "delta": str(done.path),
        "members": done.members,
        "included": done.included,
        "included_bytes": done.included_bytes,
        "size": size,
        "full_size": done.full_size,
    }
    emit(
        ctx,
        data,
        f"OK {done.path.name}: {done.included} of {done.members} members, {size / 1e6:.1f} MB "
        f"({100 * size / max(1, done.full_size):.0f}% of the full bundle)",
    )


COMMANDS = (split_, delta_)
