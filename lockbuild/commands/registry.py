"""The registry's commands: ``push`` (a signed build to an OCI registry) and ``pull`` (one into a store).
Network code (httpx) is imported inside them only."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from lockbuild.commands.clikit import (
    Command,
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
from lockbuild.wire.rules import credential_problem

if TYPE_CHECKING:
    from lockbuild.registry.api import Registry, RegistryCredentials
    from lockbuild.registry.reference import OciRef


def _first_line() -> str:
    """stdin's first line without its line end (LF or CR LF), read as bytes: a CR inside it stays in it (and
    is refused), where a text read would end the line there and cut the password short."""
    raw = sys.stdin.buffer.readline() if hasattr(sys.stdin, "buffer") else sys.stdin.readline().encode()
    return raw.decode("utf-8", "surrogateescape").removesuffix("\n").removesuffix("\r")


def _registry(
    ref: OciRef, plain_http: bool, ca_file: Path | None, creds: RegistryCredentials | None, auth_realms: tuple[str, ...]
) -> Registry:
    """The registry client push and pull talk through, with the retry budget of LOCKBUILD_REGISTRY_RETRY_SECONDS."""
    from lockbuild.registry.api import RETRY_ENV, Registry, transport_with

    transport = transport_with(os.environ.get(RETRY_ENV))
    return Registry(
        ref, plain_http=plain_http, ca_file=ca_file, credentials=creds, auth_realms=auth_realms, transport=transport
    )


def _credentials(username: str | None, password_stdin: bool) -> RegistryCredentials | None:
    from lockbuild.registry import api as oci

    if password_stdin and not username:
        raise click.UsageError("--password-stdin needs --username.")
    if not username:
        return None
    password = _first_line() if password_stdin else ""
    for name, value in (("--username", username), ("the password on stdin (--password-stdin)", password)):
        why = credential_problem(name, value, as_is=False)
        if why is not None:
            raise oci.RegistryError(why, tip=f"Give {name} again without a line break inside it; nothing was sent.")
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
    from lockbuild.registry.api import parse_ref
    from lockbuild.registry.push import push
    from lockbuild.site.sources import named_source

    ref = parse_ref(target)
    creds = _credentials(username, password_stdin)
    with (
        named_source(source, store=store_dir) as src,
        _registry(ref, plain_http, ca_file, creds, auth_realms) as reg,
    ):
        done = push(src, reg, trust=trust_dir, threshold=threshold, progress=progress_of(ctx), jobs=jobs)
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
@site_store_option
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
    from lockbuild.registry.api import parse_ref
    from lockbuild.registry.artifact import pull
    from lockbuild.site.storage import Store

    ref = parse_ref(target)
    creds = _credentials(username, password_stdin)
    made = next((d for d in reversed([store_dir, *store_dir.absolute().parents]) if not os.path.lexists(d)), None)
    store: Store | None = None
    try:
        with (
            Store(store_dir, create=True) as store,
            _registry(ref, plain_http, ca_file, creds, auth_realms) as reg,
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


COMMANDS = (push_, pull_)
