"""How lockbuild runs uv: which binary, and an environment no user or system configuration reaches."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from lockbuild.errors import LockbuildError

# Variables that would let a node's or builder's own settings steer uv or pip.
_DROPPED_PREFIXES = ("UV_", "PIP_", "VIRTUAL_ENV", "CONDA_", "PYTHONPATH", "PYTHONHOME")


def clean_env(cache_dir: Path, *, offline: bool = False) -> dict[str, str]:
    """The environment uv runs in: no uv.toml, pip.conf or UV_*/PIP_* variables, its own cache."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_DROPPED_PREFIXES)}
    env["UV_NO_CONFIG"] = "1"
    env["UV_CACHE_DIR"] = str(cache_dir)
    env["UV_PYTHON_DOWNLOADS"] = "never"
    env["PIP_CONFIG_FILE"] = os.devnull
    env["NO_COLOR"] = "1"
    if offline:
        env["UV_OFFLINE"] = "1"
    return env


def uv_binary() -> str:
    """The uv that came with lockbuild's own installation (the ``uv`` package)."""
    try:
        from uv import find_uv_bin
    except ImportError:  # pragma: no cover - uv is a dependency
        raise LockbuildError("the uv package is not installed; expected it beside lockbuild.") from None
    return str(find_uv_bin())


def uv_version(binary: str) -> str:
    """The version a uv binary reports, e.g. "0.13.9"."""
    try:
        proc = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=60, check=False)
    except OSError as exc:
        raise LockbuildError(f"cannot run uv at {binary}: {exc.strerror}") from None
    parts = proc.stdout.split()
    if proc.returncode != 0 or len(parts) < 2:
        raise LockbuildError(f"{binary} --version failed; expected 'uv X.Y.Z', found {proc.stdout.strip()!r}")
    return parts[1]
