"""``build MODEL.toml``'s glue (called from ``commands/builder.py``; the work is ``builder/modelbuild.py``)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import TYPE_CHECKING

import click

from lockbuild.commands.clikit import emit, progress_of
from lockbuild.jsonio import JSON

if TYPE_CHECKING:
    from lockbuild.settings import Settings


def build_model_cli(
    ctx: click.Context,
    recipe: Path,
    *,
    key: Path,
    out: Path,
    expires: dt.datetime | None,
    threads: int | None,
    jobs: int,
    settings: Settings,
    self_test: bool,
    build_spec: str | None,
    allow_readable_key: bool,
) -> None:
    """``build MODEL.toml``: the bundle written here, then signed in the fresh signing process (the key
    is read there only) and moved into place with its signature, as an engine's."""
    from lockbuild.builder.modelbuild import build_model
    from lockbuild.builder.pack import place_signed, statement_for
    from lockbuild.commands.clikit import emit_warnings, take_password
    from lockbuild.errors import RecipeError
    from lockbuild.recipe.modelrecipe import load_model_recipe
    from lockbuild.trust.sign import KeyFileSigner

    password = take_password()
    if self_test or build_spec is not None:
        err = RecipeError(
            f"{recipe} is a model recipe: --self-test and --build apply to engine recipes only.",
            tip="Test a model with an engine: lockbuild test ENGINE.lbz --model MODEL.lbz.",
        )
        err.exit_code = 2
        raise err
    r = load_model_recipe(recipe)
    # The key opened and decrypted now, before anything is asked of the Hub, in a signing process that
    # signs nothing and exits (as for an engine); it is read again to sign.
    key_signer = KeyFileSigner(key, password, allow_readable_key)
    checked = key_signer.check()
    done = build_model(r, settings, out, jobs=jobs, threads=threads, progress=progress_of(ctx))
    emit_warnings(ctx, done.choice.warnings)
    w = done.written
    try:
        statement = statement_for(w, expires)
        signer = key_signer.sign_as_checked([(w.digests.prehash(w.final.name), statement.to_comment())], checked)
        packed = place_signed(w, statement, signer=signer.key_id, block=signer.blocks[0])
    finally:
        w.discard()
    result: dict[str, JSON] = {
        "bundle": str(packed.bundle),
        "signature": str(packed.signature),
        "sha256": packed.sha256,
        "size": packed.size,
        "members": len(packed.manifest.members),
        "signer": signer.key_id_hex,
        "repo": r.repo,
        "commit": r.revision,
        "files": [f.path for f in done.choice.files],
        "pickles": list(done.choice.selection.pickles),
        "code": list(done.choice.selection.code),
        "warnings": list(done.choice.warnings),
    }
    emit(
        ctx,
        {"bundles": [result], "warnings": list(settings.warnings)},
        f"built {packed.bundle} ({packed.size / 1e6:.1f} MB, {len(done.choice.files)} files of {r.repo} at "
        f"{r.revision})\n  sha256 {packed.sha256}\n  signed by {signer.key_id_hex} -> {packed.signature}",
    )
