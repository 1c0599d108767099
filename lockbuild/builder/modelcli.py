"""``build MODEL.toml``'s glue (called from ``commands/builder.py``; the work is ``builder/modelbuild.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from lockbuild.clikit import emit, progress_of
from lockbuild.jsonio import JSON


def build_model_cli(
    ctx: click.Context,
    recipe: Path,
    *,
    key: Path,
    out: Path,
    expires: Any,
    threads: int | None,
    jobs: int,
    settings: Any,
    self_test: bool,
    build_spec: str | None,
    allow_readable_key: bool,
) -> None:
    """``build MODEL.toml``: the bundle written here, then signed in the fresh signing process (the key
    is read there only) and moved into place with its signature, as an engine's."""
    from lockbuild.builder.modelbuild import build_model
    from lockbuild.builder.pack import place_signed, statement_for
    from lockbuild.clikit import emit_warnings, take_password
    from lockbuild.errors import RecipeError, SignatureError
    from lockbuild.recipe.modelrecipe import load_model_recipe
    from lockbuild.trust.sign import check_key, sign_in_fresh_process

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
    checked = check_key(key, password=password, allow_readable_key=allow_readable_key)
    done = build_model(r, settings, out, jobs=jobs, threads=threads, progress=progress_of(ctx))
    emit_warnings(ctx, done.choice.warnings)
    w = done.written
    try:
        statement = statement_for(w, expires)
        if w.digests.blake2b is None:  # pragma: no cover - the writer always digests with prehash
            raise ValueError("a written bundle without its BLAKE2b-512 prehash cannot be signed")
        signer = sign_in_fresh_process(
            key,
            [(bytes(w.digests.blake2b), statement.to_comment())],
            password=password,
            allow_readable_key=allow_readable_key,
        )
        if signer.key_id != checked.key_id:
            raise SignatureError(
                f"the secret key {key} is key {signer.key_id_hex} now, but it was key {checked.key_id_hex} when "
                "the build started; expected the same key throughout.",
                tip="Someone replaced the key file during the build: find out who; nothing was signed.",
            )
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
