"""The choice: which of several builds a node takes. Pure, on the one fit rule (:func:`unmet`).

Among the fitting builds of the asked version: the newest CUDA the node runs wins, then the narrowest
capability range, then the newest signed build, then the candidates' order; a file name never ranks. The
:class:`Choice` says why each candidate was passed over."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from lockbuild.bundle.instructions import GpuNeeds, capability_range
from lockbuild.choice.candidates import Choice, Judged, Option
from lockbuild.errors import InstallError
from lockbuild.gpu.vocab import driver_numbers
from lockbuild.install.node import Node
from lockbuild.install.nodecheck import Facts, GpuCheck, jit_only, unmet
from lockbuild.times import iso


def _cap_value(cap: tuple[int, int] | None, default: int) -> int:
    return default if cap is None else cap[0] * 10 + cap[1]


def _width(gpu: GpuNeeds | None) -> int:
    """How wide a GPU build's capability range is (narrower ranks first); a CPU build has none (0)."""
    if gpu is None:
        return 0
    return _cap_value(gpu.max_capability, 999) - _cap_value(gpu.min_capability, 0)


def _driver_of(o: Option) -> tuple[int, ...]:
    gpu = o.needs.gpu
    return driver_numbers(gpu.min_driver) if gpu is not None and gpu.min_driver else ()


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

    def rank(o: Option) -> tuple[int, int, tuple[int, ...], int, tuple[int, int], int]:
        # 1. the asked version itself; 2. SASS for the node's GPUs over JIT from PTX; 3. the highest min-driver
        # (the newest CUDA); 4. the narrowest range; 5. the newest signed build (serial, then build time); 6. order
        return (
            0 if o.version == version else 1,
            1 if jit_only(o.needs, facts.node) else 0,
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
            judged.append(Judged(o, True, serves, (_passed_over(o, chosen, version, facts.node),)))
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
            f"capability {capability_range(gpu)}"
        )
    elif past_gpu_builds:
        parts.append("a CPU build, taken on a GPU node because no GPU build fits and --allow-cpu was given")
    elif facts.node.has_nvidia:
        parts.append("a build without a gpu table (the candidates hold no GPU build)")
    else:
        parts.append("a build without a gpu table (this node has no NVIDIA GPU)")
    parts.append("the only fitting build" if n == 1 else f"the best of {n} fitting builds")
    return "; ".join(parts)


def _passed_over(o: Option, chosen: Option, version: str, node: Node) -> str:
    if o.is_gpu != chosen.is_gpu:
        return f"a CPU build; {chosen.build} fits" if not o.is_gpu else f"{chosen.build} is preferred"
    if (o.version == version) != (chosen.version == version):
        return f"only serves {version}; {chosen.build} is a build of {version} that fits"
    mine, theirs = o.needs.gpu, chosen.needs.gpu
    if mine is None or theirs is None:  # both CPU builds (is_gpu is the same for both here)
        return _older_or_after(o, chosen)
    if jit_only(o.needs, node) != jit_only(chosen.needs, node):
        return f"reaches this node's GPU only by JIT from PTX; {chosen.build} has SASS for it"
    if _driver_of(o) != _driver_of(chosen):
        return (
            f"needs driver {mine.min_driver or 'any'}+; {chosen.build} needs "
            f"{theirs.min_driver}+, which this node meets (a newer CUDA)"
        )
    if _width(mine) != _width(theirs):
        return (
            f"its capability range {capability_range(mine)} is wider than {chosen.build}'s ({capability_range(theirs)})"
        )
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


def check_not_older(where: str, installed: int, offered: int, *, allow_downgrade: bool) -> None:
    """The downgrade rule, for engines and models alike: a bundle of a lower signed serial than what
    ``where`` holds is refused unless ``--allow-downgrade`` (a replayed older signed build rolls nothing back
    by accident)."""
    if installed > offered and not allow_downgrade:
        raise InstallError(
            f"{where} holds a newer build (serial {installed}) than this bundle ({offered}).",
            tip="Pass --allow-downgrade to roll back on purpose.",
        )
