"""The node check: which of a bundle's requirements a node does not meet. Pure.

``install`` refuses on any reason and ``doctor`` lists them, both through :func:`unmet`, so they agree.
Something that cannot be known (an unreported driver version, GPUs nvidia-smi does not list) counts as
unmet, saying it is unknown: ``--gpu-check skip`` is the explicit way past GPU rules."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from lockbuild.bundle.instructions import GpuNeeds
from lockbuild.bundle.manifest import Manifest
from lockbuild.errors import InstallError
from lockbuild.gpu.vocab import capability_text, driver_at_least, driver_numbers
from lockbuild.install.node import Node
from lockbuild.target import parse_platform

GpuCheck = Literal["auto", "require", "skip"]
GPU_CHECKS: tuple[GpuCheck, ...] = ("auto", "require", "skip")
ARCH_ALIASES = {"amd64": "x86_64", "arm64": "aarch64"}
HEADROOM = 256 << 20  # beyond three times the unpacked size (the unpacked bundle, the environment, slack)


@dataclass(frozen=True)
class Needs:
    python: str
    platform: str
    gpu: GpuNeeds | None
    free_bytes: int

    @classmethod
    def of(cls, manifest: Manifest) -> Needs:
        return cls(
            manifest.python,
            manifest.platform,
            manifest.install.gpu,
            space_needed(manifest.unpacked_size, manifest.install.free_gb),
        )


@dataclass(frozen=True)
class Facts:
    node: Node
    pythons: frozenset[str]  # the X.Y versions of the interpreters the installer could use
    free_bytes: int


def space_needed(unpacked: int, free_gb: int) -> int:
    """Bytes an install needs free: the bundle's own rule (``free-gb``) or three times its unpacked size."""
    need = unpacked * 3 + HEADROOM if unpacked else 0
    return max(need, free_gb << 30)


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


def gpu_check_of(text: str) -> GpuCheck:
    """``--gpu-check``'s value as one of :data:`GPU_CHECKS`; anything else is refused."""
    for check in GPU_CHECKS:
        if text == check:
            return check
    raise InstallError(
        f"--gpu-check: expected one of {', '.join(GPU_CHECKS)}, found {text!r}",
        tip="Pass --gpu-check auto, require or skip.",
    )


def unmet(needs: Needs, facts: Facts, gpu_check: GpuCheck = "auto") -> tuple[str, ...]:
    """Every reason ``needs`` are not met by ``facts`` (empty: it fits)."""
    node = facts.node
    reasons: list[str] = []
    plat = parse_platform(needs.platform)
    machine = ARCH_ALIASES.get(node.machine, node.machine)
    if plat.arch != machine:
        reasons.append(f"built for {plat.arch} ({needs.platform}), the node is {machine}")
    if plat.libc == "glibc":
        want = "{}.{}".format(*plat.libc_version)
        if node.libc != "glibc" or node.libc_version is None:
            reasons.append(f"needs glibc {want}+, the node's C library is {node.libc} (version unknown)")
        elif node.libc_version < plat.libc_version:
            reasons.append(f"needs glibc {want}+, the node has {node.libc_version[0]}.{node.libc_version[1]}")
    if needs.python not in facts.pythons:
        reasons.append(f"needs Python {needs.python}, not found (python{needs.python} on PATH or --python)")
    if needs.gpu is not None and gpu_check != "skip":
        reasons += _gpu_reasons(needs.gpu, node)
    if facts.free_bytes < needs.free_bytes:
        reasons.append(f"needs {_gib(needs.free_bytes)} free, the root has {_gib(facts.free_bytes)}")
    return tuple(reasons)


def _gpu_reasons(gpu: GpuNeeds, node: Node) -> list[str]:
    if not node.has_nvidia and node.stated:
        return ["needs an NVIDIA GPU; the node's stated facts name no driver"]
    if not node.has_nvidia:
        return ["needs an NVIDIA GPU; no driver found (no nvidia-smi, /sys/module/nvidia or /proc/driver/nvidia)"]
    reasons = []
    if gpu.min_driver is not None:
        if node.driver in (None, "unknown") or not driver_numbers(node.driver or ""):
            reasons.append(f"needs driver {gpu.min_driver}+, the node's driver version is unknown")
        elif not driver_at_least(node.driver or "", gpu.min_driver):
            reasons.append(f"needs driver {gpu.min_driver}+, the node has {node.driver}")
    if gpu.measured is not None:  # the facts from the binaries decide, GPU by GPU (never a range)
        return reasons + _measured_reasons(gpu, node)
    if gpu.min_capability is not None:
        need = capability_text(gpu.min_capability)
        if not node.gpus:
            reasons.append(f"needs compute capability {need}+, the node's GPUs are unknown (nvidia-smi lists none)")
        low = [g for g in node.gpus if g.capability < gpu.min_capability]
        if low:
            have = ", ".join(f"{g.name} ({capability_text(g.capability)})" for g in low)
            reasons.append(f"needs compute capability {need}+, the node has {have}")
    if gpu.max_capability is not None:
        top = capability_text(gpu.max_capability)
        if not node.gpus:
            reasons.append(
                f"has kernels up to compute capability {top}, the node's GPUs are unknown (nvidia-smi lists none)"
            )
        high = [g for g in node.gpus if g.capability > gpu.max_capability]
        if high:
            have = ", ".join(f"{g.name} ({capability_text(g.capability)})" for g in high)
            reasons.append(
                f"has kernels up to compute capability {top} only (no sm_{high[0].capability[0]}"
                f"{high[0].capability[1]}), the node has {have}"
            )
    return reasons


def _measured_reasons(gpu: GpuNeeds, node: Node) -> list[str]:
    fit = gpu.measured
    if fit is None:
        return []
    if not node.gpus:
        return ["needs a GPU its packages have kernels for; the node's GPUs are unknown (nvidia-smi lists none)"]
    return [
        f"the node's {g.name} (compute capability {capability_text(g.capability)}) has no kernels in "
        f"{', '.join(lacking)} (neither SASS nor PTX for it)"
        for g in node.gpus
        if (lacking := fit.lacking(g.capability))
    ]


def jit_notes(needs: Needs, node: Node) -> tuple[str, ...]:
    """For each of the node's GPUs that a bundle's measured fit reaches only by PTX: the note the install prints."""
    fit = needs.gpu.measured if needs.gpu is not None else None
    if fit is None:
        return ()
    caps = sorted({g.capability for g in node.gpus if fit.coverage(g.capability) == "jit"})
    return tuple(f"kernels for {capability_text(c)} will be JIT-compiled at first start" for c in caps)


def jit_only(needs: Needs, node: Node) -> bool:
    """Whether a bundle reaches one of the node's GPUs by JIT only (the node's choice prefers SASS)."""
    return bool(jit_notes(needs, node))
