"""The only place that runs ``uv pip compile``: requirements in, a hashed lock's text out."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from lockbuild.errors import ResolveError
from lockbuild.recipe import SecondIndex
from lockbuild.target import Target
from lockbuild.times import iso
from lockbuild.uvtool import clean_env, uv_binary

RESOLVE_TIMEOUT = 1800


@dataclass(frozen=True)
class Resolution:
    format: Literal["requirements.txt", "pylock.toml"]
    text: str
    argv: tuple[str, ...]


def second_index_project(requirements: Sequence[str], second: SecondIndex) -> str:
    """A pyproject.toml in which the second index is explicit and named only for its packages."""
    q = json.dumps
    deps = "".join(f"    {q(r)},\n" for r in requirements)
    sources = "".join(f'{q(name)} = {{ index = "lockbuild-second" }}\n' for name in second.packages)
    return (
        '[project]\nname = "lockbuild-resolve"\nversion = "0"\n'
        f"dependencies = [\n{deps}]\n\n"
        f'[[tool.uv.index]]\nname = "lockbuild-second"\nurl = {q(second.url)}\nexplicit = true\n\n'
        f"[tool.uv.sources]\n{sources}"
    )


_NETWORK_SIGNS = ("Failed to fetch", "dns error", "Connection refused", "error sending request", "timed out")


def _resolve_tip(stderr: str) -> str:
    if any(sign in stderr for sign in _NETWORK_SIGNS):
        return "uv could not reach the index: check the network, the proxy settings and LOCKBUILD_INDEX_URL."
    return (
        "Check the requirements against the index as of that date (a version may be newer than the "
        "cut-off), or set as-of on the build."
    )


def _tail(text: str, lines: int = 8) -> str:
    kept = [line for line in text.strip().splitlines() if line.strip()]
    return "\n".join(f"    {line}" for line in kept[-lines:])


def compile_lock(
    requirements: Sequence[str],
    target: Target,
    as_of: dt.datetime,
    *,
    index_url: str,
    second: SecondIndex | None,
    workdir: Path,
    cache_dir: Path,
) -> Resolution:
    """Resolve ``requirements`` for the target as the index stood at ``as_of``, with every hash."""
    out = workdir / ("pylock.toml" if second else "requirements.txt")
    argv = [
        uv_binary(), "pip", "compile",
        "--python-version", target.python,
        "--python-platform", target.platform,
        "--exclude-newer", iso(as_of),
        "--index-url", index_url,
        "--generate-hashes",
        "--no-header", "--quiet",
        "--output-file", str(out),
    ]  # fmt: skip
    stdin: str | None
    if second is None:
        argv.append("-")
        stdin = "".join(r + "\n" for r in requirements)
    else:
        project = workdir / "pyproject.toml"
        project.write_text(second_index_project(requirements, second), encoding="utf-8")
        argv += ["--format", "pylock.toml"]
        for name in second.packages:
            # The second index publishes no upload times; the recipe pins these with == instead.
            argv += ["--exclude-newer-package", f"{name}=false"]
        argv.append(str(project))
        stdin = None
    env = clean_env(cache_dir)
    try:
        proc = subprocess.run(
            argv,
            input=stdin,
            capture_output=True,
            text=True,
            env=env,
            cwd=workdir,
            timeout=RESOLVE_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise ResolveError(f"uv pip compile did not finish within {RESOLVE_TIMEOUT} s.") from None
    except OSError as exc:
        raise ResolveError(f"cannot run uv at {argv[0]}: {exc.strerror}") from None
    if proc.returncode != 0:
        raise ResolveError(
            f"uv could not resolve the requirements for Python {target.python} on {target.platform} "
            f"as of {iso(as_of)}:\n{_tail(proc.stderr)}",
            tip=_resolve_tip(proc.stderr),
        )
    return Resolution("pylock.toml" if second else "requirements.txt", out.read_text(encoding="utf-8"), tuple(argv))
