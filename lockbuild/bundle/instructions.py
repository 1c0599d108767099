"""The manifest's [install] table: everything the node does with a bundle, signed.

Binary, verify command, GPU probe and requirements, free space, where the source and assets go, the uv
wheel and the interpreter; the node acts on this table only. This module is the table and what it derives
(summary, TOML, a GPU's wheel-variant properties); ``bundle/installparse.py`` reads one strictly."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

from lockbuild.bundle.fittable import fit_toml_lines
from lockbuild.gpu.fit import GpuFit
from lockbuild.gpu.vocab import KNOWN_CAPABILITIES, Capability, capability_text, newest_cuda_for

FORMAT_5 = (
    5  # this wave's manifest format, engines and models alike: the measured GPU fit and extra files among what it adds
)


@dataclass(frozen=True)
class GpuNeeds:
    min_capability: Capability | None = None
    min_driver: str | None = None
    max_capability: Capability | None = None  # from manifest format 3
    measured: GpuFit | None = None  # from format 5: the architectures each package's libraries carry

    def variant_properties(self) -> tuple[str, ...]:
        """The same needs as wheel-variant properties (PEP 817/825, the NVIDIA provider's namespace),
        derived, never stated apart: ``nvidia :: cuda_version_lower_bound :: X.Y`` from the driver branch,
        ``nvidia :: sm_arch :: NN_real`` for each known capability in the range."""
        return variant_properties(self)


@dataclass(frozen=True)
class SourcePlace:
    member: str  # the source archive's member path
    dir: str  # where it is unpacked, relative to the environment
    top: str  # the archive's top directory, stripped ("" for none)


@dataclass(frozen=True)
class AssetPlace:
    member: str  # the asset's member path
    dir: str  # where it goes, relative to the environment (an archive is unpacked there)


@dataclass(frozen=True)
class ExtraPlace:
    """An extra file (member kind extra-file), placed as it is at ``dest`` inside the environment."""

    member: str
    dest: str


def extra_file_member(dest: str) -> str:
    """Where an extra file is kept in the bundle (member kind extra-file): under extra-files/, at its dest."""
    return f"extra-files/{dest}"


@dataclass(frozen=True)
class InstallTable:
    binary: str
    verify: tuple[str, ...]
    gpu_probe: str  # "torch", "none", or a .py path relative to the environment
    uv: str  # the member path of the uv wheel
    gpu: GpuNeeds | None = None
    free_gb: int = 0  # 0: no rule beyond the unpacked size
    source: SourcePlace | None = None
    assets: tuple[AssetPlace, ...] = ()
    interpreter: str | None = None  # the member path of a standalone interpreter archive
    requirements: tuple[str, ...] = ()  # what the build asked for (recorded in the marker; not acted on)
    env: tuple[tuple[str, str], ...] = ()  # [engine.env]: runtime settings every entry point sees
    smoke: tuple[str, ...] = ()  # the self-test's smoke command
    gpu_smoke: tuple[str, ...] = ()  # the self-test's GPU smoke command (lockbuild test --gpu)
    allow_network: tuple[str, ...] = ()  # hosts the self-test lets the engine try to reach
    serves: tuple[str, ...] = ()  # newer versions this build serves where none of their builds fits
    extra_files: tuple[ExtraPlace, ...] = ()  # format 5: files placed inside the environment

    @property
    def needs_format(self) -> int:
        """The manifest format these instructions need: 5 with a measured GPU fit or extra files, 3 when
        they carry max-capability or serves."""
        if self.extra_files or (self.gpu is not None and self.gpu.measured is not None):
            return FORMAT_5
        return 3 if self.serves or (self.gpu is not None and self.gpu.max_capability is not None) else 2

    def to_json(self) -> dict[str, Any]:
        gpu = self.gpu
        return {
            "binary": self.binary,
            "verify": list(self.verify),
            "gpu_probe": self.gpu_probe,
            "gpu": None
            if gpu is None
            else {
                "min_capability": None if gpu.min_capability is None else "{}.{}".format(*gpu.min_capability),
                "min_driver": gpu.min_driver,
                "max_capability": None if gpu.max_capability is None else "{}.{}".format(*gpu.max_capability),
                "variant_properties": list(gpu.variant_properties()),
                "measured": gpu.measured.to_json() if gpu.measured is not None else None,
            },
            "serves": list(self.serves),
            "free_gb": self.free_gb,
            "uv": self.uv,
            "interpreter": self.interpreter,
            "source": None
            if self.source is None
            else {"member": self.source.member, "dir": self.source.dir, "top": self.source.top},
            "assets": [{"member": a.member, "dir": a.dir} for a in self.assets],
            "extra_files": [{"member": x.member, "dest": x.dest} for x in self.extra_files],
            "requirements": list(self.requirements),
            "env": dict(self.env),
            "smoke": list(self.smoke),
            "gpu_smoke": list(self.gpu_smoke),
            "allow_network": list(self.allow_network),
        }

    def summary(self) -> list[str]:
        """What the node will do, in a few lines (shell-quoted commands)."""
        lines = [f"binary bin/{self.binary}; verify: {shlex.join(self.verify)}; GPU probe: {self.gpu_probe}"]
        if self.gpu is not None:
            lines.append(
                f"needs GPU compute capability {capability_range(self.gpu)}, driver {self.gpu.min_driver or 'any'}+"
            )
            if self.gpu.measured is not None:
                lines.append(f"measured {self.gpu.measured.line()}")
        if self.serves:
            lines.append(f"serves {', '.join(self.serves)} where none of its own builds fits")
        if self.free_gb:
            lines.append(f"needs {self.free_gb} GB free")
        if self.source is not None:
            lines.append(f"source {self.source.member} -> {self.source.dir}/")
        lines += [f"asset {a.member} -> {a.dir}/" for a in self.assets]
        lines += [f"extra file {x.member} -> {x.dest}" for x in self.extra_files]
        if self.env:
            lines.append("env: " + " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env))
        if self.smoke:
            lines.append(f"self-test smoke: {shlex.join(self.smoke)}")
        if self.gpu_smoke:
            lines.append(f"self-test GPU smoke (--gpu): {shlex.join(self.gpu_smoke)}")
        if self.allow_network:
            lines.append(f"self-test allows network to: {', '.join(self.allow_network)}")
        return lines

    def toml_lines(self, q: Any) -> list[str]:
        lines = [
            "[install]",
            f"binary = {q(self.binary)}",
            f"verify = [{', '.join(q(a) for a in self.verify)}]",
            f"gpu-probe = {q(self.gpu_probe)}",
            f"free-gb = {self.free_gb}",
            f"uv = {q(self.uv)}",
            *([f"interpreter = {q(self.interpreter)}"] if self.interpreter else []),
            f"requirements = [{', '.join(q(r) for r in self.requirements)}]",
            *([f"smoke = [{', '.join(q(a) for a in self.smoke)}]"] if self.smoke else []),
            *([f"gpu-smoke = [{', '.join(q(a) for a in self.gpu_smoke)}]"] if self.gpu_smoke else []),
            *([f"allow-network = [{', '.join(q(h) for h in self.allow_network)}]"] if self.allow_network else []),
            *([f"serves = [{', '.join(q(v) for v in self.serves)}]"] if self.serves else []),
            "",
        ]
        if self.env:
            lines += ["[install.env]", *(f"{k} = {q(v)}" for k, v in self.env), ""]
        if self.gpu is not None:
            lines.append("[install.gpu]")
            if self.gpu.min_capability is not None:
                lines.append(f"min-capability = {q('{}.{}'.format(*self.gpu.min_capability))}")
            if self.gpu.min_driver is not None:
                lines.append(f"min-driver = {q(self.gpu.min_driver)}")
            if self.gpu.max_capability is not None or self.gpu.measured is not None:  # with the variant properties
                if self.gpu.max_capability is not None:
                    lines.append(f"max-capability = {q('{}.{}'.format(*self.gpu.max_capability))}")
                lines.append(f"variant-properties = [{', '.join(q(v) for v in self.gpu.variant_properties())}]")
            lines.append("")
            if self.gpu.measured is not None:
                lines += fit_toml_lines(self.gpu.measured, q)
        if self.source is not None:
            s = self.source
            lines += ["[install.source]", f"member = {q(s.member)}", f"dir = {q(s.dir)}", f"top = {q(s.top)}", ""]
        for a in self.assets:
            lines += ["[[install.assets]]", f"member = {q(a.member)}", f"dir = {q(a.dir)}", ""]
        for x in self.extra_files:
            lines += ["[[install.extra-files]]", f"member = {q(x.member)}", f"dest = {q(x.dest)}", ""]
        return lines


def capability_range(gpu: GpuNeeds) -> str:
    """``7.5+``, ``6.0-8.9``, ``up to 8.9`` or ``any``."""
    low = capability_text(gpu.min_capability) if gpu.min_capability else None
    high = capability_text(gpu.max_capability) if gpu.max_capability else None
    if low and high:
        return f"{low}-{high}"
    return f"{low}+" if low else f"up to {high}" if high else "any"


def variant_properties(gpu: GpuNeeds) -> tuple[str, ...]:
    out = []
    cuda = newest_cuda_for(gpu.min_driver) if gpu.min_driver is not None else None
    if cuda is not None:
        out.append(f"nvidia :: cuda_version_lower_bound :: {cuda}")
    if gpu.measured is not None:  # the architectures the gated packages carry, not a range
        caps = sorted({a.capability for p in gpu.measured.gated for a in p.kernels.sass})
        return (*out, *(f"nvidia :: sm_arch :: {a}{b}_real" for a, b in caps))
    low, high = gpu.min_capability or (0, 0), gpu.max_capability or (99, 9)
    out += [f"nvidia :: sm_arch :: {a}{b}_real" for a, b in KNOWN_CAPABILITIES if low <= (a, b) <= high]
    return tuple(out)
