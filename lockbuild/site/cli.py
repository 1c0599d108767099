"""The site wing's commands: import, store list|verify|gc, split, push, pull.

Registered on the main group by ``register``, called at the end of ``lockbuild.cli`` (import that
module, not this one); each command parses, calls the library, renders. Network code (httpx) is
imported inside push and pull only.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from lockbuild.clikit import (
    Command,
    Group,
    emit,
    json_option,
    progress_of,
    setup_output,
    threshold_option,
    trust_option,
)
from lockbuild.errors import IntegrityError
from lockbuild.jsonio import JSON
from lockbuild.text import for_terminal, one_line

if TYPE_CHECKING:
    from lockbuild.site.oci import RegistryCredentials

store_option = click.option(
    "--store", "store_dir", type=click.Path(path_type=Path, file_okay=False), required=True, help="The site store."
)
wait_option = click.option(
    "--wait", type=float, default=0.0, show_default=True, help="Seconds to wait for another import, pull or gc."
)


@click.command(
    "import",
    cls=Command,
    epilog="Example: lockbuild import vllm-0.11.0-cu128-x86_64-manylinux_2_28.lbz "
    "--trust /etc/lockbuild/keys --store /srv/lockbuild",
)
@click.argument("bundle", type=click.Path(path_type=Path, dir_okay=False, exists=True))
@trust_option
@threshold_option
@store_option
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
    from lockbuild.site.store import Store

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
@store_option
@json_option
@click.pass_context
def store_list(ctx: click.Context, store_dir: Path, as_json: bool) -> None:
    """The builds a store holds, with their sizes and how many of their blobs are present."""
    setup_output(ctx, as_json)
    from lockbuild.site.store import Store
    from lockbuild.site.storemodel import list_line, list_row

    rows: list[dict[str, JSON]] = []
    lines: list[str] = []
    with Store(store_dir) as store:
        for b in store.builds_all():
            present = sum(1 for x in b.manifest.members if store.blob_size(x.sha256) is not None)
            rows.append(list_row(b, present))
            lines.append(list_line(b, present))
        blobs = store.blob_names()
    lines.append(f"{len(rows)} build(s), {len(blobs)} blob(s) in {store_dir}")
    emit(ctx, {"store": str(store_dir), "builds": rows, "blobs": len(blobs)}, "\n".join(lines))


@store_group.command("verify", epilog="Example: lockbuild store verify --store /srv/lockbuild")
@store_option
@wait_option
@click.option("--remove-damaged", is_flag=True, help="Delete damaged blobs (import or pull again to restore them).")
@json_option
@click.pass_context
def store_verify(ctx: click.Context, store_dir: Path, wait: float, remove_damaged: bool, as_json: bool) -> None:
    """Re-hash every blob and check every build's manifest and blobs; exit 4 if anything is damaged."""
    setup_output(ctx, as_json)
    from lockbuild.site.store import Store

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
@store_option
@wait_option
@json_option
@click.pass_context
def store_gc(ctx: click.Context, store_dir: Path, wait: float, as_json: bool) -> None:
    """Remove blobs no build references (waits for, or refuses during, an import or pull)."""
    setup_output(ctx, as_json)
    from lockbuild.site.store import Store

    with Store(store_dir) as store, store.lock(exclusive=True, wait=wait):
        removed, freed = store.gc()
    emit(
        ctx,
        {"store": str(store_dir), "removed_blobs": removed, "freed_bytes": freed},
        f"OK removed {removed} unreferenced blob(s), {freed / 1e6:.1f} MB",
    )


@store_group.command(
    "index", epilog="Example: lockbuild store index --store /srv/lockbuild --out /srv/pypi --key site-index.key"
)
@store_option
@click.option(
    "--out",
    type=click.Path(path_type=Path, file_okay=False),
    required=True,
    help="The index directory (made, or replaced whole).",
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
    index replaces OUT whole. With --key, OUT/SHA256SUMS lists every file and SHA256SUMS.minisig signs it.
    The key's passphrase comes from LOCKBUILD_KEY_PASSWORD or a prompt."""
    setup_output(ctx, as_json)
    from lockbuild.clikit import take_password
    from lockbuild.site.export import Signing, export_index
    from lockbuild.site.store import Store

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
    from lockbuild.site.parts import parse_size, read_part_list, split

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


def _credentials(username: str | None, password_stdin: bool) -> RegistryCredentials | None:
    from lockbuild.site import oci

    if password_stdin and not username:
        raise click.UsageError("--password-stdin needs --username.")
    if not username:
        return None
    password = sys.stdin.readline().rstrip("\r\n") if password_stdin else ""
    return oci.RegistryCredentials(username, password)


def registry_options(f: Callable[..., None]) -> Callable[..., None]:
    for option in reversed(
        (
            click.option(
                "--plain-http", is_flag=True, help="Use http, not https, for a registry that is not on loopback."
            ),
            click.option(
                "--ca-file",
                type=click.Path(path_type=Path, dir_okay=False, exists=True),
                help="CA certificate(s) to trust for the registry's TLS.",
            ),
            click.option("--username", help="Registry user name (the password is read from stdin)."),
            click.option("--password-stdin", is_flag=True, help="Read the registry password from stdin's first line."),
            click.option(
                "--auth-realm",
                "auth_realms",
                multiple=True,
                metavar="HOST[:PORT]",
                help="A token service on another host that may receive the credentials (the registry's "
                "own host and port always may; repeatable).",
            ),
        )
    ):
        f = option(f)
    return f


@click.command(
    "push",
    cls=Command,
    epilog="Example: lockbuild push vllm/0.11.0-cu128 oci://registry.site:5000/engines/vllm:0.11.0-cu128 "
    "--store /srv/lockbuild",
)
@click.argument("source")
@click.argument("target")
@click.option(
    "--store",
    "store_dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="The store holding ENGINE/VERSION-VARIANT (or completing a delta).",
)
@trust_option
@threshold_option
@registry_options
@click.option("--jobs", type=click.IntRange(1, 64), default=4, show_default=True, help="Blobs uploaded at once.")
@json_option
@click.pass_context
def push_(
    ctx: click.Context,
    source: str,
    target: str,
    store_dir: Path | None,
    trust_dir: Path | None,
    threshold: int | None,
    plain_http: bool,
    ca_file: Path | None,
    username: str | None,
    password_stdin: bool,
    auth_realms: tuple[str, ...],
    jobs: int,
    as_json: bool,
) -> None:
    """Push a signed build to an OCI registry. SOURCE is ENGINE/VERSION-VARIANT in --store, a .lbz, a
    part list or a delta (completed by --store). Its signatures are checked against --trust and every
    member against the signed manifest before it is uploaded; each member is one blob, by its sha256,
    uploaded once."""
    setup_output(ctx, as_json)
    from lockbuild.site.oci import RETRY_ENV, Registry, parse_ref, transport_with
    from lockbuild.site.push import push
    from lockbuild.site.sources import named_source
    from lockbuild.trust import load_store, open_source
    from lockbuild.trust import trust_dir as resolve_trust_dir

    ref = parse_ref(target)
    creds = _credentials(username, password_stdin)
    with named_source(source, store=store_dir) as src:
        # the same trust decision as install: nothing unchecked is uploaded
        trusted = open_source(src, load_store(resolve_trust_dir(trust_dir)), threshold=threshold)
        with Registry(
            ref,
            plain_http=plain_http,
            ca_file=ca_file,
            credentials=creds,
            auth_realms=auth_realms,
            transport=transport_with(os.environ.get(RETRY_ENV)),
        ) as reg:
            done = push(trusted, reg, progress=progress_of(ctx), jobs=jobs)
    data: dict[str, JSON] = {
        "build": done.ref,
        "target": str(ref),
        "blobs": done.blobs,
        "uploaded": done.moved,
        "uploaded_bytes": done.moved_bytes,
        "retries": reg.retries,
    }
    emit(
        ctx,
        data,
        f"OK pushed {done.ref} to {ref}: {done.moved} of {done.blobs} blobs uploaded "
        f"({done.moved_bytes / 1e6:.1f} MB), the rest were there",
    )


@click.command(
    "pull",
    cls=Command,
    epilog="Example: lockbuild pull oci://registry.site:5000/engines/vllm:0.11.0-cu128 "
    "--store /srv/lockbuild --trust /etc/lockbuild/keys",
)
@click.argument("target")
@store_option
@trust_option
@threshold_option
@registry_options
@wait_option
@click.option("--jobs", type=click.IntRange(1, 64), default=4, show_default=True, help="Blobs fetched at once.")
@json_option
@click.pass_context
def pull_(
    ctx: click.Context,
    target: str,
    store_dir: Path,
    trust_dir: Path | None,
    threshold: int | None,
    plain_http: bool,
    ca_file: Path | None,
    username: str | None,
    password_stdin: bool,
    auth_realms: tuple[str, ...],
    wait: float,
    jobs: int,
    as_json: bool,
) -> None:
    """Pull a build from an OCI registry into a store: its signatures are checked against --trust before
    any blob is requested; then only the blobs the store lacks are fetched, each checked as it streams."""
    setup_output(ctx, as_json)
    from lockbuild.site.oci import RETRY_ENV, Registry, parse_ref, transport_with
    from lockbuild.site.registry import pull
    from lockbuild.site.store import Store

    ref = parse_ref(target)
    creds = _credentials(username, password_stdin)
    made = next((d for d in reversed([store_dir, *store_dir.absolute().parents]) if not os.path.lexists(d)), None)
    store: Store | None = None
    try:
        with (
            Store(store_dir, create=True) as store,
            Registry(
                ref,
                plain_http=plain_http,
                ca_file=ca_file,
                credentials=creds,
                auth_realms=auth_realms,
                transport=transport_with(os.environ.get(RETRY_ENV)),
            ) as reg,
        ):
            done = pull(
                reg, store, trust=trust_dir, threshold=threshold, progress=progress_of(ctx), wait=wait, jobs=jobs
            )
    except BaseException:
        # a store another node created meanwhile (nodes sharing one) is not this pull's to forget
        _forget_new_store(made if store is None or store.created else None, store_dir)
        raise
    data: dict[str, JSON] = {
        "build": done.ref,
        "source": str(ref),
        "blobs": done.blobs,
        "fetched": done.moved,
        "fetched_bytes": done.moved_bytes,
        "signers": list(done.signers),
        "store": str(store_dir),
        "retries": reg.retries,
    }
    emit(
        ctx,
        data,
        f"OK pulled {done.ref} from {ref} into {store_dir}: {done.moved} of {done.blobs} blobs "
        f"fetched ({done.moved_bytes / 1e6:.1f} MB); signed by {', '.join(done.signers)}",
    )


def _forget_new_store(made: Path | None, store_dir: Path) -> None:
    """A failed pull leaves no trace of a store it created and put nothing in (an unknown tag, an untrusted
    signature, no registry): ``made``, the topmost directory this run made (None: the store was there
    before), is deleted by descriptor. A store that holds a blob, a partial download or a build is kept:
    the next pull resumes from what this one fetched."""
    from lockbuild.fsio import remove_tree

    def empty(d: Path) -> bool:
        return not d.is_dir() or not any(d.iterdir())

    if made is not None and all(empty(store_dir / d) for d in ("builds", "blobs/sha256", "tmp")):
        remove_tree(made.absolute())


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
    from lockbuild.trust import load_store
    from lockbuild.trust import trust_dir as resolve_trust_dir

    done = write_delta(
        new, base, out, trust=load_store(resolve_trust_dir(trust_dir)), threshold=threshold, progress=progress_of(ctx)
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


def register(main: click.Group) -> None:
    for command in (import_, store_group, split_, push_, pull_, delta_):
        main.add_command(command)
