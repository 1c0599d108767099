"""``install ENGINE.lbz --models DIR``: the engine's runtime settings gain ``HF_HUB_CACHE=DIR`` and
``HF_HUB_OFFLINE=1``, where ``[engine.env]`` goes (``install/envfiles.py``): every entry point of the
environment finds the models ``install MODEL.lbz --models DIR`` placed there, and never asks the Hub."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from lockbuild import envtable
from lockbuild.bundle.manifest import Manifest
from lockbuild.errors import InstallError


def models_env(models: Path) -> tuple[tuple[str, str], ...]:
    """The settings for a models folder (absolute, plain text: checked by the one rule for settings)."""
    env = (("HF_HUB_CACHE", os.path.abspath(models)), ("HF_HUB_OFFLINE", "1"))  # noqa: PTH100 (as named)
    for name, value in env:
        why = envtable.problem(name, value, allow_network=())
        if why:
            raise InstallError(f"--models {str(models)[:200]!r}: {why}.", tip="Name a plain folder path.")
    return env


def with_models_env(m: Manifest, models: Path | None) -> Manifest:
    """``m`` with the models folder's settings among its runtime settings (they win over the recipe's)."""
    if models is None:
        return m
    env = dict(m.install.env)
    env.update(models_env(models))
    return dataclasses.replace(m, install=dataclasses.replace(m.install, env=tuple(sorted(env.items()))))
