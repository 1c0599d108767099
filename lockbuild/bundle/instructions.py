"""The manifest's [install] table (format 2): everything the node does with a bundle, signed.

binary, verify command, GPU probe, GPU requirements, free space, where the source and assets go, which
member is the uv wheel and which the interpreter. The node acts on this table only; the builder's
recipe travels in the bundle as provenance and is never parsed on the node.
"""

from __future__ import annotations

import re
import shlex
import unicodedata
from dataclasses import dataclass
from typing import Any

from lockbuild import envtable
from lockbuild.bundle.paths import env_reserved, path_problem
from lockbuild.errors import IntegrityError

PROBES = ("torch", "none")
_BINARY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}")
_CAPABILITY = re.compile(r"(\d{1,2})\.(\d{1,2})")
_DRIVER = re.compile(r"\d{1,4}(?:\.\d{1,4}){0,3}")
_SERVES = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}")
_MAX_ARGS = 64
_MAX_ARG = 4096
_TIP = "The bundle is malformed; do not install it. Fetch it again from its publisher, or rebuild it."


def _bad(message: str) -> IntegrityError:
    return IntegrityError(message, tip=_TIP)


@dataclass(frozen=True)
class GpuNeeds:
    min_capability: tuple[int, int] | None = None
    min_driver: str | None = None
    max_capability: tuple[int, int] | None = None  # from manifest format 3

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

    @property
    def needs_format(self) -> int:
        """The manifest format these instructions need: 3 when they carry max-capability or serves."""
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
            },
            "serves": list(self.serves),
            "free_gb": self.free_gb,
            "uv": self.uv,
            "interpreter": self.interpreter,
            "source": None
            if self.source is None
            else {"member": self.source.member, "dir": self.source.dir, "top": self.source.top},
            "assets": [{"member": a.member, "dir": a.dir} for a in self.assets],
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
        if self.serves:
            lines.append(f"serves {', '.join(self.serves)} where none of its own builds fits")
        if self.free_gb:
            lines.append(f"needs {self.free_gb} GB free")
        if self.source is not None:
            lines.append(f"source {self.source.member} -> {self.source.dir}/")
        lines += [f"asset {a.member} -> {a.dir}/" for a in self.assets]
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
            if self.gpu.max_capability is not None:  # format 3: with the wheel-variant properties beside it
                lines.append(f"max-capability = {q('{}.{}'.format(*self.gpu.max_capability))}")
                lines.append(f"variant-properties = [{', '.join(q(v) for v in self.gpu.variant_properties())}]")
            lines.append("")
        if self.source is not None:
            s = self.source
            lines += ["[install.source]", f"member = {q(s.member)}", f"dir = {q(s.dir)}", f"top = {q(s.top)}", ""]
        for a in self.assets:
            lines += ["[[install.assets]]", f"member = {q(a.member)}", f"dir = {q(a.dir)}", ""]
        return lines


def check_text(value: str, where: str) -> str:
    """Every text field of a manifest: no control characters (a newline, an escape sequence)."""
    if any(unicodedata.category(c) in ("Cc", "Cf", "Cs", "Co", "Cn") for c in value):
        raise _bad(f"the manifest's {where} {value[:60]!r} holds a control character; the bundle is malformed.")
    return value


_MISSING = object()


def _get(data: dict[str, Any], key: str, kind: type, where: str, default: Any = _MISSING) -> Any:
    value = data.get(key, default)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise _bad(f"the manifest's {where}{key} is missing or not {kind.__name__}; the bundle is malformed.")
    return value


def _rel(value: str, where: str) -> str:
    problem = path_problem(value)
    if problem:
        raise _bad(f"the manifest's {where} {value[:80]!r} is not a plain relative path: {problem}.")
    return value


def _keys(data: dict[str, Any], allowed: tuple[str, ...], where: str) -> None:
    unknown = sorted(set(data) - set(allowed))
    if unknown:
        raise _bad(
            f"the manifest's {where} has the unknown key(s) {', '.join(unknown)[:80]}; expected {', '.join(allowed)}."
        )


def _capability(data: dict[str, Any], key: str) -> tuple[int, int] | None:
    cap = data.get(key)
    if cap is None:
        return None
    m = _CAPABILITY.fullmatch(cap) if isinstance(cap, str) else None
    if m is None:
        raise _bad(f'the manifest\'s install.gpu.{key} {str(cap)[:40]!r} is not like "8.0".')
    return (int(m[1]), int(m[2]))


def _gpu(data: Any) -> GpuNeeds:
    if not isinstance(data, dict):
        raise _bad("the manifest's install.gpu is not a table.")
    _keys(data, ("min-capability", "min-driver", "max-capability", "variant-properties"), "install.gpu")
    capability = _capability(data, "min-capability")
    highest = _capability(data, "max-capability")
    drv = data.get("min-driver")
    if drv is not None and not (isinstance(drv, str) and _DRIVER.fullmatch(drv)):
        raise _bad(f'the manifest\'s install.gpu.min-driver {str(drv)[:40]!r} is not a driver version like "580".')
    if capability is not None and highest is not None and highest < capability:
        raise _bad("the manifest's install.gpu.max-capability is below its min-capability; the bundle is malformed.")
    needs = GpuNeeds(capability, drv, highest)
    props = data.get("variant-properties")
    if (props is None) != (highest is None) or (props is not None and props != list(needs.variant_properties())):
        raise _bad(
            "the manifest's install.gpu.variant-properties are not the ones its needs imply (written with "
            "max-capability, derived from the table); the bundle is malformed."
        )
    return needs


def capability_range(gpu: GpuNeeds) -> str:
    """``7.5+``, ``6.0-8.9``, ``up to 8.9`` or ``any``."""
    low = "{}.{}".format(*gpu.min_capability) if gpu.min_capability else None
    high = "{}.{}".format(*gpu.max_capability) if gpu.max_capability else None
    if low and high:
        return f"{low}-{high}"
    return f"{low}+" if low else f"up to {high}" if high else "any"


# Compute capabilities NVIDIA has shipped (sm_arch values of the wheel-variant provider).
KNOWN_CAPABILITIES = (
    (5, 0),
    (5, 2),
    (5, 3),
    (6, 0),
    (6, 1),
    (6, 2),
    (7, 0),
    (7, 2),
    (7, 5),
    (8, 0),
    (8, 6),
    (8, 7),
    (8, 9),
    (9, 0),
    (10, 0),
    (10, 3),
    (11, 0),
    (12, 0),
    (12, 1),
)
# The first Linux driver branch of each CUDA release (CUDA's release notes, "minimum required driver").
CUDA_BY_DRIVER = (
    (525, "12.0"),
    (530, "12.1"),
    (535, "12.2"),
    (545, "12.3"),
    (550, "12.4"),
    (555, "12.5"),
    (560, "12.6"),
    (570, "12.8"),
    (575, "12.9"),
    (580, "13.0"),
)


def variant_properties(gpu: GpuNeeds) -> tuple[str, ...]:
    out = []
    if gpu.min_driver is not None:
        branch = int(gpu.min_driver.split(".", 1)[0])
        cuda = [c for d, c in CUDA_BY_DRIVER if d <= branch]
        if cuda:
            out.append(f"nvidia :: cuda_version_lower_bound :: {cuda[-1]}")
    low, high = gpu.min_capability or (0, 0), gpu.max_capability or (99, 9)
    out += [f"nvidia :: sm_arch :: {a}{b}_real" for a, b in KNOWN_CAPABILITIES if low <= (a, b) <= high]
    return tuple(out)


def _serves(data: dict[str, Any]) -> tuple[str, ...]:
    serves = _get(data, "serves", list, "install.", [])
    if len(serves) > 64 or not all(isinstance(v, str) and _SERVES.fullmatch(v) for v in serves):
        raise _bad("the manifest's install.serves must be at most 64 plain version strings.")
    return tuple(serves)


def _place(data: Any, where: str, kinds: dict[str, str], kind: str) -> tuple[str, str]:
    if not isinstance(data, dict):
        raise _bad(f"the manifest's {where} is not a table.")
    member = _rel(_get(data, "member", str, f"{where}."), f"{where}.member")
    if kinds.get(member) != kind:
        raise _bad(f"the manifest's {where}.member {member[:80]!r} is not a member of kind {kind}.")
    dest = _rel(_get(data, "dir", str, f"{where}."), f"{where}.dir")
    return member, dest


def parse_install(data: Any, kinds: dict[str, str]) -> InstallTable:
    """The [install] table, strictly; ``kinds`` maps every member path to its kind."""
    if not isinstance(data, dict):
        raise _bad("the manifest has no [install] table; a format-2 bundle always has one.")
    allowed = (
        "binary",
        "verify",
        "gpu-probe",
        "free-gb",
        "uv",
        "interpreter",
        "requirements",
        "gpu",
        "source",
        "assets",
        "env",
        "smoke",
        "gpu-smoke",
        "allow-network",
        "serves",
    )
    _keys(data, allowed, "install")
    binary = _get(data, "binary", str, "install.")
    if not _BINARY.fullmatch(binary):
        raise _bad(f"the manifest's install.binary {binary[:80]!r} is not a plain file name.")
    verify = _get(data, "verify", list, "install.")
    if not 1 <= len(verify) <= _MAX_ARGS or not all(isinstance(a, str) and 0 < len(a) <= _MAX_ARG for a in verify):
        raise _bad(f"the manifest's install.verify must be 1 to {_MAX_ARGS} non-empty strings.")
    for a in verify:
        check_text(a, "install.verify word")
    probe = _get(data, "gpu-probe", str, "install.")
    if probe not in PROBES and not (probe.endswith(".py") and _rel(probe, "install.gpu-probe")):
        raise _bad(f"the manifest's install.gpu-probe {probe[:80]!r} is not torch, none or a .py path.")
    free_gb = _get(data, "free-gb", int, "install.", 0)
    if not 0 <= free_gb < 100_000:
        raise _bad(f"the manifest's install.free-gb is {free_gb}; expected 0..99999.")
    uv = _rel(_get(data, "uv", str, "install."), "install.uv")
    if kinds.get(uv) != "tool":
        raise _bad(f"the manifest's install.uv {uv[:80]!r} is not a member of kind tool.")
    interpreter = data.get("interpreter")
    if interpreter is not None and (not isinstance(interpreter, str) or kinds.get(interpreter) != "interpreter"):
        raise _bad(f"the manifest's install.interpreter {str(interpreter)[:80]!r} is not a member of kind interpreter.")
    requirements = _get(data, "requirements", list, "install.", [])
    if len(requirements) > 10_000 or not all(isinstance(r, str) and 0 < len(r) <= _MAX_ARG for r in requirements):
        raise _bad("the manifest's install.requirements must be a list of non-empty strings.")
    for r in requirements:
        check_text(r, "install.requirements entry")
    source = None
    if "source" in data:
        _keys(data["source"] if isinstance(data["source"], dict) else {}, ("member", "dir", "top"), "install.source")
        member, dest = _place(data["source"], "install.source", kinds, "source")
        top = _get(data["source"], "top", str, "install.source.", "")
        source = SourcePlace(member, dest, _rel(top, "install.source.top") if top else "")
    assets = []
    for i, a in enumerate(_get(data, "assets", list, "install.", [])):
        _keys(a if isinstance(a, dict) else {}, ("member", "dir"), f"install.assets[{i}]")
        member, dest = _place(a, f"install.assets[{i}]", kinds, "asset")
        clash = env_reserved(f"{dest}/{member.rsplit('/', 1)[-1]}")
        if clash:
            raise _bad(f"the manifest places the asset {member[:80]!r} where {clash}; refused.")
        assets.append(AssetPlace(member, dest))
    return InstallTable(
        binary=binary,
        verify=tuple(verify),
        gpu_probe=probe,
        uv=uv,
        gpu=_gpu(data["gpu"]) if "gpu" in data else None,
        free_gb=free_gb,
        source=source,
        assets=tuple(assets),
        interpreter=interpreter,
        requirements=tuple(requirements),
        serves=_serves(data),
        **_runtime(data),
    )


def _runtime(data: dict[str, Any]) -> dict[str, Any]:
    """install.env, install.smoke and install.allow-network, by the rules the recipe applies (envtable)."""
    smoke = _get(data, "smoke", list, "install.", [])
    bad = next((w for w in map(envtable.word_problem, smoke) if w), None)
    if bad or len(smoke) > envtable.MAX_SMOKE_WORDS:
        raise _bad(f"the manifest's install.smoke is refused: {bad or 'too many words'}.")
    gpu_smoke = _get(data, "gpu-smoke", list, "install.", [])
    bad = next((w for w in map(envtable.word_problem, gpu_smoke) if w), None)
    if bad or len(gpu_smoke) > envtable.MAX_SMOKE_WORDS:
        raise _bad(f"the manifest's install.gpu-smoke is refused: {bad or 'too many words'}.")
    hosts = _get(data, "allow-network", list, "install.", [])
    bad = next((w for w in map(envtable.host_problem, hosts) if w), None)
    if bad or len(hosts) > envtable.MAX_ENTRIES:
        raise _bad(f"the manifest's install.allow-network is refused: {bad or 'too many hosts'}.")
    env = _get(data, "env", dict, "install.", {})
    if len(env) > envtable.MAX_ENTRIES:
        raise _bad(f"the manifest's install.env has {len(env)} settings; at most {envtable.MAX_ENTRIES}.")
    for name, value in env.items():
        why = envtable.problem(name, value, allow_network=hosts)  # the recipe's rule, from the one place
        if why:
            raise _bad(f"the manifest's install.env is refused: {why}.")
    return {
        "env": tuple(sorted(env.items())),
        "smoke": tuple(smoke),
        "gpu_smoke": tuple(gpu_smoke),
        "allow_network": tuple(hosts),
    }
