"""Deterministic bytecode for an image: every ``.py`` under PREFIX compiled in checked-hash mode.

A checked-hash ``.pyc`` records its source's hash, not its mtime: the same bytes whatever time squashfs
gives, valid on first import from a read-only mount. It runs in the prefix view, so code objects name
PREFIX's paths. A file that does not compile is left without one, as pip and uv leave it."""

from __future__ import annotations

from pathlib import Path

from lockbuild.install.runenv import SYSTEM_PATH
from lockbuild.install.stage import Runner

COMPILE = """\
import compileall, py_compile, sys
compileall.compile_dir(sys.argv[1], quiet=2, force=True, workers=0,
                       invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
"""
COMPILE_TIMEOUT = 3600.0


def compile_tree(prefix: Path, run: Runner, home: Path) -> None:
    """Compile everything under ``prefix`` (the environment and an interpreter inside it) with its python,
    in an environment of exactly these variables (the hash seed fixed: sets and frozensets in one order)."""
    env = {
        "PATH": f"{prefix / 'bin'}:{SYSTEM_PATH}",
        "LANG": "C.UTF-8",
        "HOME": str(home),
        "PYTHONHASHSEED": "0",
        "PYTHONNOUSERSITE": "1",
    }
    run(
        [str(prefix / "bin" / "python"), "-c", COMPILE, str(prefix)],
        env=env,
        timeout=COMPILE_TIMEOUT,
        what="compiling the image's bytecode",
    )
