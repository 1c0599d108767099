"""lockbuild doctor: what a node has, and which catalogue builds fit it (and why the others don't)."""

from __future__ import annotations

import datetime as dt
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lockbuild.errors import LockbuildError
from lockbuild.install.checks import ARCH_ALIASES
from lockbuild.install.marker import list_installed
from lockbuild.install.node import Node, detect, free_bytes, version_tuple
from lockbuild.install.tools import python_version
from lockbuild.recipe import Build, load_recipe
from lockbuild.signing import TrustStore, load_trust_dir
from lockbuild.target import parse_platform
from lockbuild.times import iso
from lockbuild.trust import trust_dir


@dataclass(frozen=True)
class Fit:
    recipe: str
    engine: str
    build: str
    fits: bool
    reasons: tuple[str, ...]


def find_pythons() -> dict[str, str]:
    """python3.N interpreters on PATH, by version."""
    found: dict[str, str] = {}
    for minor in range(8, 20):
        exe = shutil.which(f"python3.{minor}")
        if exe is None:
            continue
        try:
            found[python_version(Path(exe))] = exe
        except LockbuildError:
            continue
    return found


def build_fit(build: Build, node: Node, pythons: dict[str, str], free: int | None) -> tuple[str, ...]:
    """Why ``build`` does not fit ``node`` (empty when it fits). Pure."""
    reasons = []
    plat = parse_platform(build.platform)
    machine = ARCH_ALIASES.get(node.machine, node.machine)
    if plat.arch != machine:
        reasons.append(f"built for {plat.arch}, the node is {machine}")
    if plat.libc == "glibc" and node.libc_version and node.libc_version < plat.libc_version:
        reasons.append(
            f"needs glibc {plat.libc_version[0]}.{plat.libc_version[1]}, the node has "
            f"{node.libc_version[0]}.{node.libc_version[1]}"
        )
    if build.python not in pythons:
        reasons.append(f"needs Python {build.python}, not found on PATH")
    gpu = build.gpu
    if gpu is not None:
        if not node.has_nvidia:
            reasons.append("needs an NVIDIA GPU; no driver found")
        else:
            if gpu.min_driver and node.driver and version_tuple(node.driver) < version_tuple(gpu.min_driver):
                reasons.append(f"needs driver {gpu.min_driver}+, the node has {node.driver}")
            low = [g for g in node.gpus if gpu.min_capability and g.capability < gpu.min_capability]
            if low and gpu.min_capability:
                reasons.append(
                    f"needs compute capability {gpu.min_capability[0]}.{gpu.min_capability[1]}+, "
                    f"the node has {low[0].capability[0]}.{low[0].capability[1]}"
                )
    if build.free_gb and free is not None and free < build.free_gb << 30:
        reasons.append(f"needs {build.free_gb} GB free, the root has {free / 2**30:.1f} GiB")
    return tuple(reasons)


def _trust_report(directory: Path) -> dict[str, Any]:
    try:
        store: TrustStore = load_trust_dir(directory)
    except LockbuildError as exc:
        return {"dir": str(directory), "ok": False, "error": exc.message, "keys": []}
    keys = [{"key_id": k.key_id_hex, "revoked": k.key_id in store.revoked} for k in store.keys]
    return {"dir": str(directory), "ok": True, "keys": keys}


def examine(root: Path, *, catalogue: Path | None, trust: Path | None, node: Node | None = None) -> dict[str, Any]:
    node = node or detect()
    pythons = find_pythons()
    probe = root if root.exists() else root.parent if root.parent.exists() else Path("/")
    free = free_bytes(probe)
    fits: list[Fit] = []
    problems: list[str] = []
    if catalogue is not None and catalogue.is_dir():
        for path in sorted(catalogue.glob("*.toml")):
            try:
                recipe = load_recipe(path)
            except LockbuildError as exc:
                problems.append(exc.message)
                continue
            for b in recipe.builds:
                reasons = build_fit(b, node, pythons, free)
                fits.append(Fit(path.name, recipe.engine.name, b.id, not reasons, reasons))
    return {
        "time": iso(dt.datetime.now(dt.UTC)),
        "node": {
            "machine": node.machine,
            "libc": f"{node.libc} {'.'.join(map(str, node.libc_version or ()))}".strip(),
            "nvidia_driver": node.driver,
            "gpus": [{"name": g.name, "capability": f"{g.capability[0]}.{g.capability[1]}"} for g in node.gpus],
        },
        "pythons": pythons,
        "root": {"path": str(root), "free_bytes": free},
        "trust": _trust_report(trust_dir(trust)),
        "installed": [
            {"path": str(p), "engine": m.engine, "build": f"{m.version}-{m.variant}", "installed": m.installed}
            for p, m in list_installed(root)
        ],
        "catalogue": [
            {"recipe": f.recipe, "engine": f.engine, "build": f.build, "fits": f.fits, "reasons": list(f.reasons)}
            for f in fits
        ],
        "catalogue_problems": problems,
    }


def render(report: dict[str, Any]) -> str:
    n = report["node"]
    gpus = ", ".join(f"{g['name']} (sm {g['capability']})" for g in n["gpus"]) or "none found"
    lines = [
        f"node        {n['machine']}, {n['libc']}",
        f"nvidia      driver {n['nvidia_driver'] or 'not found'}; GPUs: {gpus}",
        "pythons     " + (", ".join(f"{v} ({p})" for v, p in sorted(report["pythons"].items())) or "none found"),
        f"root        {report['root']['path']}: {report['root']['free_bytes'] / 2**30:.1f} GiB free",
    ]
    t = report["trust"]
    if t["ok"]:
        keys = ", ".join(k["key_id"] + (" (REVOKED)" if k["revoked"] else "") for k in t["keys"])
        lines.append(f"trust       {t['dir']}: {keys}")
    else:
        lines.append(f"trust       {t['dir']}: PROBLEM: {t['error']}")
    lines.append("installed   " + (", ".join(f"{i['engine']} {i['build']}" for i in report["installed"]) or "none"))
    for c in report["catalogue"]:
        verdict = "fits" if c["fits"] else "does not fit: " + "; ".join(c["reasons"])
        lines.append(f"catalogue   {c['engine']} {c['build']}: {verdict}")
    lines += [f"catalogue   PROBLEM: {p}" for p in report["catalogue_problems"]]
    return "\n".join(lines)
