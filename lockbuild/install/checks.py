"""The installer's checks before anything is staged: pure decisions over the manifest, the signed
metadata, the node's facts and the build's requirements. Each raises with the reason, or returns None."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from lockbuild.bundle.manifest import Manifest
from lockbuild.errors import InstallError
from lockbuild.install.node import Node, free_bytes, version_tuple
from lockbuild.recipe import Build
from lockbuild.target import parse_platform

GpuCheck = Literal["auto", "require", "skip"]
ARCH_ALIASES = {"amd64": "x86_64", "arm64": "aarch64"}


def check_node(manifest: Manifest, node: Node) -> None:
    plat = parse_platform(manifest.platform)
    machine = ARCH_ALIASES.get(node.machine, node.machine)
    if machine != plat.arch:
        raise InstallError(
            f"this bundle is for {plat.arch} ({manifest.platform}), and this node is {machine}.",
            tip=f"Use the bundle built for {machine}.",
        )
    if plat.libc == "glibc" and node.libc == "glibc" and node.libc_version and node.libc_version < plat.libc_version:
        need = ".".join(map(str, plat.libc_version))
        have = ".".join(map(str, node.libc_version))
        raise InstallError(f"this bundle needs glibc {need} or newer ({manifest.platform}); this node has {have}.")


def check_gpu(build: Build, node: Node, mode: GpuCheck) -> None:
    req = build.gpu
    if req is None or mode == "skip":
        return
    if not node.has_nvidia:
        if mode == "require":
            raise InstallError(
                "--gpu-check require: this node has no NVIDIA driver (no /proc/driver/nvidia, no nvidia-smi)."
            )
        return
    known_driver = node.driver not in (None, "unknown")
    if req.min_driver is not None and known_driver and version_tuple(node.driver or "") < version_tuple(req.min_driver):
        raise InstallError(
            f"this build needs NVIDIA driver {req.min_driver} or newer; this node has {node.driver}.",
            tip="Upgrade the driver, or use a bundle built for an older CUDA variant.",
        )
    if req.min_capability is not None and node.gpus:
        low = [g for g in node.gpus if g.capability < req.min_capability]
        if low:
            need = f"{req.min_capability[0]}.{req.min_capability[1]}"
            have = ", ".join(f"{g.name} ({g.capability[0]}.{g.capability[1]})" for g in low)
            raise InstallError(
                f"this build needs GPUs of compute capability {need} or more; this node has {have}.",
                tip="Use the bundle of another variant built for older GPUs.",
            )


def check_space(engine_dir: Path, manifest: Manifest, build: Build) -> None:
    need = manifest.unpacked_size * 3 + (256 << 20)
    if build.free_gb:
        need = max(need, build.free_gb << 30)
    have = free_bytes(engine_dir)
    if have < need:
        raise InstallError(
            f"installing needs about {need / 2**30:.1f} GiB free under {engine_dir}; there are {have / 2**30:.1f} GiB.",
            tip="Free some space (lockbuild remove ... for engines no longer used) and try again.",
        )
