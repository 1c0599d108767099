"""Checking a standalone interpreter archive on the builder: it is the build's Python."""

from __future__ import annotations

import lzma
import tarfile
import zlib
from typing import BinaryIO

from lockbuild import interpreter
from lockbuild.errors import RecipeError

MAX_ENTRIES = 200_000


def check_interpreter_archive(f: BinaryIO, name: str, want: str) -> None:
    """``f`` (already checked against its published digest) holds ``python/bin/python<want>``, and no
    interpreter of another X.Y; the file name, when it names a version, must agree."""
    named = interpreter.version_from_filename(name)
    found: set[str] = set()
    try:
        with tarfile.open(fileobj=f, mode="r:*") as tf:
            for i, ti in enumerate(tf):
                if i >= MAX_ENTRIES:
                    raise RecipeError(f"the interpreter archive {name} has more than {MAX_ENTRIES} entries; refused.")
                if ti.isreg():
                    found |= interpreter.versions_in([ti.name])
    except (tarfile.TarError, OSError, EOFError, zlib.error, lzma.LZMAError) as exc:
        raise RecipeError(
            f"the interpreter archive {name} is not a readable tar archive: {exc}.",
            tip="Name a python-build-standalone install_only archive (python/bin/python3.X inside).",
        ) from None
    if found != {want} or (named is not None and named != want):
        shown = ", ".join(sorted(found)) or "no python/bin/python3.X at all"
        raise RecipeError(
            f"the interpreter {name} is not Python {want}, the build's python: expected python/bin/python{want} "
            f"inside, found {shown}" + (f" (its name says {named})" if named and named != want else "") + ".",
            tip=f"Name the {want} archive of the release (cpython-{want}.*-install_only.tar.gz), or change python.",
        )
