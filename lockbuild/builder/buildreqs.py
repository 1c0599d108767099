"""An sdist's build requirements, read without running it: PEP 517/518 ``build-system.requires`` from
the ``pyproject.toml`` at the top of the sdist, or setuptools' legacy default when it names none.

What a backend adds at build time (``get_requires_for_build_wheel``) cannot be known without running
it; the node builds with uv's ``--require-hashes``, so a requirement missing here fails the build
there, by name, and is never fetched.
"""

from __future__ import annotations

import lzma
import tarfile
import tomllib
import zipfile
import zlib
from typing import BinaryIO

from packaging.requirements import InvalidRequirement, Requirement

from lockbuild.errors import ResolveError

# pip's default for an sdist without build-system.requires (PEP 517's legacy path). setuptools' backend
# also asks for `wheel` at build time (get_requires_for_build_wheel, setuptools < 70.1): known in
# advance, so it is locked with the rest whenever the backend is setuptools.
LEGACY_REQUIRES = ("setuptools>=40.8.0", "wheel")
SETUPTOOLS_BACKENDS = (None, "setuptools.build_meta", "setuptools.build_meta:__legacy__")
MAX_PYPROJECT = 1 << 20
MAX_REQUIRES = 100


def build_requires(f: BinaryIO, filename: str) -> tuple[str, ...]:
    """The build requirements of the sdist ``filename`` (open in ``f``, already checked by digest)."""
    text = _pyproject(f, filename)
    if text is None:
        return LEGACY_REQUIRES
    try:
        data = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError) as exc:
        raise _bad(filename, f"its pyproject.toml is not valid TOML ({exc})") from None
    system = data.get("build-system")
    if not isinstance(system, dict) or "requires" not in system:
        return LEGACY_REQUIRES
    requires = system["requires"]
    if not isinstance(requires, list) or len(requires) > MAX_REQUIRES or not all(isinstance(r, str) for r in requires):
        raise _bad(filename, f"build-system.requires is not a list of at most {MAX_REQUIRES} strings")
    out: list[str] = []
    for r in requires:
        try:
            req = Requirement(r)
        except InvalidRequirement:
            raise _bad(filename, f"build-system.requires has an invalid requirement {r[:80]!r}") from None
        if req.url:
            raise _bad(filename, f"build-system.requires names a URL ({r[:80]!r}); only index packages can be locked")
        out.append(str(req))
    names = {Requirement(r).name.lower() for r in out}
    if system.get("build-backend") in SETUPTOOLS_BACKENDS and "setuptools" in names and "wheel" not in names:
        out.append("wheel")
    return tuple(sorted(set(out)))


def _bad(filename: str, why: str) -> ResolveError:
    return ResolveError(
        f"cannot read the build requirements of {filename}: {why}.",
        tip="Require a version of the package that publishes a wheel for this target, or fix its sdist.",
    )


def _pyproject(f: BinaryIO, filename: str) -> str | None:
    """The text of ``TOP/pyproject.toml`` in the sdist, or None when it has none."""
    try:
        if filename.endswith(".zip"):
            with zipfile.ZipFile(f) as zf:
                for info in zf.infolist():
                    if _top_level(info.filename) and not info.is_dir():
                        if info.file_size > MAX_PYPROJECT:
                            raise _bad(filename, "its pyproject.toml is larger than 1 MiB")
                        return zf.read(info).decode("utf-8")
            return None
        with tarfile.open(fileobj=f, mode="r:*") as tf:
            for ti in tf:
                if _top_level(ti.name) and ti.isreg():
                    if ti.size > MAX_PYPROJECT:
                        raise _bad(filename, "its pyproject.toml is larger than 1 MiB")
                    got = tf.extractfile(ti)
                    assert got is not None
                    return got.read().decode("utf-8")
        return None
    except (tarfile.TarError, zipfile.BadZipFile, OSError, EOFError, zlib.error, lzma.LZMAError) as exc:
        raise _bad(filename, f"it is not a readable archive ({exc})") from None
    except UnicodeDecodeError:
        raise _bad(filename, "its pyproject.toml is not UTF-8") from None


def _top_level(name: str) -> bool:
    parts = name.strip("/").split("/")
    return len(parts) == 2 and parts[1] == "pyproject.toml" and parts[0] not in ("", ".", "..")
