"""``[engine.env]`` written into an environment so that every entry point sees it (:func:`write`;
docs/site-administrators.md, "Runtime settings"). The values were checked by :mod:`lockbuild.envtable`
when the signed manifest was parsed; they are written as Python literals and single-quoted shell words."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path

from lockbuild.errors import InstallError
from lockbuild.fsio import append_existing, create_under

MODULE = "_lockbuild_env"

_HEADER = (
    '"""Written by lockbuild: the engine\'s runtime settings ([engine.env] in the signed manifest).\n'
    'Set when an interpreter of this environment starts; a value already set wins."""\n'
)


def module_text(env: Sequence[tuple[str, str]]) -> str:
    pairs = ", ".join(f"({k!r}, {v!r})" for k, v in env)
    return (
        f"{_HEADER}\n\ndef _set() -> None:\n    import os\n\n    for name, value in ({pairs},):\n"
        "        os.environ.setdefault(name, value)\n\n\n_set()\n"
    )


def sh_lines(env: Sequence[tuple[str, str]]) -> str:
    lines = [f'[ -n "${{{k}+x}}" ] || {{ {k}={shlex.quote(v)}; export {k}; }}' for k, v in env]
    return "\n# lockbuild: the engine's runtime settings ([engine.env])\n" + "\n".join(lines) + "\n"


def _fish_quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def fish_lines(env: Sequence[tuple[str, str]]) -> str:
    lines = [f"set -q {k}; or set -gx {k} {_fish_quote(v)}" for k, v in env]
    return "\n# lockbuild: the engine's runtime settings ([engine.env])\n" + "\n".join(lines) + "\n"


def site_packages(env_dir: Path, python: str) -> str:
    """The environment's site-packages, relative to it (as uv venv makes it on Linux)."""
    rel = f"lib/python{python}/site-packages"
    if not (env_dir / rel).is_dir() or (env_dir / rel).is_symlink():
        raise InstallError(f"the new environment has no {rel}/ directory; cannot place its runtime settings.")
    return rel


def _append(path: Path, text: str) -> None:
    """Append to a file uv venv just made in the staging directory (never through a link)."""
    append_existing(path, text)  # absent: that shell's script is not made by this uv


def write(env_dir: Path, python: str, env: Sequence[tuple[str, str]]) -> None:
    """Place the runtime settings in the (staging) environment; nothing when there are none.

    ``site-packages/_lockbuild_env.pth`` imports ``_lockbuild_env``, which sets each variable with
    ``os.environ.setdefault`` when any interpreter of the environment starts (console scripts, ``bin/python``
    and what they spawn); ``bin/activate`` and ``bin/activate.fish`` export the same values for non-Python
    programs. Either way a value the operator already set wins (``HF_HUB_OFFLINE=0 vllm ...``)."""
    if not env:
        return
    rel = site_packages(env_dir, python)
    with create_under(env_dir, f"{rel}/{MODULE}.py") as f:
        f.write(module_text(env).encode())
    with create_under(env_dir, f"{rel}/{MODULE}.pth") as f:
        f.write(f"import {MODULE}\n".encode())
    _append(env_dir / "bin" / "activate", sh_lines(env))
    _append(env_dir / "bin" / "activate.fish", fish_lines(env))
