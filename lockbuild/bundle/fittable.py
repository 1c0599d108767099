"""The measured GPU fit in a manifest (format 5): ``[install.gpu.measured]`` with the CUDA release and
one ``[[install.gpu.measured.libraries]]`` per CUDA library (its package, whether the package is gated,
its SASS and PTX lists), written and read strictly. The node decides with these facts, not the claims."""

from __future__ import annotations

import re
from typing import Any

from lockbuild.errors import IntegrityError
from lockbuild.gpu.fatbin import Kernels
from lockbuild.gpu.fit import GpuFit, Library, PackageFit
from lockbuild.gpu.vocab import cuda_release, parse_arch

MAX_LIBRARIES = 10_000
MAX_ARCHS = 64
_PACKAGE = re.compile(r"[a-z0-9]+(?:[-_.][a-z0-9]+)*")
_FILE = re.compile(r"[A-Za-z0-9._+/-]{1,255}")
_TIP = "The bundle is malformed; do not install it. Fetch it again from its publisher, or rebuild it."


def fit_toml_lines(fit: GpuFit, q: Any) -> list[str]:
    lines = ["[install.gpu.measured]", *([f"cuda = {q(fit.cuda)}"] if fit.cuda else []), ""]
    for p in fit.packages:
        for lib in p.libraries:
            lines += [
                "[[install.gpu.measured.libraries]]",
                f"package = {q(p.name)}",
                f"gated = {'true' if p.gated else 'false'}",
                f"file = {q(lib.file)}",
                f"sass = [{', '.join(q(str(a)) for a in lib.kernels.sass)}]",
                f"ptx = [{', '.join(q(str(a)) for a in lib.kernels.ptx)}]",
                "",
            ]
    return lines


def _bad(what: str) -> IntegrityError:
    return IntegrityError(f"the manifest's install.gpu.measured {what}; the bundle is malformed.", tip=_TIP)


def _archs(lib: dict[str, Any], key: str) -> tuple[Any, ...]:
    values = lib.get(key)
    if not isinstance(values, list) or len(values) > MAX_ARCHS:
        raise _bad(f"{key} is not a list of at most {MAX_ARCHS} architectures")
    archs = [parse_arch(v) for v in values]
    if None in archs or archs != sorted(set(archs)):  # type: ignore[type-var]
        raise _bad(f'{key} {str(values)[:80]} is not a sorted list of architectures like "9.0a"')
    return tuple(archs)


def parse_fit(data: Any) -> GpuFit:
    """``[install.gpu.measured]`` as a :class:`GpuFit`, strictly."""
    if not isinstance(data, dict) or set(data) - {"cuda", "libraries"}:
        raise _bad("is not a table of cuda and libraries")
    cuda = data.get("cuda")
    if cuda is not None and (not isinstance(cuda, str) or cuda_release(cuda) != cuda):
        raise _bad(f'cuda {str(cuda)[:20]!r} is not a CUDA release like "13.0"')
    libs = data.get("libraries", [])
    if not isinstance(libs, list) or len(libs) > MAX_LIBRARIES:
        raise _bad(f"libraries is not a list of at most {MAX_LIBRARIES} tables")
    packages: dict[str, tuple[bool, list[Library]]] = {}
    for lib in libs:
        if not isinstance(lib, dict) or set(lib) != {"package", "gated", "file", "sass", "ptx"}:
            raise _bad("has a library that is not a table of package, gated, file, sass and ptx")
        name, gated, file = lib["package"], lib["gated"], lib["file"]
        if not (isinstance(name, str) and _PACKAGE.fullmatch(name)) or not isinstance(gated, bool):
            raise _bad(f"has a library of package {str(name)[:60]!r} that is not a plain package name")
        if not (isinstance(file, str) and _FILE.fullmatch(file)):
            raise _bad(f"has a library file {str(file)[:80]!r} that is not a plain path")
        seen = packages.setdefault(name, (gated, []))
        if seen[0] != gated:
            raise _bad(f"says package {name} is both gated and not")
        seen[1].append(Library(file, Kernels(_archs(lib, "sass"), _archs(lib, "ptx"))))
    return GpuFit(tuple(PackageFit(n, tuple(libs_), g) for n, (g, libs_) in packages.items()), cuda)
