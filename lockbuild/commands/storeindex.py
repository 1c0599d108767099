"""``store index``: a static package index of a store's wheels and sdists, for pip and uv in the air gap."""

from __future__ import annotations

from pathlib import Path

import click

from lockbuild.commands.clikit import Command, emit, json_option, setup_output, site_store_option, wait_option
from lockbuild.jsonio import JSON
from lockbuild.text import for_terminal, one_line


@click.command(
    "index",
    cls=Command,
    epilog="Example: lockbuild store index --store /srv/lockbuild --out /srv/pypi --key site-index.key",
)
@site_store_option
@click.option(
    "--out",
    type=click.Path(path_type=Path, file_okay=False),
    required=True,
    help="The index directory: made, or replaced whole if empty or an earlier export; never in or around the store.",
)
@click.option(
    "--build",
    "refs",
    multiple=True,
    metavar="ENGINE/VERSION-VARIANT",
    help="Only this build's files (repeatable; as `store list` shows it). Default: every build.",
)
@click.option(
    "--key",
    type=click.Path(path_type=Path, dir_okay=False),
    help="minisign secret key: sign SHA256SUMS, the listing of every file.",
)
@click.option(
    "--allow-readable-key",
    is_flag=True,
    help="Use a secret key file that its group or other users can read (refused otherwise).",
)
@wait_option
@json_option
@click.pass_context
def store_index(
    ctx: click.Context,
    store_dir: Path,
    out: Path,
    refs: tuple[str, ...],
    key: Path | None,
    allow_readable_key: bool,
    wait: float,
    as_json: bool,
) -> None:
    """Write a static package index (PEP 503/691/700, with PEP 658 metadata) of the store's wheels and sdists,
    for pip and uv inside the air gap: OUT/simple/ and OUT/files/, each file the store's checked blob. The new
    index replaces OUT whole; an existing OUT must be empty or an earlier export (its .lockbuild-index).
    With --key, OUT/SHA256SUMS lists every file and SHA256SUMS.minisig signs it.
    The key's passphrase comes from LOCKBUILD_KEY_PASSWORD or a prompt."""
    setup_output(ctx, as_json)
    from lockbuild.commands.clikit import take_password
    from lockbuild.site.export import Signing, export_index
    from lockbuild.site.storage import Store

    signing = Signing(key, take_password(), allow_readable_key) if key is not None else None
    with Store(store_dir) as store:
        done = export_index(store, out, refs=refs, signing=signing, wait=wait)
    missing = done.without_upload_time
    data: dict[str, JSON] = {
        "out": str(out),
        "builds": list(done.builds),
        "projects": len({d.project for d in done.dists}),
        "files": len(done.dists),
        "linked": done.linked,
        "signer": done.signer,
        "without_upload_time": list(missing),
    }
    if missing and not as_json:
        names = one_line(", ".join(missing[:10]))
        click.echo(
            for_terminal(
                f"NOTE {len(missing)} file(s) have no upload time (their index gave none, as "
                f"PyTorch's does); uv's --exclude-newer cannot place them: {names}"
                f"{' …' if len(missing) > 10 else ''}"
            ),
            err=True,
        )
    signed = f"; SHA256SUMS signed by {done.signer}" if done.signer else ""
    emit(
        ctx,
        data,
        f"OK indexed {len(done.dists)} file(s) of {len(done.builds)} build(s) at {out} "
        f"({done.linked} hard-linked from the store){signed}",
    )
