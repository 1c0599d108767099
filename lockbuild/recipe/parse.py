"""Parsing a recipe: TOML text in, a validated ``Recipe`` out, or one RecipeError listing every problem."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from lockbuild import envtable
from lockbuild.documents import Problems
from lockbuild.errors import RecipeError
from lockbuild.gpu.vocab import is_driver, parse_capability
from lockbuild.limits import MiB
from lockbuild.recipe.checks import (
    PROJECT,
    PYTHON,
    SHA256,
    VERSION,
    github_repo,
    parse_as_of,
    plain_name,
    plain_name_or_file,
    project_name,
    relative_path,
    requirement,
    shown_requirement,
)
from lockbuild.recipe.fields import (
    MAX_LIST,
    SHOWN,
    Table,
    describe,
    load_toml,
    read_recipe_text,
    recipe_problems,
)
from lockbuild.recipe.model import (
    Build,
    Engine,
    GpuRequirement,
    Recipe,
    SecondIndex,
)
from lockbuild.recipe.tables import (
    parse_assets,
    parse_extra_files,
    parse_index,
    parse_indexes,
    parse_interpreter,
    parse_source,
    parse_wheel,
)
from lockbuild.target import Target, parse_platform
from lockbuild.times import iso

MAX_RECIPE_BYTES = MiB


_ENGINE_KEYS = ("name", "pypi", "repo", "binary", "verify", "gpu-probe", "env", "smoke", "gpu-smoke", "allow-network")
_BUILD_KEYS = (
    "version",
    "variant",
    "python",
    "platform",
    "requirements",
    "as-of",
    "free-gb",
    "gpu",
    "index",
    "source",
    "wheel",
    "assets",
    "pin-sha256",
    "exclude-newer-package",
    "build-on-node",
    "interpreter",
    "indexes",
    "primary-packages",
    "serves",
    "extra-files",
)


def _engine(data: Mapping[str, Any], p: Problems) -> Engine | None:
    t = Table(data, "engine", p, _ENGINE_KEYS)
    name = t.string("name", "a lower-case name of letters, digits, '.', '_' or '-'", check=plain_name)
    pypi = t.string("pypi", "a PyPI project name", check=project_name)
    repo = t.string("repo", "OWNER/NAME of a GitHub repository", required=False, check=github_repo)
    binary = t.string("binary", "a file name in the environment's bin/", check=plain_name_or_file)
    verify = _command(t, "verify", 'a command as a list of strings, e.g. ["vllm", "--version"]', required=True)
    probe = t.string("gpu-probe", '"torch", "none", or a relative path to a .py file', required=False)
    if (
        probe is not None
        and probe not in ("torch", "none")
        and not (relative_path(probe) and probe.endswith(".py") and envtable.word_problem(probe) is None)
    ):
        p.add("engine.gpu-probe", f'expected "torch", "none", or a relative path to a .py file, found {probe!r}')
        probe = None
    env, smoke, allow = _runtime(t, p)
    gpu_smoke = (
        _command(t, "gpu-smoke", 'a command as a list of strings, e.g. ["engine", "--gpu-selftest"]', required=False)
        or ()
    )
    if name is None or pypi is None or binary is None or verify is None:
        return None
    return Engine(name, pypi, repo, binary, verify, probe or "none", env, smoke, allow, gpu_smoke)


def _command(t: Table, key: str, expected: str, *, required: bool) -> tuple[str, ...] | None:
    """A command (``verify``, ``smoke``): a list of at least one word, each plain text, no control character
    (a newline, NUL or escape in a signed command is refused here, not met later as a damaged download)."""
    words = t.strings(key, expected, required=required)
    if words is None:
        return None
    if not words:
        t.p.add(t.key(key), "expected a command of at least one word, found an empty list")
        return None
    if len(words) > envtable.MAX_SMOKE_WORDS:
        t.p.add(t.key(key), f"expected at most {envtable.MAX_SMOKE_WORDS} words, found {len(words)}")
        return None
    for i, word in enumerate(words):
        why = envtable.word_problem(word)
        if why is not None:
            t.p.add(t.key(key), f"word {i}: {why}; expected plain text (no newline, NUL, escape or other control)")
            return None
    return words


def _runtime(t: Table, p: Problems) -> tuple[tuple[tuple[str, str], ...], tuple[str, ...], tuple[str, ...]]:
    """``[engine.env]``, ``smoke`` and ``allow-network``, checked by the rules the node applies."""
    smoke = _command(t, "smoke", 'a command as a list of strings, e.g. ["engine", "--selftest"]', required=False) or ()
    hosts = t.strings("allow-network", 'a list of host names, e.g. ["huggingface.co"]', required=False) or ()
    for h in hosts:
        why = envtable.host_problem(h)
        if why:
            p.add("engine.allow-network", why)
            hosts = ()
            break
    env: list[tuple[str, str]] = []
    data = t.table("env") or {}
    if len(data) > envtable.MAX_ENTRIES:
        p.add("engine.env", f"expected at most {envtable.MAX_ENTRIES} settings, found {len(data)}")
        data = {}
    for key, value in data.items():
        why = envtable.problem(key, value, allow_network=hosts)  # the one rule, which the node applies too
        if why:
            p.add(f"engine.env.{key[:SHOWN]}", why)
        else:
            env.append((key, value))
    return tuple(sorted(env)), smoke, tuple(hosts)


def _build(data: Mapping[str, Any], i: int, p: Problems) -> Build | None:
    where = f"builds[{i}]"
    t = Table(data, where, p, _BUILD_KEYS)
    version = t.string("version", "a version such as 0.11.0", check=lambda v: bool(VERSION.fullmatch(v)))
    variant = t.string("variant", "a variant name such as cu128", check=plain_name)
    python = t.string("python", 'a Python version "3.X"', check=lambda v: bool(PYTHON.fullmatch(v)))
    platform = t.string("platform", "a platform such as x86_64-manylinux_2_28")
    parsed_platform = None
    if platform is not None:
        try:
            parsed_platform = parse_platform(platform)
        except ValueError as exc:
            p.add(f"{where}.platform", str(exc))
    target = None
    if python is not None and platform is not None and parsed_platform is not None:
        target = Target(python, platform, parsed_platform)
    reqs = t.strings("requirements", "a list of requirement strings")
    parsed: list[Requirement] = []
    if reqs is not None and not reqs:
        p.add(f"{where}.requirements", "expected at least one requirement, found an empty list")
        reqs = None
    if reqs is not None:
        for j, r in enumerate(reqs):
            got = requirement(r)
            if isinstance(got, str):
                p.add(f"{where}.requirements[{j}]", f"{got}: {shown_requirement(r)[:80]!r}")
            else:
                parsed.append(got)
    as_of = parse_as_of(data["as-of"], f"{where}.as-of", p) if "as-of" in data else None
    free_gb = t.get("free-gb", int, "a whole number of gigabytes", required=False)
    if free_gb is not None and not 0 < free_gb < 100_000:
        p.add(f"{where}.free-gb", f"expected between 1 and 99999, found {free_gb}")
    gpu = _gpu(t.table("gpu"), f"{where}.gpu", p)
    index = parse_index(t.table("index"), f"{where}.index", p, parsed)
    indexes = parse_indexes(t, where, p, parsed, index)
    source = parse_source(t.table("source"), f"{where}.source", p)
    wheel = parse_wheel(t.table("wheel"), f"{where}.wheel", p)
    assets = parse_assets(t.table("assets"), f"{where}.assets", p)
    pins = _pin_sha256(t.table("pin-sha256"), f"{where}.pin-sha256", p)
    exempt = _exclude_newer_package(t.table("exclude-newer-package"), f"{where}.exclude-newer-package", p)
    on_node = t.strings("build-on-node", "a list of package names", required=False) or ()
    bad = [n for n in on_node if not project_name(n)]
    if bad:
        p.add(f"{where}.build-on-node", f"expected package names, found {bad[0][:SHOWN]!r}")
    python_exe = parse_interpreter(t.table("interpreter"), f"{where}.interpreter", p, python)
    on_primary = _primary_packages(t, where, p, ((index,) if index is not None else ()) + indexes)
    serves = _serves(t, where, p, version)
    extra_files = parse_extra_files(t, where, p)
    if version is None or variant is None or target is None or reqs is None:
        return None
    return Build(
        version,
        variant,
        target,
        reqs,
        as_of,
        free_gb,
        gpu,
        index,
        source,
        wheel,
        assets,
        i,
        pins,
        exempt,
        tuple(sorted({canonicalize_name(n) for n in on_node})),
        python_exe,
        indexes,
        on_primary,
        serves,
        extra_files,
    )


def _serves(t: Table, where: str, p: Problems, version: str | None) -> tuple[str, ...]:
    """``serves = ["0.11.0"]``: newer versions whose nodes this build serves when none of their own builds
    fits; each a version above the build's own."""
    from packaging.version import InvalidVersion, Version

    serves = t.strings("serves", 'a list of newer versions, e.g. ["0.11.0"]', required=False) or ()
    for v in serves:
        try:
            newer = version is None or Version(v) > Version(version)
        except InvalidVersion:
            p.add(f"{where}.serves", f'expected versions such as "0.11.0", found {v[:SHOWN]!r}')
            continue
        if not newer or not VERSION.fullmatch(v):
            p.add(f"{where}.serves", f"expected versions newer than the build's own ({version}), found {v[:SHOWN]!r}")
    return tuple(serves)


def _primary_packages(t: Table, where: str, p: Problems, extra: tuple[SecondIndex, ...]) -> tuple[str, ...]:
    """``primary-packages = ["numpy", ...]``: names an extra index serves too, which the lock takes from the
    primary index anyway: the recipe's explicit choice, where the lock would otherwise refuse such a name
    (torchtriton). A name may not be both here and on an extra index."""
    names = t.strings("primary-packages", "a list of package names", required=False) or ()
    bad = [n for n in names if not project_name(n)]
    if bad:
        p.add(f"{where}.primary-packages", f"expected package names, found {bad[0][:SHOWN]!r}")
        return ()
    if names and not extra:
        p.add(f"{where}.primary-packages", "expected an extra index (index or indexes) for it to choose against")
    canonical = tuple(sorted({canonicalize_name(n) for n in names}))
    for ix in extra:
        both = sorted(set(canonical) & set(ix.packages))
        if both:
            p.add(
                f"{where}.primary-packages",
                f"{both[0]!r} is named both here and on {'the index key' if ix.name == 'second' else repr(ix.name)}; "
                "expected each package on one index only",
            )
    return canonical


def _pin_sha256(data: Mapping[str, Any] | None, where: str, p: Problems) -> tuple[tuple[str, str], ...]:
    """``pin-sha256 = { torch = "<sha256>" }``: the package is that one file (yanked or not), nothing else."""
    if data is None:
        return ()
    out: dict[str, str] = {}
    for name, value in data.items():
        key = f"{where}.{name[:SHOWN]}"
        if not project_name(name):
            p.add(key, "expected a package name")
        elif not isinstance(value, str) or not SHA256.fullmatch(value):
            p.add(key, f"expected the file's sha256 as 64 lower-case hex digits, found {describe(value)}")
        elif canonicalize_name(name) in out:
            p.add(key, "the package is named twice")
        else:
            out[canonicalize_name(name)] = value
    return tuple(sorted(out.items()))


def _exclude_newer_package(
    data: Mapping[str, Any] | None, where: str, p: Problems
) -> tuple[tuple[str, str | None], ...]:
    """``exclude-newer-package = { setuptools = "2024-06-01T00:00:00Z" }`` (or ``false``: no cut-off), as uv's
    --exclude-newer-package."""
    if data is None:
        return ()
    out: dict[str, str | None] = {}
    for name, value in data.items():
        key = f"{where}.{name[:SHOWN]}"
        if not project_name(name):
            p.add(key, "expected a package name")
            continue
        if value is False:
            out[canonicalize_name(name)] = None
            continue
        if value is True:
            p.add(key, "expected an RFC 3339 time such as 2024-06-01T00:00:00Z, or false for no cut-off; found true")
            continue
        when = parse_as_of(value, key, p)
        if when is not None:
            out[canonicalize_name(name)] = iso(when)
    return tuple(sorted(out.items()))


def _gpu(data: Mapping[str, Any] | None, where: str, p: Problems) -> GpuRequirement | None:
    if data is None:
        return None
    t = Table(data, where, p, ("min-capability", "max-capability", "min-driver", "kernels-from"))
    capability, highest = None, None
    for key in ("min-capability", "max-capability"):
        cap = t.string(key, 'a compute capability such as "8.0"', required=False)
        parsed = parse_capability(cap)
        if cap is not None and parsed is None:
            p.add(f"{where}.{key}", f'expected a compute capability such as "8.0", found {cap!r}')
        elif parsed is not None and key == "min-capability":
            capability = parsed
        elif parsed is not None:
            highest = parsed
    if capability is not None and highest is not None and highest < capability:
        p.add(
            f"{where}.max-capability",
            f"expected at least min-capability ({capability[0]}.{capability[1]}), found {highest[0]}.{highest[1]}",
        )
    driver = t.string(
        "min-driver",
        'a driver version such as "580" or "570.86"',
        required=False,
        check=is_driver,
    )
    named = t.strings("kernels-from", 'a list of package names, e.g. ["sgl-kernel"]', required=False) or ()
    for name in named:
        if not PROJECT.fullmatch(name):
            p.add(f"{where}.kernels-from", f"expected package names, found {name!r}")
    kernels_from = tuple(dict.fromkeys(canonicalize_name(n) for n in named if PROJECT.fullmatch(n)))
    return GpuRequirement(capability, driver, highest, kernels_from)


def parse_recipe(text: str, path: str = "<recipe>") -> Recipe:
    """Parse and validate a recipe; raise RecipeError listing every problem found."""
    data = load_toml(text, path, MAX_RECIPE_BYTES, "a recipe")
    p = recipe_problems(path)
    top = Table(data, "", p, ("engine", "builds"))
    engine_data = top.get("engine", dict, "an [engine] table")
    engine = _engine(engine_data, p) if engine_data is not None else None
    builds_data = top.get("builds", list, "one or more [[builds]] tables")
    builds: list[Build] = []
    if builds_data is not None:
        if not builds_data:
            p.add("builds", "expected one or more [[builds]] tables, found none")
        if len(builds_data) > MAX_LIST:
            p.add("builds", f"expected at most {MAX_LIST} builds, found {len(builds_data)}")
            builds_data = []
        for i, b in enumerate(builds_data):
            if not isinstance(b, dict):
                p.add(f"builds[{i}]", f"expected a table, found {describe(b)}")
                continue
            built = _build(b, i, p)
            if built is not None:
                builds.append(built)
    seen: dict[str, int] = {}
    for b in builds:
        if b.id in seen:
            p.add(f"builds[{b.position}]", f"duplicate build {b.id} (also builds[{seen[b.id]}])")
        seen[b.id] = b.position
    if engine is not None and engine.repo is None:
        for b in builds:
            if b.assets is not None:
                p.add(f"builds[{b.position}].assets", "release assets need engine.repo (the GitHub OWNER/NAME)")
    p.raise_if_any()
    if engine is None:  # each way to no engine records a problem above; refused here all the same
        raise RecipeError(f"{path}: expected an [engine] table with name, pypi, binary and verify, found none usable")
    return Recipe(path, engine, tuple(builds), text)


def load_recipe(path: Path) -> Recipe:
    text = read_recipe_text(path, MAX_RECIPE_BYTES)
    return parse_recipe(text, str(path))
