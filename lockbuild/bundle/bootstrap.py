"""The members that let a node with no lockbuild install lockbuild's own bundle with stock tools:
``bootstrap.sh``, a POSIX sh script, and ``SHA256SUMS``, the list it checks the extraction
against with ``sha256sum -c``. Both are signed members, like every other; the node checks the whole file
with ``minisign -V`` before it extracts anything."""

from __future__ import annotations

import re
from collections.abc import Sequence
from importlib.resources import files

from lockbuild.errors import RecipeError

SCRIPT = "bootstrap.sh"
SUMS = "SHA256SUMS"
KIND = "bootstrap"
_PLAIN = re.compile(r"[A-Za-z0-9._+/-]{1,255}")  # what may be put between the script's single quotes


def _template() -> str:
    return files("lockbuild.bundle").joinpath(SCRIPT).read_text(encoding="utf-8")


def script(*, version: str, python: str, interpreter: str | None, uv_wheel: str, bundle: str) -> bytes:
    """``bootstrap.sh`` for one bundle: the template with the bundle's own names filled in."""
    values = {"VERSION": version, "PYTHON": python, "INTERPRETER": interpreter or "", "UV": uv_wheel,
              "BUNDLE": bundle}
    text = _template()
    for key, value in values.items():
        if value and not _PLAIN.fullmatch(value):
            raise RecipeError(f"internal: the bootstrap's {key} {value[:80]!r} is not a plain name.")
        text = text.replace(f"@{key}@", value)
    return text.encode()


def sums(members: Sequence[tuple[str, str]]) -> bytes:
    """``SHA256SUMS`` for ``(path, sha256)`` members, in path order, as ``sha256sum -c`` reads it."""
    return "".join(f"{sha}  {path}\n" for path, sha in sorted(members)).encode()
