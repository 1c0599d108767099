"""Key commands: sign a bundle (checked first), make a key pair."""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path

import click

from lockbuild.commands.clikit import (
    Command,
    emit,
    expires_option,
    json_option,
    progress_of,
    setup_output,
    take_password,
)
from lockbuild.errors import LockbuildError, SignatureError


@click.command(
    cls=Command,
    epilog="Example: lockbuild sign dist/onnxruntime-1.20.1-cpu-py311-x86_64-manylinux_2_28.lbz --key second.key",
)
@click.argument("bundle", type=click.Path(path_type=Path, dir_okay=False, exists=True))
@click.option("--key", type=click.Path(path_type=Path, dir_okay=False), required=True, help="minisign secret key.")
@click.option(
    "--trust",
    "trust_dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="Also check the signatures already present against this trust directory before signing.",
)
@expires_option
@click.option(
    "--allow-readable-key",
    is_flag=True,
    help="Use a secret key file that its group or other users can read (refused otherwise).",
)
@json_option
@click.pass_context
def sign(
    ctx: click.Context,
    bundle: Path,
    key: Path,
    trust_dir: Path | None,
    expires: dt.datetime | None,
    allow_readable_key: bool,
    as_json: bool,
) -> None:
    """Add a signature to a bundle or an image (appended to BUNDLE.minisig; the first stays minisign-verifiable).

    The whole bundle is checked first (every member against its manifest), and with --trust the
    signatures already present against that trust directory: a damaged bundle is refused, not signed.
    Signing again with a key that already signed replaces that key's signature in place, which is
    how an expiry is renewed. An image (FILE.sqfs from `lockbuild image`) is checked against its record
    FILE.sqfs.json and the marker inside it; one signature covers the image and its record.
    """
    setup_output(ctx, as_json)
    from lockbuild.image.imagefile import ImageFile
    from lockbuild.site.sources import signed_file
    from lockbuild.trust import KeyFileSigner, load_trust_store, sign_bundle

    store = load_trust_store(trust_dir) if trust_dir is not None else None
    signed = signed_file(bundle)
    if isinstance(signed, ImageFile):  # FILE.sqfs from `lockbuild image`
        from lockbuild.image.imagesign import sign_image

        done = sign_image(
            signed.image,
            key,
            password=take_password(),
            allow_readable_key=allow_readable_key,
            expires=expires,
            store=store,
        )
        verb = "re-signed" if done.replaced else "signed"
        emit(
            ctx,
            done.to_json(),
            f"{verb} the image {bundle.name} and its record with key {done.signer} -> {done.signature}",
        )
        return
    # the signing process reads the key now (a typed passphrase asked once): a bad key or passphrase stops
    # here, before the bundle is read; the same process signs once the bundle has been checked
    with KeyFileSigner(key, take_password(), allow_readable_key).session() as signer:
        res = sign_bundle(signed.path, signer, expires=expires, store=store, progress=progress_of(ctx))
    verb = "re-signed" if res.replaced else "signed"
    lines = [
        f"{verb} {bundle.name} with key {res.signer} -> {res.signature}",
        f"  checked {res.members} members against the manifest (sha256 {res.sha256})",
    ]
    if res.existing is not None:
        lines += [
            f"  existing signature {v.index} (key {v.key_id}): " + ("counts" if v.counts else v.reason)
            for v in res.existing.verdicts
        ]
    emit(ctx, res.to_json(), "\n".join(lines))


@click.command(
    cls=Command, epilog="Example: lockbuild keygen ~/lockbuild-keys/release  # writes release.key and release.pub there"
)
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--no-password", is_flag=True, help="Write the secret key unencrypted (for CI signers with a vault).")
@click.option("--force", is_flag=True, help="Write the secret key even where a git work tree would track it.")
@json_option
@click.pass_context
def keygen(ctx: click.Context, path: Path, no_password: bool, force: bool, as_json: bool) -> None:
    """Write a minisign-compatible key pair: PATH.key (mode 0600) and PATH.pub."""
    setup_output(ctx, as_json)
    from lockbuild.minisign import read_public_key, write_keypair
    from lockbuild.minisign.keyfiles import unignored_in_git

    secret_file = path.parent / (path.name + ".key")
    repo = unignored_in_git(secret_file)
    if repo is not None and not force:
        raise LockbuildError(
            f"{secret_file} would be inside the git work tree {repo}, and git does not ignore it: a secret key"
            " there is one `git add` away from being published.",
            tip="Write it outside the repository (e.g. ~/lockbuild-keys/release), ignore *.key in the"
            " repository, or pass --force.",
        )

    def nonempty(value: str) -> str:
        if not value:
            raise click.UsageError("an empty passphrase is not allowed (pass --no-password for an unencrypted key)")
        return value

    password = None
    if not no_password:
        password = take_password()
        if password is None:
            if not sys.stdin.isatty():
                raise SignatureError(
                    "no terminal to ask for a passphrase.", tip="Set LOCKBUILD_KEY_PASSWORD, or pass --no-password."
                )
            key_file = path.parent / (path.name + ".key")
            password = str(
                click.prompt(
                    f"Passphrase for the new key {key_file}",
                    hide_input=True,
                    default="",
                    show_default=False,
                    confirmation_prompt=True,
                    value_proc=nonempty,
                )
            )
    secret_path, public_path = write_keypair(path, password=password)
    pub = read_public_key(public_path)
    emit(
        ctx,
        {"secret_key": str(secret_path), "public_key": str(public_path), "key_id": pub.key_id_hex},
        f"wrote {secret_path} (keep it secret) and {public_path} (key id {pub.key_id_hex})",
    )


COMMANDS = (sign, keygen)
