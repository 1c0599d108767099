"""lockbuild doctor: what a node has, and which candidate builds fit it (and why the others don't).

Fit is decided by :func:`lockbuild.install.nodecheck.unmet`, the rule ``install`` refuses by, on the same
facts. Candidates come from the caller: the CLI turns catalogue recipes (and bundles' signed manifests)
into :class:`CatalogueBuild` needs, so nothing here parses a recipe.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lockbuild.choice.choose import Place, store_choices
from lockbuild.errors import LockbuildError
from lockbuild.install.marker import list_installed
from lockbuild.install.node import Node, detect, free_bytes
from lockbuild.install.nodecheck import Facts, Needs, unmet
from lockbuild.install.pythons import base_of, shared_python
from lockbuild.install.tools import python_version
from lockbuild.text import one_line
from lockbuild.times import iso
from lockbuild.trust import TrustStore, load_trust_store


@dataclass(frozen=True)
class CatalogueBuild:
    """One build of the catalogue doctor judges: a recipe's build or a bundle's signed needs (read, not verified)."""

    source: str  # the recipe or bundle file it came from
    engine: str
    build: str
    needs: Needs


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


def facts(node: Node, pythons: dict[str, str], free: int) -> Facts:
    return Facts(node, frozenset(pythons), free)


def _interpreter(root: Path, env: Path) -> dict[str, Any]:
    """Which interpreter an environment runs on: its pyvenv.cfg home, and whether it is a bundle's
    shared one (``<root>/.python/<sha256>``, named by the sha256 of the archive it came from)."""
    home = base_of(env)
    return {"home": str(home) if home else None, "bundled_sha256": shared_python(root, env)}


def _trust_report(directory: Path) -> dict[str, Any]:
    try:
        store: TrustStore = load_trust_store(directory)
    except LockbuildError as exc:
        return {"dir": str(directory), "ok": False, "error": exc.message, "keys": []}
    keys = [{"key_id": k.key_id_hex, "revoked": store.is_revoked(k)} for k in store.keys]
    return {"dir": str(directory), "ok": True, "keys": keys, "threshold": store.policy.threshold}


def examine(
    root: Path,
    *,
    candidates: Sequence[CatalogueBuild] = (),
    problems: Sequence[str] = (),
    trust: Path,
    node: Node | None = None,
    store: Place | None = None,
) -> dict[str, Any]:
    node = node or detect()
    pythons = find_pythons()
    probe = root if root.exists() else root.parent if root.parent.exists() else Path("/")
    free = free_bytes(probe)
    on_node = facts(node, pythons, free)
    fits: list[Fit] = []
    for c in candidates:
        reasons = unmet(c.needs, on_node)
        fits.append(Fit(c.source, c.engine, c.build, not reasons, reasons))
    return {
        "time": iso(dt.datetime.now(dt.UTC)),
        "node": {
            "machine": node.machine,
            "libc": f"{node.libc} {'.'.join(map(str, node.libc_version or ()))}".strip(),
            "nvidia_driver": node.driver,
            "facts": "stated" if node.stated else "detected",
            "facts_file": node.stated,
            "gpus": [{"name": g.name, "capability": f"{g.capability[0]}.{g.capability[1]}"} for g in node.gpus],
        },
        "pythons": pythons,
        "root": {"path": str(root), "free_bytes": free},
        "trust": _trust_report(trust),
        "installed": [
            {
                "path": str(p),
                "engine": m.engine,
                "build": f"{m.version}-{m.variant}",
                "installed": m.installed,
                "python": _interpreter(root, p),
            }
            for p, m in list_installed(root)
        ],
        "catalogue": [
            {"recipe": f.recipe, "engine": f.engine, "build": f.build, "fits": f.fits, "reasons": list(f.reasons)}
            for f in fits
        ],
        "catalogue_problems": list(problems),
        "lockbuild": self_install_report(),
        **({"store": _store_report(store, trust, node, root)} if store is not None else {}),
    }


def writable_here(path: Path) -> bool:
    """Whether the current user may write into ``path`` (the kernel's answer, root included)."""
    return os.access(path, os.W_OK)


def self_install_report(path0: str | None = None) -> dict[str, Any]:
    """Where lockbuild itself is installed, and which of those places the current user can write:
    code written there (a ``.pth``, a ``getpass.py`` beside the package, a changed module) runs in the next
    lockbuild command, the one that asks for a passphrase included. ``sys.path[0]`` is the directory of the
    running script (a console script's ``bin/``), searched before everything else."""
    import lockbuild

    package = Path(lockbuild.__file__).resolve().parent
    first = sys.path[0] if path0 is None else path0
    places = {"package": package, "site": package.parent}
    if first:
        places["sys.path[0]"] = Path(first).resolve()
    writable = {name: str(p) for name, p in places.items() if p.exists() and writable_here(p)}
    warnings = [
        f"lockbuild's {name} directory {where} is writable by this user: code written there runs in every later "
        "lockbuild command, the one that signs included; install lockbuild where the account that runs builds "
        "cannot write (a venv owned by root or another user, or uv tool / pipx under another account)"
        for name, where in writable.items()
    ]
    return {"package": str(package), "sys_path0": first, "writable": writable, "warnings": warnings}


def _store_report(store: Place, trust: Path, node: Node, root: Path) -> dict[str, Any]:
    """doctor --store: each engine and version in the store, and the build this node would take."""
    try:
        entries = store_choices(store, trust=load_trust_store(trust), node=node, root=root)
    except LockbuildError as exc:
        return {"path": str(store.path), "ok": False, "error": exc.message, "entries": []}
    return {"path": str(store.path), "ok": True, "entries": entries}


def render(report: dict[str, Any]) -> str:
    n = report["node"]
    gpus = ", ".join(f"{g['name']} (sm {g['capability']})" for g in n["gpus"]) or "none found"
    stated = f" (stated in {n['facts_file']}, not detected)" if n.get("facts_file") else ""
    lines = [
        f"node        {n['machine']}, {n['libc']}",
        f"nvidia      driver {n['nvidia_driver'] or 'not found'}; GPUs: {gpus}{stated}",
        "pythons     " + (", ".join(f"{v} ({p})" for v, p in sorted(report["pythons"].items())) or "none found"),
        f"root        {report['root']['path']}: {report['root']['free_bytes'] / 2**30:.1f} GiB free",
    ]
    t = report["trust"]
    if t["ok"]:
        keys = ", ".join(k["key_id"] + (" (REVOKED)" if k["revoked"] else "") for k in t["keys"])
        lines.append(f"trust       {t['dir']}: {keys}; {t['threshold']} signature(s) needed")
    else:
        lines.append(f"trust       {t['dir']}: PROBLEM: {t['error']}")
    lines.append("installed   " + (", ".join(f"{i['engine']} {i['build']}" for i in report["installed"]) or "none"))
    for i in report["installed"]:
        py = i["python"]
        how = f"the bundle's own, {py['bundled_sha256'][:12]}" if py["bundled_sha256"] else "the node's"
        lines.append(f"  python    {i['engine']} {i['build']}: {how} ({py['home'] or 'unknown'})")
    for c in report["catalogue"]:
        verdict = "fits" if c["fits"] else "does not fit: " + "; ".join(c["reasons"])
        lines.append(f"catalogue   {c['engine']} {c['build']}: {verdict}")
    lines += [f"catalogue   PROBLEM: {p}" for p in report["catalogue_problems"]]
    own = report.get("lockbuild") or {}
    lines += [f"lockbuild   WARNING: {w}" for w in own.get("warnings", ())]
    if own and not own.get("warnings"):
        lines.append(f"lockbuild   {own['package']}: not writable by this user")
    if "store" in report:
        lines += _render_store(report["store"])
    return "\n".join(one_line(line) for line in lines)  # a catalogue file's name cannot start a line of its own


def _render_store(s: dict[str, Any]) -> list[str]:
    if not s["ok"]:
        return [f"store       {s['path']}: PROBLEM: {s['error']}"]
    if not s["entries"]:
        return [f"store       {s['path']}: no builds"]
    out = []
    for e in s["entries"]:
        head = f"store       {e['engine']} {e['version']}: "
        out.append(head + (f"takes {e['chosen']} ({e['why']})" if e["chosen"] else f"nothing fits ({e['why']})"))
        for c in e["candidates"]:
            if c["build"] == e["chosen"]:
                continue
            via = f" (serves {c['serves']})" if c["serves"] else ""
            verdict = "fits, passed over" if c["fits"] else "does not fit"
            out.append(f"              {c['build']}{via}: {verdict}: {'; '.join(c['reasons'])}")
        if e.get("fix"):
            out.append(f"              fix: {e['fix']}")
    return out
