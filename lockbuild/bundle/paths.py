"""Path safety: the one set of rules for names that come from a bundle or an archive (creating a file
under a directory is lockbuild.fsio's).

Used by the bundle reader (members), archive extraction (source and assets) and the manifest parser
(install-table paths). A path is refused, never rewritten.
"""

from __future__ import annotations

import unicodedata
from pathlib import PurePosixPath

from lockbuild.errors import IntegrityError
from lockbuild.limits import DEFAULT_LIMITS, Limits

_TIP = "The bundle is malformed; do not install it. Fetch it again from its publisher, or rebuild it."

# What `uv venv` puts in an environment: a placed file may never take one of these names.
_ENV_FILES = ("pyvenv.cfg", "lockbuild.json", "CACHEDIR.TAG", ".gitignore", ".lock")
_ENV_DIRS = ("lib", "lib64", "lockbuild")
_ENV_BIN_PREFIXES = ("python", "activate", "pip", "pydoc", "deactivate")


def path_problem(path: str, limits: Limits = DEFAULT_LIMITS) -> str | None:
    """Why ``path`` is not a plain relative path (None when it is): relative, normalised, NFC, no
    control characters, no backslash, no empty, '.' or '..' component, bounded length."""
    if not path or len(path.encode("utf-8", "surrogatepass")) > limits.max_path:
        return f"an empty path or one longer than {limits.max_path} bytes"
    if path.startswith("/") or "\\" in path or "\0" in path:
        return "an absolute path, a backslash or a NUL"
    if any(part in ("", ".", "..") for part in path.split("/")):
        return "an empty, '.' or '..' path component"
    if any(unicodedata.category(c).startswith("C") for c in path):
        return "a control character"
    if path != unicodedata.normalize("NFC", path):
        return "a path that is not in Unicode NFC form"
    return None


def check_member_path(path: str, limits: Limits = DEFAULT_LIMITS) -> str:
    """A member path must be relative, normalised, and plain; refused (never rewritten) otherwise."""
    problem = path_problem(path, limits)
    if problem:
        raise IntegrityError(f"refused member path {path[:120]!r}: {problem}.", tip=_TIP)
    return path


def collision_key(path: str) -> str:
    """Two paths with one key would be one file on some disk (case-insensitive, normalising): refused."""
    return unicodedata.normalize("NFKC", path).casefold()


def claim(kinds: dict[str, str], key: str, kind: str) -> str | None:
    """Record an entry (kind 'file' or 'dir') under its collision key; say why not if a file collides
    with another entry or stands where a directory must be."""
    for parent in PurePosixPath(key).parents:
        if str(parent) == ".":
            break
        if kinds.setdefault(str(parent), "dir") == "file":
            return f"it needs {parent} to be a directory, but that is a file"
    old = kinds.get(key)
    if old is not None and (old == "file" or kind == "file"):
        return "it collides with another entry"
    kinds[key] = kind
    return None


def env_reserved(path: str) -> str | None:
    """Why a file placed at ``path`` (relative to an environment) would shadow a file of the environment
    itself, e.g. bin/python or pyvenv.cfg; None when the name is free."""
    parts = collision_key(path).split("/")
    if len(parts) == 1 and parts[0] in _ENV_FILES:
        return f"{path} is a file of the environment itself"
    if parts[0] in _ENV_DIRS:
        return f"{parts[0]}/ belongs to the environment's own packages"
    if parts[0] in ("bin", "scripts") and len(parts) > 1 and parts[1].startswith(_ENV_BIN_PREFIXES):
        return f"{path} is the environment's interpreter or activation script"
    return None
