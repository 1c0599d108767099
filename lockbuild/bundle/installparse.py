"""Reading a manifest's [install] table strictly: every key known, every field typed and bounded.

The node acts on this table only (:class:`lockbuild.bundle.instructions.InstallTable`), so nothing in
it is taken on trust: a binary is a plain file name, a member named here is a member of the right kind,
a path is plain and relative, and the runtime settings pass the recipe's own rules (``envtable``).
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

from lockbuild import envtable
from lockbuild.bundle.fittable import parse_fit
from lockbuild.bundle.instructions import AssetPlace, ExtraPlace, GpuNeeds, InstallTable, SourcePlace
from lockbuild.bundle.paths import env_reserved, path_problem
from lockbuild.errors import IntegrityError
from lockbuild.gpu.vocab import is_driver, parse_capability

PROBES = ("torch", "none")
_BINARY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}")
_SERVES = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}")
_MAX_ARGS = 64
_MAX_ARG = 4096
_TIP = "The bundle is malformed; do not install it. Fetch it again from its publisher, or rebuild it."


def _bad(message: str) -> IntegrityError:
    return IntegrityError(message, tip=_TIP)


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
    parsed = parse_capability(cap)
    if parsed is None:
        raise _bad(f'the manifest\'s install.gpu.{key} {str(cap)[:40]!r} is not like "8.0".')
    return parsed


def _gpu(data: Any) -> GpuNeeds:
    if not isinstance(data, dict):
        raise _bad("the manifest's install.gpu is not a table.")
    _keys(data, ("min-capability", "min-driver", "max-capability", "variant-properties", "measured"), "install.gpu")
    capability = _capability(data, "min-capability")
    highest = _capability(data, "max-capability")
    drv = data.get("min-driver")
    if drv is not None and not is_driver(drv):
        raise _bad(f'the manifest\'s install.gpu.min-driver {str(drv)[:40]!r} is not a driver version like "580".')
    if capability is not None and highest is not None and highest < capability:
        raise _bad("the manifest's install.gpu.max-capability is below its min-capability; the bundle is malformed.")
    measured = parse_fit(data["measured"]) if "measured" in data else None
    needs = GpuNeeds(capability, drv, highest, measured)
    props = data.get("variant-properties")
    if (props is None) != (highest is None and measured is None) or (
        props is not None and props != list(needs.variant_properties())
    ):
        raise _bad(
            "the manifest's install.gpu.variant-properties are not the ones its needs imply (written with "
            "max-capability, derived from the table); the bundle is malformed."
        )
    return needs


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
        "extra-files",
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
    extra = []
    for i, x in enumerate(_get(data, "extra-files", list, "install.", [])):
        where = f"install.extra-files[{i}]"
        _keys(x if isinstance(x, dict) else {}, ("member", "dest"), where)
        member = _rel(_get(x, "member", str, f"{where}."), f"{where}.member")
        if kinds.get(member) != "extra-file":
            raise _bad(f"the manifest's {where}.member {member[:80]!r} is not a member of kind extra-file.")
        dest = _rel(_get(x, "dest", str, f"{where}."), f"{where}.dest")
        clash = env_reserved(dest)
        if clash:
            raise _bad(f"the manifest places the extra file {member[:80]!r} where {clash}; refused.")
        extra.append(ExtraPlace(member, dest))
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
        extra_files=tuple(extra),
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
