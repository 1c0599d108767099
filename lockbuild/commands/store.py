"""The store's commands: ``import`` (a signed bundle into a store) and ``store list|verify|gc|index``."""

from __future__ import annotations

from pathlib import Path

import click

from lockbuild.commands.clikit import (
    Command,
    Group,
    emit,
    json_option,
    progress_of,
    setup_output,
    site_store_option,
    threshold_option,
    trust_option,
    wait_option,
)
from lockbuild.documents import JSON
from lockbuild.errors import IntegrityError
from lockbuild.text import for_terminal, one_line


@click.command(
    "import",
    cls=Command,
    epilog="Example: lockbuild import vllm-0.11.0-cu128-x86_64-manylinux_2_28.lbz "
    "--trust /etc/lockbuild/keys --store /srv/lockbuild",
)
@click.argument("bundle", type=click.Path(path_type=Path, dir_okay=False, exists=True))
@trust_option
@threshold_option
@site_store_option
@wait_option
@json_option
@click.pass_context
def import_(
    ctx: click.Context,
    bundle: Path,
    trust_dir: Path | None,
    threshold: int | None,
    store_dir: Path,
    wait: float,
    as_json: bool,
) -> None:
    """Check a signed bundle as install would, then add it to a store (members kept once, by sha256).

    BUNDLE is a .lbz (with its .minisig beside it), the NAME.lbz.parts.toml that `split` wrote, or a
    NAME.delta.lbz that `delta` wrote (the store must hold the members it leaves out)."""
    setup_output(ctx, as_json)
    from lockbuild.site.importer import import_bundle
    from lockbuild.site.storage import Store

    with Store(store_dir, create=True) as store:
        done = import_bundle(
            store, bundle, trust_dir=trust_dir, threshold=threshold, progress=progress_of(ctx), wait=wait
        )
    data: dict[str, JSON] = {
        "build": done.ref,
        "members": done.members,
        "added_blobs": done.added,
        "added_bytes": done.added_bytes,
        "signers": list(done.signers),
        "store": str(store_dir),
    }
    emit(
        ctx,
        data,
        f"OK imported {done.ref} into {store_dir}: {done.members} members, {done.added} new blobs "
        f"({done.added_bytes / 1e6:.1f} MB); signed by {', '.join(done.signers)}",
    )


@click.group("store", cls=Group, epilog="Example: lockbuild store list --store /srv/lockbuild")
def store_group() -> None:
    """Look after a site store: list its builds, re-hash its blobs, remove unreferenced blobs, export a
    package index."""


@store_group.command("list", epilog="Example: lockbuild store list --store /srv/lockbuild --json")
@site_store_option
@json_option
@click.pass_context
def store_list(ctx: click.Context, store_dir: Path, as_json: bool) -> None:
    """The builds a store holds, with their sizes and how many of their blobs are present."""
    setup_output(ctx, as_json)
    from lockbuild.site.storage import Store
    from lockbuild.site.storemodel import list_line, list_row
    from lockbuild.vulns.signed import glance, glance_text

    rows: list[dict[str, JSON]] = []
    lines: list[str] = []
    with Store(store_dir) as store:
        for b in store.builds_all():
            present = sum(1 for x in b.manifest.members if store.blob_size(x.sha256) is not None)
            vulns = glance(store.report_path(b.ref))
            rows.append({**list_row(b, present), "vulnerabilities": vulns})
            lines.append(list_line(b, present) + ("" if vulns is None else f"  {glance_text(vulns)}"))
        blobs = store.blob_names()
    lines.append(f"{len(rows)} build(s), {len(blobs)} blob(s) in {store_dir}")
    emit(ctx, {"store": str(store_dir), "builds": rows, "blobs": len(blobs)}, "\n".join(lines))


@store_group.command("verify", epilog="Example: lockbuild store verify --store /srv/lockbuild")
@site_store_option
@wait_option
@click.option("--remove-damaged", is_flag=True, help="Delete damaged blobs (import or pull again to restore them).")
@json_option
@click.pass_context
def store_verify(ctx: click.Context, store_dir: Path, wait: float, remove_damaged: bool, as_json: bool) -> None:
    """Re-hash every blob and check every build's manifest and blobs; exit 4 if anything is damaged."""
    setup_output(ctx, as_json)
    from lockbuild.site.storage import Store

    with Store(store_dir) as store, store.lock(exclusive=remove_damaged, wait=wait):
        damage = store.verify(remove=remove_damaged)
        count = len(store.blob_names())
    if damage and remove_damaged:
        raise IntegrityError(
            f"the store {store_dir} had {len(damage)} problem(s); the damaged blobs were removed: "
            + "; ".join(f"{d.path}: {d.problem}" for d in damage[:20])
            + ".",
            tip="Import or pull the builds again: they fetch only the blobs that are missing.",
        )
    if damage:
        listed = "; ".join(f"{d.path}: {d.problem}" for d in damage[:20])
        more = f" (and {len(damage) - 20} more)" if len(damage) > 20 else ""
        raise IntegrityError(
            f"the store {store_dir} has {len(damage)} problem(s): {listed}{more}.",
            tip="Run it again with --remove-damaged, then import or pull the builds again; they fetch only "
            "what is missing.",
        )
    emit(
        ctx,
        {"store": str(store_dir), "blobs": count, "damage": []},
        f"OK {store_dir}: {count} blobs re-hashed, every build complete",
    )


@store_group.command("gc", epilog="Example: lockbuild store gc --store /srv/lockbuild --wait 600")
@site_store_option
@wait_option
@json_option
@click.pass_context
def store_gc(ctx: click.Context, store_dir: Path, wait: float, as_json: bool) -> None:
    """Remove blobs no build references (waits for, or refuses during, an import or pull)."""
    setup_output(ctx, as_json)
    from lockbuild.site.storage import Store

    with Store(store_dir) as store, store.lock(exclusive=True, wait=wait):
        removed, freed = store.gc()
    emit(
        ctx,
        {"store": str(store_dir), "removed_blobs": removed, "freed_bytes": freed},
        f"OK removed {removed} unreferenced blob(s), {freed / 1e6:.1f} MB",
    )


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


store_group.add_command(store_index)
COMMANDS = (import_, store_group)
