"""Parsing a recipe: TOML text in, a validated ``Recipe`` out, or one RecipeError listing every problem."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from lockbuild import envtable, interpreter
from lockbuild.errors import RecipeError
from lockbuild.recipe.checks import (
    CAPABILITY,
    DRIVER,
    PYTHON,
    SHA256,
    TAG_EXPECTED,
    VERSION,
    file_part,
    git_tag,
    github_repo,
    https_url,
    parse_as_of,
    pinned_version,
    plain_name,
    plain_name_or_file,
    project_name,
    relative_path,
    requirement,
    wheel_filename,
)
from lockbuild.recipe.fields import MAX_LIST, SHOWN, Problems, Table, describe
from lockbuild.recipe.model import (
    Assets,
    Build,
    Engine,
    GpuRequirement,
    Interpreter,
    Recipe,
    ReleaseWheel,
    SecondIndex,
    Source,
    UrlWheel,
)
from lockbuild.target import Target, parse_platform
from lockbuild.times import iso

MAX_RECIPE_BYTES = 1 << 20


_ENGINE_KEYS = ("name", "pypi", "repo", "binary", "verify", "gpu-probe", "env", "smoke", "allow-network")
_BUILD_KEYS = (
    "version", "variant", "python", "platform", "requirements", "as-of", "free-gb",
    "gpu", "index", "source", "wheel", "assets", "pin-sha256", "exclude-newer-package", "build-on-node",
    "interpreter", "indexes",
)  # fmt: skip


def _engine(data: Mapping[str, Any], p: Problems) -> Engine | None:
    t = Table(data, "engine", p, _ENGINE_KEYS)
    name = t.string("name", "a lower-case name of letters, digits, '.', '_' or '-'", check=plain_name)
    pypi = t.string("pypi", "a PyPI project name", check=project_name)
    repo = t.string("repo", "OWNER/NAME of a GitHub repository", required=False, check=github_repo)
    binary = t.string("binary", "a file name in the environment's bin/", check=plain_name_or_file)
    verify = t.strings("verify", 'a command as a list of strings, e.g. ["vllm", "--version"]')
    if verify is not None and not verify:
        p.add("engine.verify", "expected a command of at least one word, found an empty list")
    probe = t.string("gpu-probe", '"torch", "none", or a relative path to a .py file', required=False)
    if probe is not None and probe not in ("torch", "none") and not (relative_path(probe) and probe.endswith(".py")):
        p.add("engine.gpu-probe", f'expected "torch", "none", or a relative path to a .py file, found {probe!r}')
        probe = None
    env, smoke, allow = _runtime(t, p)
    if None in (name, pypi, binary, verify):
        return None
    assert name is not None and pypi is not None and binary is not None and verify is not None
    return Engine(name, pypi, repo, binary, verify, probe or "none", env, smoke, allow)


def _runtime(
    t: Table, p: Problems
) -> tuple[tuple[tuple[str, str], ...], tuple[str, ...], tuple[str, ...]]:
    """``[engine.env]``, ``smoke`` and ``allow-network`` (issue 15), checked by the rules the node applies."""
    env: list[tuple[str, str]] = []
    data = t.table("env") or {}
    if len(data) > envtable.MAX_ENTRIES:
        p.add("engine.env", f"expected at most {envtable.MAX_ENTRIES} settings, found {len(data)}")
        data = {}
    for key, value in data.items():
        why = envtable.problem(key, value)
        if why:
            p.add(f"engine.env.{key[:SHOWN]}", why)
        else:
            env.append((key, value))
    smoke = t.strings("smoke", 'a command as a list of strings, e.g. ["engine", "--selftest"]', required=False) or ()
    bad = next((w for w in (envtable.word_problem(x) for x in smoke) if w), None)
    if bad or len(smoke) > envtable.MAX_SMOKE_WORDS:
        p.add("engine.smoke", bad or f"expected at most {envtable.MAX_SMOKE_WORDS} words")
        smoke = ()
    hosts = t.strings("allow-network", 'a list of host names, e.g. ["huggingface.co"]', required=False) or ()
    for h in hosts:
        why = envtable.host_problem(h)
        if why:
            p.add("engine.allow-network", why)
            hosts = ()
            break
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
                p.add(f"{where}.requirements[{j}]", f"{got}: {r[:80]!r}")
            else:
                parsed.append(got)
    as_of = parse_as_of(data["as-of"], f"{where}.as-of", p) if "as-of" in data else None
    free_gb = t.get("free-gb", int, "a whole number of gigabytes", required=False)
    if free_gb is not None and not 0 < free_gb < 100_000:
        p.add(f"{where}.free-gb", f"expected between 1 and 99999, found {free_gb}")
    gpu = _gpu(t.table("gpu"), f"{where}.gpu", p)
    index = _index(t.table("index"), f"{where}.index", p, parsed)
    indexes = _indexes(t, where, p, parsed, index)
    source = _source(t.table("source"), f"{where}.source", p)
    wheel = _wheel(t.table("wheel"), f"{where}.wheel", p)
    assets = _assets(t.table("assets"), f"{where}.assets", p)
    pins = _pin_sha256(t.table("pin-sha256"), f"{where}.pin-sha256", p)
    exempt = _exclude_newer_package(t.table("exclude-newer-package"), f"{where}.exclude-newer-package", p)
    on_node = t.strings("build-on-node", "a list of package names", required=False) or ()
    bad = [n for n in on_node if not project_name(n)]
    if bad:
        p.add(f"{where}.build-on-node", f"expected package names, found {bad[0][:SHOWN]!r}")
    python_exe = _interpreter(t.table("interpreter"), f"{where}.interpreter", p, python)
    if None in (version, variant, target, reqs):
        return None
    assert version is not None and variant is not None and target is not None and reqs is not None
    return Build(
        version, variant, target, reqs, as_of, free_gb, gpu, index, source, wheel, assets, i, pins, exempt,
        tuple(sorted({canonicalize_name(n) for n in on_node})), python_exe, indexes,
    )  # fmt: skip


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
    t = Table(data, where, p, ("min-capability", "min-driver"))
    cap = t.string("min-capability", 'a compute capability such as "8.0"', required=False)
    capability = None
    if cap is not None:
        m = CAPABILITY.fullmatch(cap)
        if m is None:
            p.add(f"{where}.min-capability", f'expected a compute capability such as "8.0", found {cap!r}')
        else:
            capability = (int(m[1]), int(m[2]))
    driver = t.string(
        "min-driver",
        'a driver version such as "580" or "570.86"',
        required=False,
        check=lambda v: bool(DRIVER.fullmatch(v)),
    )
    return GpuRequirement(capability, driver)


MAX_INDEXES = 16
_RESERVED_INDEX_NAMES = ("primary", "second")  # the package index, and the name ``index = {...}`` has


def _index(
    data: Mapping[str, Any] | None,
    where: str,
    p: Problems,
    reqs: list[Requirement],
    *,
    keys: tuple[str, ...] = ("url", "packages"),
    name: str = "second",
) -> SecondIndex | None:
    """One explicit extra index: ``index = { url, packages }``, or an entry of ``indexes`` (with a name)."""
    if data is None:
        return None
    t = Table(data, where, p, keys)
    if "name" in keys:
        got = t.string("name", "a lower-case name of letters, digits, '.', '_' or '-'", check=plain_name)
        if got in _RESERVED_INDEX_NAMES:
            p.add(f"{where}.name", f"expected a name other than {got!r}, which lockbuild uses for another index")
            got = None
        if got is None:
            return None
        name = got
    what = "the second index" if name == "second" else f"index {name!r}"
    url = t.string("url", "an http(s) URL of a simple index", check=https_url)
    packages = t.strings("packages", "a list of package names")
    if packages is not None and not packages:
        p.add(f"{where}.packages", f"expected at least one package; {what} serves only the packages it names")
    if packages is not None:
        bad = [n for n in packages if not project_name(n)]
        if bad:
            p.add(f"{where}.packages", f"expected package names, found {bad[0][:SHOWN]!r}")
            packages = None
    if url is None or packages is None:
        return None
    canonical = [canonicalize_name(n) for n in packages]
    twice = sorted({n for n in canonical if canonical.count(n) > 1})
    if twice:
        p.add(f"{where}.packages", f"expected each package once, found {twice[0]!r} named twice")
    for pkg in packages:
        named = [r for r in reqs if canonicalize_name(r.name) == canonicalize_name(pkg)]
        if not named:
            p.add(
                f"{where}.packages",
                f"{pkg!r} comes from {what} but is not in requirements; add it pinned, e.g. '{pkg}==X.Y.Z'",
            )
        elif all(pinned_version(r) is None for r in named):
            p.add(
                f"{where}.packages",
                f"{pkg!r} comes from {what}, which publishes no upload times, so the cut-off cannot "
                f"hold it back: it must be pinned with == in requirements, found {str(named[0])!r}",
            )
    return SecondIndex(url.rstrip("/"), tuple(dict.fromkeys(canonical)), name)


def _indexes(
    t: Table, where: str, p: Problems, reqs: list[Requirement], single: SecondIndex | None
) -> tuple[SecondIndex, ...]:
    """``indexes = [{ name, url, packages }, ...]``: more explicit extra indexes. A name is given once, and
    a package comes from one index only: named on two (or on ``index`` and ``indexes``), it is refused,
    never resolved "best version wins" across them."""
    data = t.get("indexes", list, "a list of tables { name, url, packages }", required=False)
    if data is None:
        return ()
    if not data:
        p.add(f"{where}.indexes", "expected at least one { name, url, packages } table, found an empty list")
    if len(data) > MAX_INDEXES:
        p.add(f"{where}.indexes", f"expected at most {MAX_INDEXES} indexes, found {len(data)}")
        return ()
    out: list[SecondIndex] = []
    for j, entry in enumerate(data):
        if not isinstance(entry, dict):
            p.add(f"{where}.indexes[{j}]", f"expected a table {{ name, url, packages }}, found {describe(entry)}")
            continue
        got = _index(entry, f"{where}.indexes[{j}]", p, reqs, keys=("name", "url", "packages"))
        if got is not None:
            out.append(got)
    names: dict[str, int] = {}
    for j, ix in enumerate(out):
        if ix.name in names:
            p.add(f"{where}.indexes", f"expected each index name once, found {ix.name!r} twice")
        names[ix.name] = j
    served: dict[str, str] = {}
    for ix in ((single,) if single is not None else ()) + tuple(out):
        label = "the index key" if ix.name == "second" else f"indexes entry {ix.name!r}"
        for pkg in ix.packages:
            if pkg in served and served[pkg] != label:
                p.add(
                    f"{where}.indexes",
                    f"{pkg!r} is named on two indexes, {served[pkg]} and {label}; expected each package on one "
                    "index only: a name on two indexes would come from whichever offers the better version "
                    "(how torchtriton was taken in 2022)",
                )
            served.setdefault(pkg, label)
    return tuple(out)


def _source(data: Mapping[str, Any] | None, where: str, p: Problems) -> Source | None:
    if data is None:
        return None
    t = Table(data, where, p, ("url", "sha256", "top", "dir", "requirements"))
    url = t.string("url", "an http(s) URL of a source archive", check=https_url)
    sha = t.string("sha256", "64 lower-case hex digits", check=lambda v: bool(SHA256.fullmatch(v)))
    top = t.string("top", "the archive's top directory (a relative path)", check=relative_path)
    dest = t.string("dir", "a relative path inside the environment", check=relative_path)
    reqs = t.string("requirements", "a relative path inside the archive", required=False, check=relative_path)
    if None in (url, sha, top, dest):
        return None
    assert url is not None and sha is not None and top is not None and dest is not None
    return Source(url, sha, top, dest, reqs)


def _url_wheel(data: Mapping[str, Any], where: str, p: Problems) -> UrlWheel | None:
    t = Table(data, where, p, ("url", "sha256"))
    url = t.string("url", "an http(s) URL of a wheel file", check=https_url)
    sha = t.string("sha256", "the wheel's sha256, 64 lower-case hex digits", check=lambda v: bool(SHA256.fullmatch(v)))
    if url is not None and wheel_filename(url) is None:
        p.add(
            f"{where}.url", f"expected a URL ending in a wheel file name (NAME-VERSION-TAGS.whl), found {url[:SHOWN]!r}"
        )
        url = None
    if url is None or sha is None:
        return None
    return UrlWheel(url, sha)


def _wheel(data: Mapping[str, Any] | None, where: str, p: Problems) -> ReleaseWheel | UrlWheel | None:
    if data is None:
        return None
    if "url" in data:
        return _url_wheel(data, where, p)
    t = Table(data, where, p, ("repo", "tag", "prefix", "suffix", "project"))
    repo = t.string("repo", "OWNER/NAME of a GitHub repository", check=github_repo)
    tag = t.string("tag", TAG_EXPECTED, check=git_tag)
    prefix = t.string("prefix", "the start of the wheel's file name", check=file_part)
    suffix = t.string(
        "suffix",
        "the end of the wheel's file name, ending in .whl",
        check=lambda v: file_part(v) and v.endswith(".whl"),
    )
    project = t.string("project", "the wheel's project name", check=project_name)
    if None in (repo, tag, prefix, suffix, project):
        return None
    assert repo is not None and tag is not None and prefix is not None and suffix is not None and project is not None
    return ReleaseWheel(repo, tag, prefix, suffix, canonicalize_name(project))


def _interpreter(data: Mapping[str, Any] | None, where: str, p: Problems, python: str | None) -> Interpreter | None:
    """``interpreter = { tag, file }`` (``repo`` defaults to python-build-standalone's): an archive of
    ``python/`` for the build's Python; a file name that names another X.Y is refused here already."""
    if data is None:
        return None
    t = Table(data, where, p, ("repo", "tag", "file"))
    repo = t.string("repo", "OWNER/NAME of a GitHub repository", check=github_repo, required=False)
    tag = t.string("tag", TAG_EXPECTED, check=git_tag)
    file = t.string(
        "file",
        "a release file name ending in " + ", ".join(interpreter.SUFFIXES),
        check=lambda v: plain_name_or_file(v) and v.endswith(interpreter.SUFFIXES),
    )
    named = interpreter.version_from_filename(file) if file is not None else None
    if named is not None and python is not None and named != python:
        p.add(f"{where}.file", f"expected an interpreter for the build's Python {python}, found one for {named}")
        return None
    if tag is None or file is None:
        return None
    return Interpreter(repo or interpreter.DEFAULT_REPO, tag, file)


def _assets(data: Mapping[str, Any] | None, where: str, p: Problems) -> Assets | None:
    if data is None:
        return None
    t = Table(data, where, p, ("tag", "dir", "files"))
    tag = t.string("tag", TAG_EXPECTED, check=git_tag)
    dest = t.string("dir", "a relative path inside the environment", check=relative_path)
    files = t.strings("files", "a list of release file names")
    if files is not None:
        for f in files:
            if not plain_name_or_file(f):
                p.add(f"{where}.files", f"expected plain file names, found {f[:SHOWN]!r}")
                files = None
                break
    if None in (tag, dest, files):
        return None
    assert tag is not None and dest is not None and files is not None
    return Assets(tag, dest, files)


def parse_recipe(text: str, path: str = "<recipe>") -> Recipe:
    """Parse and validate a recipe; raise RecipeError listing every problem found."""
    if len(text.encode()) > MAX_RECIPE_BYTES:
        raise RecipeError(f"{path}: expected a recipe of at most {MAX_RECIPE_BYTES} bytes, found {len(text.encode())}")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RecipeError(f"{path}: not valid TOML: {exc}", tip="Check the line and column named.") from None
    except RecursionError:
        raise RecipeError(f"{path}: not valid TOML: nested too deeply") from None
    p = Problems(path)
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
    assert engine is not None
    return Recipe(path, engine, tuple(builds), text)


def load_recipe(path: Path) -> Recipe:
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_RECIPE_BYTES + 1)
    except OSError as exc:
        raise RecipeError(f"cannot read recipe {path}: {exc.strerror}", tip="Check the path.") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise RecipeError(f"{path}: expected UTF-8 text, found undecodable bytes") from None
    return parse_recipe(text, str(path))
