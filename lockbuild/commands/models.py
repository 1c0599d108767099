"""The node's model options: ``install --models``, ``verify --models``, ``list --models`` (the commands'
glue, called from ``commands/verify.py``, ``commands/install.py`` and ``commands/installed.py``; the work
is ``hubcache/placing.py`` and ``hubcache/checking.py``)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from lockbuild.commands.clikit import emit, emit_warnings, progress_of

if TYPE_CHECKING:
    from lockbuild.install.installer import Installer, InstallOptions
    from lockbuild.trust.source import Source


def install_model_cli(
    ctx: click.Context, source: Source, models_dir: Path, *, opts: InstallOptions, installer: Installer
) -> None:
    """``install BUNDLE --models DIR``: a model bundle is placed in DIR's Hub cache; an engine bundle is
    installed under --root with HF_HUB_CACHE=DIR and HF_HUB_OFFLINE=1 among its runtime settings."""
    from lockbuild.hubcache.placing import place_model
    from lockbuild.trust import load_trust_store
    from lockbuild.trust import trust_dir as resolve_trust_dir
    from lockbuild.trust.opener import open_source

    started = time.monotonic()
    trusted = open_source(source, load_trust_store(resolve_trust_dir(opts.trust_dir)), threshold=opts.threshold)
    if trusted.manifest.model is None:
        result = installer.install_opened(trusted, started)
        verb = "installed" if result.status == "installed" else "already installed"
        emit(
            ctx,
            {**result.to_json(), "models": str(models_dir.absolute())},
            f"{verb}: {result.engine} {result.version}-{result.variant} at {result.path} "
            f"(models from {models_dir.absolute()})",
        )
        return
    done = place_model(
        trusted, models_dir, wait=opts.wait, progress=progress_of(ctx), allow_downgrade=opts.allow_downgrade
    )
    if done.removed:
        emit_warnings(
            ctx,
            [
                f"removed {len(done.removed)} entr{'ies' if len(done.removed) > 1 else 'y'} of the model's folder "
                f"that no signed record lists: {', '.join(done.removed[:5])}{' …' if len(done.removed) > 5 else ''}"
            ],
        )
    emit(
        ctx,
        {"status": "installed", **done.to_json()},
        f"installed: {done.repo} at {done.commit} ({done.files} files, {done.size / 1e6:,.1f} MB) in {done.snapshot}",
    )


def verify_models_cli(
    ctx: click.Context, models_dir: Path, repo: str | None, *, trust_dir: Path | None, threshold: int | None
) -> None:
    """``verify --models DIR [ORG/NAME]``: exit 0 when every installed file matches its record, 4 naming
    the first that does not."""
    from lockbuild.hubcache.checking import installed, verify_model
    from lockbuild.trust import load_trust_store
    from lockbuild.trust import trust_dir as resolve_trust_dir

    store = load_trust_store(resolve_trust_dir(trust_dir)) if trust_dir is not None else None
    checked = [verify_model(rec, store, threshold=threshold) for rec in installed(models_dir.absolute(), repo)]
    text = "\n".join(
        f"OK {c.repo} at {c.commit}: {c.files} files match the signed record"
        + (f"; signed by {', '.join(c.signers)}" if c.signers else "")
        for c in checked
    )
    emit(
        ctx,
        {"models": str(models_dir.absolute()), "verified": [c.to_json() for c in checked]},
        text or f"no models under {models_dir}",
    )


def list_models_cli(ctx: click.Context, models_dir: Path) -> None:
    """``list --models DIR``: each installed model and commit, as its kept record says (not re-hashed)."""
    from lockbuild.hubcache.checking import describe, installed

    rows = [describe(rec) for rec in installed(models_dir.absolute())]
    text = "\n".join(
        f"{c.repo:<40} {c.commit}  {c.files} files {c.size / 1e6:,.1f} MB" + ("  (refs/main)" if c.current else "")
        for c in rows
    )
    emit(
        ctx,
        {"models": str(models_dir.absolute()), "installed": [c.to_json() for c in rows]},
        text or f"no models under {models_dir}",
    )
