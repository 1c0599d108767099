"""The members that let a node with no lockbuild install lockbuild's own bundle with stock tools:
``bootstrap.sh``, a POSIX sh script, and ``SHA256SUMS``, the list it checks the extraction
against with ``sha256sum -c``. Both are signed members, like every other; the node checks the whole file
with ``minisign -V`` before it extracts anything."""

from __future__ import annotations

import re
from collections.abc import Sequence

from lockbuild.errors import RecipeError

SCRIPT = "bootstrap.sh"
TEMPLATE = f"lockbuild/bundle/{SCRIPT}"  # its path in lockbuild's own wheel, where the builder reads it
SUMS = "SHA256SUMS"
KIND = "bootstrap"
_PLAIN = re.compile(r"[A-Za-z0-9._+/-]{1,255}")  # what may be put between the script's single quotes


def script(template: bytes, *, version: str, python: str, interpreter: str | None, uv_wheel: str, bundle: str) -> bytes:
    """``bootstrap.sh`` for one bundle: ``template`` (the ``TEMPLATE`` file of the very wheel the bundle
    carries, never the running lockbuild's package data, which may hold an uncommitted edit) with the
    bundle's own names filled in."""
    values = {"VERSION": version, "PYTHON": python, "INTERPRETER": interpreter or "", "UV": uv_wheel, "BUNDLE": bundle}
    try:
        text = template.decode("utf-8")
    except UnicodeDecodeError:
        raise RecipeError(f"{TEMPLATE} in lockbuild's own wheel is not UTF-8 text.") from None
    for key, value in values.items():
        if value and not _PLAIN.fullmatch(value):
            raise RecipeError(f"internal: the bootstrap's {key} {value[:80]!r} is not a plain name.")
        text = text.replace(f"@{key}@", value)
    return text.encode()


def sums(members: Sequence[tuple[str, str]]) -> bytes:
    """``SHA256SUMS`` for ``(path, sha256)`` members, in path order, as ``sha256sum -c`` reads it."""
    return "".join(f"{sha}  {path}\n" for path, sha in sorted(members)).encode()
