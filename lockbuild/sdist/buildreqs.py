"""An sdist's build system, read without running it: PEP 517/518 ``build-system.requires``,
``build-backend`` and ``backend-path`` from the ``pyproject.toml`` at the top of the sdist, or
setuptools' legacy default when it names none. A requirement a backend adds at build time fails the
node's ``--require-hashes`` build by name; it is never fetched."""

from __future__ import annotations

import tarfile
import zipfile
from dataclasses import dataclass
from typing import BinaryIO

from packaging.requirements import InvalidRequirement, Requirement

from lockbuild import wheelfile
from lockbuild.documents import TomlRefusal, loads_toml
from lockbuild.errors import ResolveError
from lockbuild.limits import MiB

# pip's default for an sdist without build-system.requires (PEP 517's legacy path). setuptools' backend
# also asks for `wheel` at build time (get_requires_for_build_wheel, setuptools < 70.1): known in
# advance, so it is locked with the rest whenever the backend is setuptools.
LEGACY_REQUIRES = ("setuptools>=40.8.0", "wheel")
SETUPTOOLS_BACKENDS = (None, "setuptools.build_meta", "setuptools.build_meta:__legacy__")
MAX_PYPROJECT = MiB
MAX_REQUIRES = 100


LEGACY_BACKEND = "setuptools.build_meta:__legacy__"
MAX_BACKEND_PATHS = 20


@dataclass(frozen=True)
class BuildSystem:
    """What an sdist's pyproject.toml says about its build: requirements, backend object, backend-path."""

    requires: tuple[str, ...]
    backend: str
    backend_path: tuple[str, ...] = ()


def build_requires(f: BinaryIO, filename: str) -> tuple[str, ...]:
    """The build requirements of the sdist ``filename`` (open in ``f``, already checked by digest)."""
    return build_system(f, filename).requires


def build_system(f: BinaryIO, filename: str) -> BuildSystem:
    """The build system of the sdist ``filename`` (open in ``f``, already checked by digest)."""
    raw = top_level_file(f, filename, "pyproject.toml")
    if raw is None:
        return BuildSystem(LEGACY_REQUIRES, LEGACY_BACKEND)

    def refuse(why: TomlRefusal) -> ResolveError:
        if why.kind == "encoding":
            return _bad(filename, "its pyproject.toml is not UTF-8")
        return _bad(filename, f"its pyproject.toml is not valid TOML ({why.detail})")

    data = loads_toml(raw, max_bytes=len(raw), refuse=refuse)  # bounded by top_level_file
    system = data.get("build-system")
    if not isinstance(system, dict) or "requires" not in system:
        return BuildSystem(LEGACY_REQUIRES, LEGACY_BACKEND)
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
    backend = system.get("build-backend", LEGACY_BACKEND)
    paths = system.get("backend-path", [])
    if not isinstance(backend, str) or not backend or len(backend) > 200:
        raise _bad(filename, "build-system.build-backend is not a short string")
    if not isinstance(paths, list) or len(paths) > MAX_BACKEND_PATHS or not all(isinstance(p, str) for p in paths):
        raise _bad(filename, f"build-system.backend-path is not a list of at most {MAX_BACKEND_PATHS} strings")
    return BuildSystem(tuple(sorted(set(out))), backend, tuple(paths))


def _bad(filename: str, why: str) -> ResolveError:
    return ResolveError(
        f"cannot read the build requirements of {filename}: {why}.",
        tip="Require a version of the package that publishes a wheel for this target, or fix its sdist.",
    )


def top_level_file(f: BinaryIO, filename: str, member: str) -> bytes | None:
    """The bytes of ``TOP/member`` in the sdist (at most 1 MiB), or None when it has none."""
    try:
        if filename.endswith(".zip"):
            with zipfile.ZipFile(f) as zf:
                for info in zf.infolist():
                    if _top_level(info.filename, member) and not info.is_dir():
                        if info.file_size > MAX_PYPROJECT:
                            raise _bad(filename, f"its {member} is larger than 1 MiB")
                        return zf.read(info)
            return None
        with tarfile.open(fileobj=f, mode="r:*") as tf:
            for ti in tf:
                if _top_level(ti.name, member) and ti.isreg():
                    if ti.size > MAX_PYPROJECT:
                        raise _bad(filename, f"its {member} is larger than 1 MiB")
                    got = tf.extractfile(ti)
                    if got is None:
                        return None
                    return got.read(MAX_PYPROJECT)
        return None
    except _READ_ERRORS as exc:
        raise _bad(filename, f"it is not a readable archive ({exc})") from None


# What a damaged sdist raises: the zip readers' list (lockbuild.wheelfile, one place), and tarfile's own.
_READ_ERRORS: tuple[type[Exception], ...] = (tarfile.TarError, *wheelfile.READ_ERRORS)


def _top_level(name: str, member: str) -> bool:
    parts = name.strip("/").split("/")
    return len(parts) == 2 and parts[1] == member and parts[0] not in ("", ".", "..")
