"""A plan's measured GPU fit, from the readings kept in the cache, and the recipe's ``gpu`` checked
against it or filled in from it. ``lock`` reads only what is kept (a file not read yet is named in
``unread``); ``fetch`` and ``build`` read any file kept without a reading from its cache entry, never
downloading it again."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomlkit
from packaging.utils import canonicalize_name

from lockbuild.builder.pack import UnsignedBundle, fetch_and_write
from lockbuild.builder.plan import Plan
from lockbuild.errors import RecipeError
from lockbuild.fetch.cache import Cache
from lockbuild.fetch.fetcher import Fetcher
from lockbuild.fetch.kernelcache import keep_reading, kept_reading
from lockbuild.gpu.fatbin import Kernels
from lockbuild.gpu.fit import GpuFit, default_gate, measure
from lockbuild.gpu.sharedobjects import Reading
from lockbuild.gpu.vocab import capability_text, driver_at_least
from lockbuild.recipe.model import GpuRequirement

ARCHIVES = (".whl", ".zip", ".tar", ".tar.gz", ".tgz", ".tar.xz", ".tar.bz2")


@dataclass(frozen=True)
class Measured:
    fit: GpuFit | None  # None while a file is unread
    unread: tuple[str, ...] = ()  # file names whose reading is not kept yet

    def to_json(self) -> dict[str, Any]:
        return {"gpu_fit": self.fit.to_json() if self.fit else None, "gpu_fit_unread": list(self.unread)}

    def text(self) -> str:
        if self.fit is not None:
            return self.fit.line()
        shown = ", ".join(self.unread[:3]) + (f" and {len(self.unread) - 3} more" if len(self.unread) > 3 else "")
        return f"GPU fit: not measured yet ({shown} not read); `lockbuild fetch` reads them"


def _files(plan: Plan) -> list[tuple[str, str, str]]:
    """(package, file name, sha256) of each file that can carry GPU code: the lock's wheels, the wheels
    built here from its sdists, and the build's release assets (counted as the engine's package)."""
    out: list[tuple[str, str, str]] = [
        (str(canonicalize_name(f.name)), f.filename, f.sha256) for f in plan.lock.files if f.kind == "wheel"
    ]
    by_sdist = {f.filename: str(canonicalize_name(f.name)) for f in plan.lock.files if f.kind == "sdist"}
    out += [(by_sdist.get(p.sdist, p.sdist), p.path.rsplit("/", 1)[-1], p.sha256) for p in plan.prebuilt]
    engine = str(canonicalize_name(plan.recipe.engine.pypi))  # the gate names the engine by its package
    out += [(engine, e.path.rsplit("/", 1)[-1], e.sha256) for e in plan.extras if e.kind == "asset"]
    return out


def measure_plan(plan: Plan, cache: Cache, *, read_missing: bool = False) -> Measured:
    """The plan's fit from the kept readings; ``read_missing`` (fetch, build: every file is cached) reads
    a cached file that has none yet."""
    readings: dict[str, list[tuple[str, Kernels]]] = {}
    cudart: list[str] = []
    unread = []
    for package, name, sha in _files(plan):
        reading: Reading | None = kept_reading(cache, sha)
        if reading is None and read_missing and (path := cache.lookup(sha, None, hashed=False)) is not None:
            reading = keep_reading(cache, path, sha, name)
        if reading is None:
            if name.endswith(ARCHIVES):  # a release binary that is no archive: nothing to read in it
                unread.append(name)
            continue
        readings.setdefault(package, []).extend(reading.files)
        cudart += reading.cudart
    if unread:
        return Measured(None, tuple(unread))
    versions = {str(canonicalize_name(f.name)): f.version for f in plan.lock.files}
    kernels_from = plan.build.gpu.kernels_from if plan.build.gpu is not None else ()
    gate = default_gate(str(canonicalize_name(plan.recipe.engine.pypi)), kernels_from)
    return Measured(measure(readings, versions, cudart, gate))


def contradictions(stated: GpuRequirement, fit: GpuFit) -> list[str]:
    """Where the recipe's ``gpu`` says what the binaries contradict, each naming both numbers and the package."""
    out: list[str] = []
    if not fit.gated:
        return out
    low = stated.min_capability
    if low is not None and fit.coverage(low) is None:
        have = capability_text(fit.min_capability) if fit.min_capability else "no capability"
        lacking = fit.lacking(low)
        out.append(
            f"min-capability {capability_text(low)}: {', '.join(lacking)} {'has' if len(lacking) == 1 else 'have'} "
            f"no kernels for "
            f"{capability_text(low)} (the gated packages start at {have})"
        )
    high, top = stated.max_capability, fit.max_capability
    if high is not None and not fit.jit_beyond and (top is None or high > top):
        tops = sorted((max((a.capability for a in p.kernels.sass), default=(0, 0)), p.name) for p in fit.gated)
        out.append(
            f"max-capability {capability_text(high)}: the highest SASS is {capability_text(top) if top else 'none'} "
            f"({tops[0][1]} stops at {capability_text(tops[0][0])}) and not every gated package has PTX"
        )
    floor = fit.min_driver
    if stated.min_driver is not None and floor is not None and not driver_at_least(stated.min_driver, floor):
        out.append(f"min-driver {stated.min_driver}: the CUDA {fit.cuda} runtime of the lock needs driver {floor}")
    return out


def check_and_fill(plan: Plan, fit: GpuFit) -> Plan:
    """The plan with its recipe's ``gpu`` checked against ``fit`` (a contradiction: ``RecipeError``, exit 2)
    and its omitted values filled in from it, in the build and in the resolved recipe."""
    stated = plan.build.gpu or GpuRequirement(None, None)
    problems = contradictions(stated, fit)
    if problems:
        where = f"{plan.recipe.path}: builds[{plan.build.position}].gpu ({plan.build.id})"
        raise RecipeError(
            f"{where} says what its binaries contradict: " + "; ".join(problems) + ".",
            tip="Correct the recipe's gpu table to the measured fit (or leave the values out: they are filled in "
            "from the binaries).",
        )
    if not fit.gated:
        return plan
    filled = GpuRequirement(
        stated.min_capability or fit.min_capability,
        stated.min_driver or fit.min_driver,
        stated.max_capability or (None if fit.jit_beyond else fit.max_capability),
        stated.kernels_from,
    )
    text = plan.resolved_recipe if filled == stated else _filled_text(plan, filled)
    build = dataclasses.replace(plan.build, gpu=filled)
    return dataclasses.replace(plan, build=build, resolved_recipe=text, gpu_fit=fit)


def _filled_text(plan: Plan, gpu: GpuRequirement) -> str:
    doc = tomlkit.parse(plan.resolved_recipe)
    keep = doc["builds"][0]
    table = keep.get("gpu") or tomlkit.inline_table()
    for key, value in (
        ("min-capability", gpu.min_capability),
        ("max-capability", gpu.max_capability),
    ):
        if value is not None and key not in table:
            table[key] = capability_text(value)
    if gpu.min_driver is not None and "min-driver" not in table:
        table["min-driver"] = gpu.min_driver
    keep["gpu"] = table
    return tomlkit.dumps(doc)


def measured_and_filled(plan: Plan, cache: Cache) -> tuple[Plan, Measured]:
    """``fetch``: the fit of a plan whose files are all in the cache, and the plan checked and filled by it."""
    measured = measure_plan(plan, cache, read_missing=True)
    return (check_and_fill(plan, measured.fit) if measured.fit is not None else plan), measured


def pack_measured(
    plan: Plan, fetcher: Fetcher, out: Path, *, threads: int | None = None
) -> tuple[Plan, UnsignedBundle, Measured]:
    """Fetch and pack ``plan`` with its recipe's ``gpu`` checked against, and filled in from, the measured
    fit (before anything is signed). With every reading kept, the fit is known before packing; else it is
    measured from the files as they arrived, and a bundle whose filled-in values differ is packed again from
    the cache (the first build of a recipe that leaves its ``gpu`` to the binaries)."""
    first = measure_plan(plan, fetcher.cache)
    if first.fit is not None:
        plan = check_and_fill(plan, first.fit)
        return plan, fetch_and_write(plan, fetcher, out, threads=threads)[0], first
    written = fetch_and_write(plan, fetcher, out, threads=threads)[0]
    try:
        measured = measure_plan(plan, fetcher.cache, read_missing=True)
        filled = check_and_fill(plan, measured.fit) if measured.fit is not None else plan
    except BaseException:
        written.discard()
        raise
    if filled is plan:
        return plan, written, measured
    written.discard()
    return filled, fetch_and_write(filled, fetcher, out, threads=threads)[0], measured
