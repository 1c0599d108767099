"""The node's model commands: ``install --models``, ``verify --models``, ``list --models`` (CLI glue only;
the work is ``install/models.py`` and ``install/modelcheck.py``)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import click

from lockbuild.clikit import _emit, _progress


def install_model_cli(ctx: click.Context, bundle: str, models_dir: Path, *, store_dir: Path | None, opts: Any,
                      installer: Any) -> None:
    """``install BUNDLE --models DIR``: a model bundle is placed in DIR's Hub cache; an engine bundle is
    installed under --root with HF_HUB_CACHE=DIR and HF_HUB_OFFLINE=1 among its runtime settings."""
    from lockbuild.install.models import place_model
    from lockbuild.site.sources import named_source
    from lockbuild.trust import load_store
    from lockbuild.trust import trust_dir as resolve_trust_dir
    from lockbuild.trust.opener import open_source

    started = time.monotonic()
    with named_source(bundle, store=store_dir) as source:
        trusted = open_source(source, load_store(resolve_trust_dir(opts.trust_dir)), threshold=opts.threshold)
        if trusted.manifest.model is None:
            result = installer.install_opened(trusted, started)
            verb = "installed" if result.status == "installed" else "already installed"
            _emit(ctx, {**result.to_json(), "models": str(models_dir.absolute())},
                  f"{verb}: {result.engine} {result.version}-{result.variant} at {result.path} "
                  f"(models from {models_dir.absolute()})")
            return
        done = place_model(trusted, models_dir, wait=opts.wait, progress=_progress(ctx))
    _emit(ctx, {"status": "installed", **done.to_json()},
          f"installed: {done.repo} at {done.commit} ({done.files} files, {done.size / 1e6:,.1f} MB) in {done.snapshot}")
