"""The fit of a build: which GPUs its binaries have kernels for, measured from its packages' fatbins. Pure.

A GPU of capability X.Y fits a package when a library has plain or ``f`` SASS of the same major at or below
X.Y, ``a`` SASS for exactly X.Y, or PTX at or below X.Y; a build fits when every gated package does. The
node decides with the per-package lists, never with a range (7.5-12.1 has no 11.x kernels)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any, Literal

from lockbuild.gpu.fatbin import Kernels
from lockbuild.gpu.vocab import (
    KNOWN_CAPABILITIES,
    Arch,
    Capability,
    capability_text,
    cuda_release,
    min_driver_for,
    parse_arch,
)

Coverage = Literal["sass", "jit"]
DEFAULT_GATE = ("torch",)  # besides the engine's own package
CUDA_RUNTIME_PREFIX = "nvidia-cuda-runtime"
# Friendlier names of well-known libraries, for the text line.
KNOWN_LIBRARIES = {"_vllm_fa2_C": "flash-attention 2", "_vllm_fa3_C": "flash-attention 3"}
# The libraries that decide whether a package runs on a GPU, for packages that also ship libraries only some
# GPUs use (a backend chosen at run time by capability: FlashAttention, FlashMLA) or helpers with older
# kernels (torch's linalg): every deciding library must fit. A package not listed fits when any library does.
DECIDING_LIBRARIES: Mapping[str, tuple[str, ...]] = {
    "torch": ("torch/lib/libtorch_cuda.so",),
    "vllm": ("vllm/_C*.so", "vllm/_moe_C*.so"),
}


def _ptx_runs_on(arch: Arch, cap: Capability) -> bool:
    """PTX JIT-compiles for a GPU at or above its version (``a`` PTX: exactly; ``f``: the same major)."""
    if arch.suffix == "a":
        return cap == arch.capability
    if arch.suffix == "f":
        return cap[0] == arch.major and cap >= arch.capability
    return cap >= arch.capability


def coverage(kernels: Kernels, cap: Capability) -> Coverage | None:
    """How a GPU of capability ``cap`` runs code with these kernels: SASS, JIT from PTX, or not at all."""
    if any(a.runs_on(cap) for a in kernels.sass):
        return "sass"
    if any(_ptx_runs_on(a, cap) for a in kernels.ptx):
        return "jit"
    return None


@dataclass(frozen=True)
class Library:
    file: str
    kernels: Kernels


@dataclass(frozen=True)
class PackageFit:
    name: str
    libraries: tuple[Library, ...]
    gated: bool

    @property
    def kernels(self) -> Kernels:
        sass = {a for lib in self.libraries for a in lib.kernels.sass}
        ptx = {a for lib in self.libraries for a in lib.kernels.ptx}
        return Kernels(tuple(sorted(sass)), tuple(sorted(ptx)))

    def deciding(self) -> tuple[Library, ...]:
        """The libraries that decide (``DECIDING_LIBRARIES``), where the package has any of them."""
        patterns = DECIDING_LIBRARIES.get(self.name, ())
        return tuple(lib for lib in self.libraries if any(fnmatchcase(lib.file, p) for p in patterns))

    def has_ptx(self) -> bool:
        """Whether later GPUs still run the package by JIT: every deciding library (else any) has PTX."""
        deciding = self.deciding()
        return all(lib.kernels.ptx for lib in deciding) if deciding else bool(self.kernels.ptx)

    def coverage(self, cap: Capability) -> Coverage | None:
        """A package fits when every deciding library does; without deciding libraries, when one of its
        libraries does (each library a different set of kernels)."""
        deciding = self.deciding()
        if deciding:
            each = [coverage(lib.kernels, cap) for lib in deciding]
            return None if None in each else "jit" if "jit" in each else "sass"
        found = [c for lib in self.libraries if (c := coverage(lib.kernels, cap)) is not None]
        return "sass" if "sass" in found else "jit" if found else None

    def to_json(self) -> dict[str, Any]:
        k = self.kernels
        return {
            "name": self.name,
            "gated": self.gated,
            **k.to_json(),
            "files": [lib.file for lib in self.libraries],
            "libraries": [{"file": lib.file, **lib.kernels.to_json()} for lib in self.libraries],
        }


@dataclass(frozen=True)
class GpuFit:
    packages: tuple[PackageFit, ...]
    cuda: str | None

    @property
    def gated(self) -> tuple[PackageFit, ...]:
        return tuple(p for p in self.packages if p.gated)

    def coverage(self, cap: Capability) -> Coverage | None:
        """How the build runs on a GPU of capability ``cap``: every gated package by SASS, some by JIT, or not."""
        found = [p.coverage(cap) for p in self.gated]
        if None in found:
            return None
        return "jit" if "jit" in found else "sass"

    def lacking(self, cap: Capability) -> tuple[str, ...]:
        """The gated packages with neither SASS nor PTX for a GPU of capability ``cap``."""
        return tuple(p.name for p in self.gated if p.coverage(cap) is None)

    @property
    def min_capability(self) -> Capability | None:
        return next((c for c in KNOWN_CAPABILITIES if self.coverage(c) is not None), None) if self.gated else None

    @property
    def max_capability(self) -> Capability | None:
        caps = [a.capability for p in self.gated for a in p.kernels.sass]
        return max(caps) if caps else None

    @property
    def jit_beyond(self) -> bool:
        return bool(self.gated) and all(p.has_ptx() for p in self.gated)

    @property
    def min_driver(self) -> str | None:
        return min_driver_for(self.cuda) if self.cuda else None

    def to_json(self) -> dict[str, Any]:
        sass = sorted({a for p in self.gated for a in p.kernels.sass})
        ptx = sorted({a for p in self.gated for a in p.kernels.ptx})
        low, high = self.min_capability, self.max_capability
        return {
            "sass": [str(a) for a in sass],
            "ptx": [str(a) for a in ptx],
            "cuda": self.cuda,
            "min_driver": self.min_driver,
            "min_capability": capability_text(low) if low else None,
            "max_capability": capability_text(high) if high else None,
            "jit_beyond": self.jit_beyond,
            "packages": [p.to_json() for p in self.packages],
        }

    def narrow_libraries(self) -> list[tuple[str, Library]]:
        """Libraries with kernels for fewer of the capabilities the build fits than the build (reported,
        not gated): (package, library)."""
        fitting = [c for c in KNOWN_CAPABILITIES if self.coverage(c) is not None]
        return [
            (p.name, lib)
            for p in self.packages
            for lib in p.libraries
            if any(coverage(lib.kernels, c) is None for c in fitting)
        ]

    def line(self) -> str:
        """One line per build: ``GPU fit: CUDA 13.0 (driver >= 580.65.06), kernels for 7.5-12.1 (torch, vllm);
        flash-attention 2: 8.0 only``."""
        parts = []
        if self.cuda:
            parts.append(f"CUDA {self.cuda}" + (f" (driver >= {self.min_driver})" if self.min_driver else ""))
        low, high = self.min_capability, self.max_capability
        names = ", ".join(p.name for p in self.gated)
        if not self.gated:
            parts.append("no gated package has CUDA kernels")
        elif low is None:
            parts.append(f"no GPU fits every gated package ({names})")
        else:
            span = capability_text(low) + (f"-{capability_text(high)}" if high and high != low else "")
            parts.append(f"kernels for {span}{' and later by JIT' if self.jit_beyond else ''} ({names})")
        head = "GPU fit: " + ", ".join(parts)
        narrow = self.narrow_libraries()
        tails = [f"{_library_name(lib.file)}: {_archs(lib.kernels)} only" for _, lib in narrow[:4]]
        if len(narrow) > 4:
            tails.append(f"{len(narrow) - 4} more narrower libraries")
        return "; ".join([head, *tails])


def _library_name(file: str) -> str:
    stem = file.rsplit("/", 1)[-1].split(".", 1)[0]
    return KNOWN_LIBRARIES.get(stem, file)


def _archs(k: Kernels) -> str:
    return ", ".join([str(a) for a in k.sass] + [f"PTX {a}" for a in k.ptx])


def cuda_of(versions: Mapping[str, str], cudart: Iterable[str]) -> str | None:
    """The build's CUDA release: the ``nvidia-cuda-runtime*`` package's version (``13.0.96`` -> 13.0), else
    the newest ``libcudart.so.N`` a package carries (a bare major N counts as N.0)."""
    for name in sorted(versions):
        if name.startswith(CUDA_RUNTIME_PREFIX) and (release := cuda_release(versions[name])):
            return release
    found = []
    for v in cudart:
        release = cuda_release(v) or (cuda_release(f"{v}.0") if v.isascii() and v.isdigit() else None)
        if release is not None:
            found.append(tuple(int(x) for x in release.split(".")))
    return "{}.{}".format(*max(found)) if found else None


def measure(
    readings: Mapping[str, Sequence[tuple[str, Kernels]]],
    versions: Mapping[str, str],
    cudart: Iterable[str],
    gate: Iterable[str],
) -> GpuFit:
    """The fit of a build from each package's CUDA libraries (canonical name -> (file, kernels)), the
    locked versions (for the CUDA runtime) and the gate (canonical names)."""
    gated = set(gate)
    packages = tuple(
        PackageFit(name, tuple(Library(f, k) for f, k in sorted(files)), name in gated)
        for name, files in sorted(readings.items())
        if files
    )
    return GpuFit(packages, cuda_of(versions, cudart))


def default_gate(engine_package: str, kernels_from: Sequence[str] = ()) -> tuple[str, ...]:
    """The gated packages: those a recipe names, else the engine's own package and torch."""
    return tuple(kernels_from) if kernels_from else (engine_package, *DEFAULT_GATE)


def fit_from_json(data: Any) -> GpuFit | None:
    """A fit written by :meth:`GpuFit.to_json` (a manifest's measured fit); None when malformed."""
    if not isinstance(data, dict) or not isinstance(data.get("packages"), list):
        return None
    cuda = data.get("cuda")
    if cuda is not None and cuda_release(cuda) != cuda:
        return None
    packages = []
    for p in data["packages"]:
        libs = p.get("libraries") if isinstance(p, dict) else None
        if not isinstance(libs, list) or not isinstance(p.get("name"), str) or not isinstance(p.get("gated"), bool):
            return None
        out = []
        for lib in libs:
            if not isinstance(lib, dict) or not isinstance(lib.get("file"), str):
                return None
            sass, ptx = lib.get("sass"), lib.get("ptx")
            if not isinstance(sass, list) or not isinstance(ptx, list):
                return None
            s, x = [parse_arch(a) for a in sass], [parse_arch(a) for a in ptx]
            if None in s or None in x:
                return None
            out.append(Library(lib["file"], Kernels(tuple(a for a in s if a), tuple(a for a in x if a))))
        packages.append(PackageFit(p["name"], tuple(out), p["gated"]))
    return GpuFit(tuple(packages), cuda)
