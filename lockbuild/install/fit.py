"""The one fit rule: which of a bundle's requirements a node does not meet. Pure.

``install`` refuses on any reason; ``doctor`` lists them. Both call :func:`unmet` with the same
:class:`Needs` (from the signed manifest, or from a catalogue recipe) and :class:`Facts`, so they give
the same answer on the same node. Something that cannot be known (a driver whose version the node does
not report, GPUs nvidia-smi does not list) counts as unmet, with a reason saying it is unknown:
``--gpu-check skip`` is the explicit way past GPU rules.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from lockbuild.bundle.instructions import GpuNeeds
from lockbuild.bundle.manifest import Manifest
from lockbuild.errors import InstallError
from lockbuild.install.node import Node
from lockbuild.target import parse_platform
from lockbuild.text import one_line
from lockbuild.times import iso

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


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text))


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
        if node.driver in (None, "unknown") or not _version(node.driver or ""):
            reasons.append(f"needs driver {gpu.min_driver}+, the node's driver version is unknown")
        elif _version(node.driver or "") < _version(gpu.min_driver):
            reasons.append(f"needs driver {gpu.min_driver}+, the node has {node.driver}")
    if gpu.min_capability is not None:
        need = "{}.{}".format(*gpu.min_capability)
        if not node.gpus:
            reasons.append(f"needs compute capability {need}+, the node's GPUs are unknown (nvidia-smi lists none)")
        low = [g for g in node.gpus if g.capability < gpu.min_capability]
        if low:
            have = ", ".join(f"{g.name} ({g.capability[0]}.{g.capability[1]})" for g in low)
            reasons.append(f"needs compute capability {need}+, the node has {have}")
    if gpu.max_capability is not None:
        top = "{}.{}".format(*gpu.max_capability)
        if not node.gpus:
            reasons.append(
                f"has kernels up to compute capability {top}, the node's GPUs are unknown (nvidia-smi lists none)"
            )
        high = [g for g in node.gpus if g.capability > gpu.max_capability]
        if high:
            have = ", ".join(f"{g.name} ({g.capability[0]}.{g.capability[1]})" for g in high)
            reasons.append(
                f"has kernels up to compute capability {top} only (no sm_{high[0].capability[0]}"
                f"{high[0].capability[1]}), the node has {have}"
            )
    return reasons


# --- the choice: which of several builds a node takes. Pure, beside the fit rule. ---------------


@dataclass(frozen=True)
class Option:
    """One candidate build, from its signed manifest (or a catalogue recipe, for doctor)."""

    engine: str
    version: str
    variant: str
    needs: Needs
    serves: tuple[str, ...] = ()
    problem: str | None = None  # it could not be judged (its signatures do not meet the policy): never chosen
    newness: tuple[int, int] = (0, 0)  # the signed serial, then the signed build (as-of) time: newest wins a tie
    source: str = ""  # where it was found (a folder's file name), shown to the user and never ranked

    @property
    def build(self) -> str:
        return f"{self.engine}/{self.version}-{self.variant}"

    @property
    def is_gpu(self) -> bool:
        return self.needs.gpu is not None


@dataclass(frozen=True)
class Judged:
    option: Option
    fits: bool
    serves: str | None  # the asked version, where this build only serves it
    reasons: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "build": self.option.build,
            "fits": self.fits,
            "serves": self.serves,
            "reasons": list(self.reasons),
            **({"source": self.option.source} if self.option.source else {}),
        }


@dataclass(frozen=True)
class Choice:
    asked: str  # ENGINE, or ENGINE/VERSION
    chosen: Option | None
    why: str  # why the chosen one, or why none
    candidates: tuple[Judged, ...]  # every candidate, the chosen one included
    fix: str = ""  # with nothing chosen: the driver to install, the variant to build, or --allow-cpu

    def to_json(self) -> dict[str, Any]:
        return {
            "asked": self.asked,
            "chosen": self.chosen.build if self.chosen else None,
            "why": self.why,
            "candidates": [c.to_json() for c in self.candidates],
            "fix": self.fix or None,
        }

    def head(self) -> str:
        if self.chosen is None:
            return one_line(f"no build of {self.asked} fits: {self.why}")
        where = f" (from {self.chosen.source})" if self.chosen.source else ""
        return one_line(f"chose {self.chosen.build}: {self.why}{where}")

    def lines(self, *, fix: bool = True) -> list[str]:
        """The choice, then each other candidate and why it was passed over (then the fix, if asked)."""
        return [self.head(), *self.passed_over(fix=fix)]

    def passed_over(self, *, fix: bool = True) -> list[str]:
        out = []
        for c in self.candidates:
            if c.option is self.chosen:
                continue
            mark = "fits, passed over" if c.fits else "does not fit"
            via = f" (serves {c.serves})" if c.serves else ""
            where = f" ({c.option.source})" if c.option.source else ""
            out.append(one_line(f"  {c.option.build}{where}{via}: {mark}: {'; '.join(c.reasons)}"))
        if self.fix and fix:
            out.append(one_line(f"  fix: {self.fix}"))
        return out


def _cap_value(cap: tuple[int, int] | None, default: int) -> int:
    return default if cap is None else cap[0] * 10 + cap[1]


def _width(gpu: GpuNeeds | None) -> int:
    """How wide a GPU build's capability range is (narrower ranks first); a CPU build has none (0)."""
    if gpu is None:
        return 0
    return _cap_value(gpu.max_capability, 999) - _cap_value(gpu.min_capability, 0)


def _driver_of(o: Option) -> tuple[int, ...]:
    gpu = o.needs.gpu
    return _version(gpu.min_driver) if gpu is not None and gpu.min_driver else ()


def _older(o: Option) -> tuple[int, int]:
    """Sorts the newest signed build first: the higher serial, then the later build time."""
    return (-o.newness[0], -o.newness[1])


def newest_first(versions: set[str]) -> list[str]:
    from packaging.version import InvalidVersion, Version

    def key(v: str) -> tuple[int, Any]:
        try:
            return (1, Version(v))
        except InvalidVersion:
            return (0, v)

    return sorted(versions, key=key, reverse=True)


def choose(
    engine: str,
    version: str | None,
    options: Sequence[Option],
    facts: Facts,
    *,
    allow_cpu: bool = False,
    gpu_check: GpuCheck = "auto",
) -> Choice:
    """The build of ``engine`` this node takes: of ``version`` (or serving it), or, with ``version``
    None, of the newest version that has a fitting build. ``options`` in the recipe's order (the last
    rule). Every candidate is judged, and the result says why each was passed over."""
    mine = [o for o in options if o.engine == engine]
    if version is not None:
        return _choose_version(engine, version, mine, facts, allow_cpu, gpu_check)
    results = [
        _choose_version(engine, v, [o for o in mine if o.version == v], facts, allow_cpu, gpu_check)
        for v in newest_first({o.version for o in mine})
    ]
    if not results:
        return Choice(
            engine,
            None,
            f"the candidates hold no build of {engine}",
            (),
            f"import a build of {engine} into the store or folder",
        )
    won = next((r for r in results if r.chosen is not None), None)
    winner = won.chosen if won is not None else None
    if won is None or winner is None:
        every = tuple(c for r in results for c in r.candidates)
        _, fix = _nothing_fits(
            [c.option for c in every],
            {id(c.option): c.reasons for c in every},
            facts,
            any("--allow-cpu" in r.fix for r in results),
        )
        return Choice(engine, None, "no version has a build that fits this node", every, fix)
    judged: list[Judged] = []
    for r in results:
        for c in r.candidates:
            if r is not won and c.fits:  # an older version (the newer ones have no fitting build)
                c = Judged(
                    c.option,
                    True,
                    None,
                    (f"an older version; {winner.build} is of the newest version with a fitting build",),
                )
            judged.append(c)
    return Choice(engine, winner, f"the newest version with a fitting build; {won.why}", tuple(judged))


def _choose_version(
    engine: str, version: str, options: Sequence[Option], facts: Facts, allow_cpu: bool, gpu_check: GpuCheck
) -> Choice:
    asked = f"{engine}/{version}"
    relevant = [o for o in options if o.version == version or version in o.serves]
    gpu_node = facts.node.has_nvidia and gpu_check != "skip"
    any_gpu_build = any(o.is_gpu for o in relevant if o.problem is None)
    unmet_of = {id(o): (o.problem,) if o.problem else unmet(o.needs, facts, gpu_check) for o in relevant}
    fitting_gpu = [o for o in relevant if o.is_gpu and not unmet_of[id(o)]]
    cpu_ok = [o for o in relevant if not o.is_gpu and not unmet_of[id(o)]]

    def rank(o: Option) -> tuple[int, tuple[int, ...], int, tuple[int, int], int]:
        # 1. the asked version itself; 2. the highest min-driver (the newest CUDA); 3. the narrowest range;
        # 4. the newest signed build (serial, then build time); 5. order
        return (
            0 if o.version == version else 1,
            tuple(-x for x in _driver_of(o)),
            _width(o.needs.gpu),
            _older(o),
            relevant.index(o),
        )

    # A CPU build on a GPU node: only for a CPU-only engine, or with --allow-cpu (and then after any GPU build)
    cpu_allowed = not gpu_node or not any_gpu_build or allow_cpu
    ranked = sorted(fitting_gpu, key=rank) + (
        sorted(cpu_ok, key=lambda o: (o.version != version, _older(o), relevant.index(o))) if cpu_allowed else []
    )
    chosen = ranked[0] if ranked else None
    judged = []
    for o in relevant:
        serves = version if o.version != version else None
        if unmet_of[id(o)]:
            judged.append(Judged(o, False, serves, unmet_of[id(o)]))
        elif not o.is_gpu and not cpu_allowed:
            judged.append(
                Judged(
                    o,
                    False,
                    serves,
                    (
                        "a CPU build, and this node has an NVIDIA GPU: taken only with "
                        "--allow-cpu or when named explicitly",
                    ),
                )
            )
        elif chosen is None or o is chosen:  # chosen is None only when nothing fits, so never here
            judged.append(Judged(o, True, serves, ()))
        else:
            judged.append(Judged(o, True, serves, (_passed_over(o, chosen, version),)))
    if chosen is None:
        why, fix = _nothing_fits(relevant, unmet_of, facts, gpu_node and any_gpu_build and bool(cpu_ok))
        return Choice(asked, None, why, tuple(judged), fix)
    why = _why(chosen, version, len(ranked), facts, gpu_node and any_gpu_build)
    return Choice(asked, chosen, why, tuple(judged))


def _why(o: Option, version: str, n: int, facts: Facts, past_gpu_builds: bool) -> str:
    parts = [f"serves {version} (no {version} build fits)" if o.version != version else f"a build of {version}"]
    gpu = o.needs.gpu
    if gpu is not None:
        parts.append(
            f"needs driver {gpu.min_driver or 'any'}+ (the node has {facts.node.driver}) and compute "
            f"capability {_range(gpu)}"
        )
    elif past_gpu_builds:
        parts.append("a CPU build, taken on a GPU node because no GPU build fits and --allow-cpu was given")
    elif facts.node.has_nvidia:
        parts.append("a build without a gpu table (the candidates hold no GPU build)")
    else:
        parts.append("a build without a gpu table (this node has no NVIDIA GPU)")
    parts.append("the only fitting build" if n == 1 else f"the best of {n} fitting builds")
    return "; ".join(parts)


def _range(gpu: GpuNeeds) -> str:
    from lockbuild.bundle.instructions import capability_range

    return capability_range(gpu)


def _passed_over(o: Option, chosen: Option, version: str) -> str:
    if o.is_gpu != chosen.is_gpu:
        return f"a CPU build; {chosen.build} fits" if not o.is_gpu else f"{chosen.build} is preferred"
    if (o.version == version) != (chosen.version == version):
        return f"only serves {version}; {chosen.build} is a build of {version} that fits"
    mine, theirs = o.needs.gpu, chosen.needs.gpu
    if mine is None or theirs is None:  # both CPU builds (is_gpu is the same for both here)
        return _older_or_after(o, chosen)
    if _driver_of(o) != _driver_of(chosen):
        return (
            f"needs driver {mine.min_driver or 'any'}+; {chosen.build} needs "
            f"{theirs.min_driver}+, which this node meets (a newer CUDA)"
        )
    if _width(mine) != _width(theirs):
        return f"its capability range {_range(mine)} is wider than {chosen.build}'s ({_range(theirs)})"
    return _older_or_after(o, chosen)


def _older_or_after(o: Option, chosen: Option) -> str:
    if o.newness == chosen.newness:
        return f"listed after {chosen.build}"
    newer = f"{chosen.build} ({chosen.source})" if chosen.source else chosen.build
    if o.newness[0] != chosen.newness[0]:
        return f"an older signed build (serial {o.newness[0]}); {newer} is newer (serial {chosen.newness[0]})"
    return f"an older signed build (built {_when(o.newness[1])}); {newer} is newer (built {_when(chosen.newness[1])})"


def _when(seconds: int) -> str:
    return iso(dt.datetime.fromtimestamp(seconds, dt.UTC))


def _nothing_fits(
    relevant: Sequence[Option], unmet_of: dict[int, tuple[str, ...]], facts: Facts, cpu_hint: bool
) -> tuple[str, str]:
    if not relevant:
        return "the candidates hold no build of it, nor one that serves it", "import or build one"
    node = facts.node
    unmet_of = {k: tuple(r for r in v if not r.startswith("a CPU build")) for k, v in unmet_of.items()}
    fixes: list[str] = []
    drivers = [
        (o, o.needs.gpu)
        for o in relevant
        if o.needs.gpu is not None
        and o.problem is None
        and unmet_of[id(o)]
        and all(r.startswith("needs driver") for r in unmet_of[id(o)])
    ]
    if drivers:
        best, gpu = min(drivers, key=lambda d: _driver_of(d[0]))
        fixes.append(f"install NVIDIA driver {gpu.min_driver} or newer (for {best.build})")
    if node.has_nvidia and node.gpus:
        caps = sorted({"{}.{}".format(*g.capability) for g in node.gpus})
        fixes.append(
            f"or build a variant whose gpu table covers compute capability {' and '.join(caps)} and "
            f"min-driver at most {node.driver}"
        )
    elif not node.has_nvidia:
        fixes.append("or build a CPU variant (a build without a gpu table)")
    if cpu_hint:
        fixes.append("or pass --allow-cpu to take the CPU build")
    return "every candidate has an unmet need", " ".join(fixes).removeprefix("or ")
