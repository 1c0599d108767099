"""Recipes: one TOML file per engine, parsed and validated once into frozen dataclasses.

Every problem in a recipe is collected and reported together, each naming the file, the key,
what was expected and what was found. Unknown keys get a "did you mean".
"""

from __future__ import annotations

import datetime as dt
import difflib
import hashlib
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar

import tomlkit
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from lockbuild.errors import RecipeError
from lockbuild.target import Target, parse_platform
from lockbuild.times import parse_time

MAX_RECIPE_BYTES = 1 << 20
MAX_STRING = 4096
MAX_LIST = 1000

_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
_PROJECT = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,126}[A-Za-z0-9])?$")
_ARCHIVE_SUFFIXES = (".whl", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".zip", ".tar")
_SHOWN = 80
_COMMENT = re.compile(r"(^|\s)#.*$")
_VERSION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9._-]+$")
_PYTHON = re.compile(r"^3\.\d{1,2}$")
_CAPABILITY = re.compile(r"^(\d{1,2})\.(\d)$")
_DRIVER = re.compile(r"^\d{1,4}(\.\d{1,4}){0,2}$")


@dataclass(frozen=True)
class Engine:
    name: str
    pypi: str
    repo: str | None
    binary: str
    verify: tuple[str, ...]
    gpu_probe: str


@dataclass(frozen=True)
class GpuRequirement:
    min_capability: tuple[int, int] | None
    min_driver: str | None


@dataclass(frozen=True)
class SecondIndex:
    url: str
    packages: tuple[str, ...]


@dataclass(frozen=True)
class Source:
    url: str
    sha256: str
    top: str
    dir: str
    requirements: str | None


@dataclass(frozen=True)
class ReleaseWheel:
    repo: str
    tag: str
    prefix: str
    suffix: str
    project: str


@dataclass(frozen=True)
class Assets:
    tag: str
    dir: str
    files: tuple[str, ...]


@dataclass(frozen=True)
class Build:
    version: str
    variant: str
    target: Target
    requirements: tuple[str, ...]
    as_of: dt.datetime | None
    free_gb: int | None
    gpu: GpuRequirement | None
    index: SecondIndex | None
    source: Source | None
    wheel: ReleaseWheel | None
    assets: Assets | None
    position: int

    @property
    def id(self) -> str:
        return f"{self.version}-{self.variant}"

    @property
    def python(self) -> str:
        return self.target.python

    @property
    def platform(self) -> str:
        return self.target.platform


@dataclass(frozen=True)
class Recipe:
    path: str
    engine: Engine
    builds: tuple[Build, ...]
    text: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()

    def select(self, spec: str | None) -> tuple[Build, ...]:
        """The builds named by ``--build``: ``VARIANT`` or ``VERSION-VARIANT``; all when None."""
        if spec is None:
            return self.builds
        exact = [b for b in self.builds if b.id == spec]
        if exact:
            return tuple(exact)
        by_variant = [b for b in self.builds if b.variant == spec]
        if len(by_variant) == 1:
            return tuple(by_variant)
        choices = ", ".join(b.id for b in self.builds)
        if by_variant:
            raise RecipeError(
                f"{self.path}: --build {spec} matches several builds ({', '.join(b.id for b in by_variant)}).",
                tip="Name one as VERSION-VARIANT.",
            )
        raise RecipeError(
            f"{self.path}: no build {spec!r}; this recipe has {choices}.",
            tip="Pass --build VARIANT or --build VERSION-VARIANT, or leave it out to use every build.",
        )

    def resolved_text(self, build: Build, as_of: dt.datetime) -> str:
        """This recipe with only ``build`` in it and its ``as-of`` filled in (comments kept)."""
        doc = tomlkit.parse(self.text)
        builds = doc["builds"]
        keep = builds[build.position]
        keep["as-of"] = as_of.astimezone(dt.UTC)
        if isinstance(builds, tomlkit.items.AoT):
            new = tomlkit.aot()
            new.append(keep)
            doc["builds"] = new
        else:  # builds = [ { ... }, ... ], an inline array of tables
            for i in range(len(builds) - 1, -1, -1):
                if i != build.position:
                    del builds[i]
        return tomlkit.dumps(doc)


T = TypeVar("T")


class _Problems:
    """Collects every problem with a recipe, then raises once."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.items: list[str] = []

    def add(self, key: str, message: str) -> None:
        self.items.append(f"{key}: {message}")

    def raise_if_any(self) -> None:
        if self.items:
            n = len(self.items)
            listing = _listing(self.items)
            raise RecipeError(
                f"{self.path}: {n} problem{'s' if n > 1 else ''} in the recipe:\n{listing}",
                problems=tuple(self.items),
                tip="Fix each key listed; docs/release-engineers.md describes every recipe key.",
            )


def _listing(items: list[str], most: int = 50) -> str:
    lines = [f"  - {x}" for x in items[:most]]
    if len(items) > most:
        lines.append(f"  ... and {len(items) - most} more")
    return "\n".join(lines)


def _describe(value: object) -> str:
    kind = {
        str: "a string",
        int: "an integer",
        float: "a number",
        bool: "a boolean",
        list: "a list",
        dict: "a table",
    }.get(type(value), type(value).__name__)
    shown = repr(value)
    if len(shown) > 40:
        shown = shown[:37] + "..."
    return f"{kind} ({shown})" if not isinstance(value, dict | list) else kind


class _Table:
    """A TOML table being read: typed getters that record problems instead of raising."""

    def __init__(self, data: Mapping[str, Any], where: str, problems: _Problems, known: tuple[str, ...]) -> None:
        self.data = data
        self.where = where
        self.p = problems
        for key in data:
            if key not in known:
                close = difflib.get_close_matches(key.lower(), known, n=1) or [
                    k for k in known if sorted(k) == sorted(key.lower())
                ]
                hint = f"; did you mean {close[0]!r}?" if close else f"; known keys: {', '.join(known)}"
                self.p.add(self.key(key), f"unknown key{hint}")

    def key(self, name: str) -> str:
        shown = name if len(name) <= _SHOWN else name[: _SHOWN - 3] + "..."
        return f"{self.where}.{shown}" if self.where else shown

    def get(self, name: str, kind: type[T], expected: str, *, required: bool = True) -> T | None:
        if name not in self.data:
            if required:
                self.p.add(self.key(name), f"missing; expected {expected}")
            return None
        value = self.data[name]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            self.p.add(self.key(name), f"expected {expected}, found {_describe(value)}")
            return None
        if isinstance(value, str) and len(value) > MAX_STRING:
            self.p.add(self.key(name), f"expected at most {MAX_STRING} characters, found {len(value)}")
            return None
        return value

    def string(
        self,
        name: str,
        expected: str = "a string",
        *,
        required: bool = True,
        check: Callable[[str], bool] | None = None,
    ) -> str | None:
        value = self.get(name, str, expected, required=required)
        if value is not None and check is not None and not check(value):
            self.p.add(self.key(name), f"expected {expected}, found {value[:80]!r}")
            return None
        return value

    def strings(self, name: str, expected: str, *, required: bool = True) -> tuple[str, ...] | None:
        value = self.get(name, list, expected, required=required)
        if value is None:
            return None
        if len(value) > MAX_LIST:
            self.p.add(self.key(name), f"expected at most {MAX_LIST} items, found {len(value)}")
            return None
        bad = [i for i, v in enumerate(value) if not isinstance(v, str) or len(v) > MAX_STRING]
        if bad:
            self.p.add(self.key(name), f"expected {expected}, but item {bad[0]} is {_describe(value[bad[0]])}")
            return None
        return tuple(value)

    def table(self, name: str) -> Mapping[str, Any] | None:
        return self.get(name, dict, "a table", required=False)


def _relative_path(value: str) -> bool:
    if not value or "\\" in value or "\0" in value:
        return False
    p = PurePosixPath(value)
    return not p.is_absolute() and ".." not in p.parts and all(part not in ("", ".") for part in value.split("/"))


def _plain_name(value: str) -> bool:
    return bool(_NAME.match(value))


def _https_url(value: str) -> bool:
    return value.startswith(("https://", "http://")) and not any(c.isspace() or ord(c) < 32 for c in value)


def _project(value: str) -> bool:
    return bool(_PROJECT.match(value))


def _requirement(value: str) -> Requirement | str:
    """A plain requirement (name, extras, specifier, marker), or why the text is not one."""
    if any(ord(c) < 32 and c != "\t" for c in value):
        return "expected one requirement on one line, found a control character or line break"
    try:
        req = Requirement(value)
    except InvalidRequirement as exc:
        first = str(exc).splitlines()[0] if str(exc) else "cannot parse"
        return f"not a valid requirement ({first})"
    if req.url:
        return "a direct URL (name @ url) would install what the lock never saw; use the `wheel` key"
    if req.name.lower().endswith(_ARCHIVE_SUFFIXES):
        return "uv reads a name ending in an archive suffix as a local file path; name the project instead"
    return req


def _pinned_version(req: Requirement) -> str | None:
    specs = list(req.specifier)
    if len(specs) == 1 and specs[0].operator == "==" and "*" not in specs[0].version:
        return specs[0].version
    return None


def _parse_as_of(value: object, key: str, p: _Problems) -> dt.datetime | None:
    if isinstance(value, dt.datetime):
        parsed = value
    elif isinstance(value, str):
        got = parse_time(value)
        if got is None:
            p.add(key, f"expected an RFC 3339 time such as 2025-10-05T01:40:00Z, found {value[:40]!r}")
            return None
        parsed = got
    elif isinstance(value, dt.date):
        p.add(key, f"expected a date and a time with a zone such as 2025-10-05T01:40:00Z, found only a date ({value})")
        return None
    else:
        p.add(key, f"expected an RFC 3339 time such as 2025-10-05T01:40:00Z, found {_describe(value)}")
        return None
    if isinstance(value, str) and "T" not in value.upper() and " " not in value:
        p.add(key, f"expected a date and a time with a zone such as 2025-10-05T01:40:00Z, found only a date ({value})")
        return None
    if parsed.tzinfo is None:
        p.add(key, "expected a time with a zone (add Z for UTC), found a local time")
        return None
    return parsed.astimezone(dt.UTC)


_ENGINE_KEYS = ("name", "pypi", "repo", "binary", "verify", "gpu-probe")
_BUILD_KEYS = (
    "version", "variant", "python", "platform", "requirements", "as-of", "free-gb",
    "gpu", "index", "source", "wheel", "assets",
)  # fmt: skip


def _engine(data: Mapping[str, Any], p: _Problems) -> Engine | None:
    t = _Table(data, "engine", p, _ENGINE_KEYS)
    name = t.string("name", "a lower-case name of letters, digits, '.', '_' or '-'", check=_plain_name)
    pypi = t.string("pypi", "a PyPI project name", check=_project)
    repo = t.string("repo", "OWNER/NAME of a GitHub repository", required=False, check=lambda v: bool(_REPO.match(v)))
    binary = t.string("binary", "a file name in the environment's bin/", check=_plain_name_or_file)
    verify = t.strings("verify", 'a command as a list of strings, e.g. ["vllm", "--version"]')
    if verify is not None and not verify:
        p.add("engine.verify", "expected a command of at least one word, found an empty list")
    probe = t.string("gpu-probe", '"torch", "none", or a relative path to a .py file', required=False)
    if probe is not None and probe not in ("torch", "none") and not (_relative_path(probe) and probe.endswith(".py")):
        p.add("engine.gpu-probe", f'expected "torch", "none", or a relative path to a .py file, found {probe!r}')
        probe = None
    if None in (name, pypi, binary, verify):
        return None
    assert name is not None and pypi is not None and binary is not None and verify is not None
    return Engine(name, pypi, repo, binary, verify, probe or "none")


def _plain_name_or_file(value: str) -> bool:
    return bool(re.match(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$", value))


def _build(data: Mapping[str, Any], i: int, p: _Problems) -> Build | None:
    where = f"builds[{i}]"
    t = _Table(data, where, p, _BUILD_KEYS)
    version = t.string("version", "a version such as 0.11.0", check=lambda v: bool(_VERSION.match(v)))
    variant = t.string("variant", "a variant name such as cu128", check=_plain_name)
    python = t.string("python", 'a Python version "3.X"', check=lambda v: bool(_PYTHON.match(v)))
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
            got = _requirement(r)
            if isinstance(got, str):
                p.add(f"{where}.requirements[{j}]", f"{got}: {r[:80]!r}")
            else:
                parsed.append(got)
    as_of = _parse_as_of(data["as-of"], f"{where}.as-of", p) if "as-of" in data else None
    free_gb = t.get("free-gb", int, "a whole number of gigabytes", required=False)
    if free_gb is not None and not 0 < free_gb < 100_000:
        p.add(f"{where}.free-gb", f"expected between 1 and 99999, found {free_gb}")
    gpu = _gpu(t.table("gpu"), f"{where}.gpu", p)
    index = _index(t.table("index"), f"{where}.index", p, parsed)
    source = _source(t.table("source"), f"{where}.source", p)
    wheel = _wheel(t.table("wheel"), f"{where}.wheel", p)
    assets = _assets(t.table("assets"), f"{where}.assets", p)
    if None in (version, variant, target, reqs):
        return None
    assert version is not None and variant is not None and target is not None and reqs is not None
    return Build(version, variant, target, reqs, as_of, free_gb, gpu, index, source, wheel, assets, i)


def _gpu(data: Mapping[str, Any] | None, where: str, p: _Problems) -> GpuRequirement | None:
    if data is None:
        return None
    t = _Table(data, where, p, ("min-capability", "min-driver"))
    cap = t.string("min-capability", 'a compute capability such as "8.0"', required=False)
    capability = None
    if cap is not None:
        m = _CAPABILITY.match(cap)
        if m is None:
            p.add(f"{where}.min-capability", f'expected a compute capability such as "8.0", found {cap!r}')
        else:
            capability = (int(m[1]), int(m[2]))
    driver = t.string(
        "min-driver",
        'a driver version such as "580" or "570.86"',
        required=False,
        check=lambda v: bool(_DRIVER.match(v)),
    )
    return GpuRequirement(capability, driver)


def _index(data: Mapping[str, Any] | None, where: str, p: _Problems, reqs: list[Requirement]) -> SecondIndex | None:
    if data is None:
        return None
    t = _Table(data, where, p, ("url", "packages"))
    url = t.string("url", "an http(s) URL of a simple index", check=_https_url)
    packages = t.strings("packages", "a list of package names")
    if packages is not None and not packages:
        p.add(f"{where}.packages", "expected at least one package; a second index serves only the packages it names")
    if packages is not None:
        bad = [n for n in packages if not _project(n)]
        if bad:
            p.add(f"{where}.packages", f"expected package names, found {bad[0][:_SHOWN]!r}")
            packages = None
    if url is None or packages is None:
        return None
    for name in packages:
        named = [r for r in reqs if canonicalize_name(r.name) == canonicalize_name(name)]
        if not named:
            p.add(
                f"{where}.packages",
                f"{name!r} comes from the second index but is not in requirements; add it pinned, e.g. '{name}==X.Y.Z'",
            )
        elif all(_pinned_version(r) is None for r in named):
            p.add(
                f"{where}.packages",
                f"{name!r} comes from the second index, which publishes no upload times, so the cut-off cannot "
                f"hold it back: it must be pinned with == in requirements, found {str(named[0])!r}",
            )
    return SecondIndex(url.rstrip("/"), tuple(canonicalize_name(n) for n in packages))


def _source(data: Mapping[str, Any] | None, where: str, p: _Problems) -> Source | None:
    if data is None:
        return None
    t = _Table(data, where, p, ("url", "sha256", "top", "dir", "requirements"))
    url = t.string("url", "an http(s) URL of a source archive", check=_https_url)
    sha = t.string("sha256", "64 lower-case hex digits", check=lambda v: bool(_SHA256.match(v)))
    top = t.string("top", "the archive's top directory (a relative path)", check=_relative_path)
    dest = t.string("dir", "a relative path inside the environment", check=_relative_path)
    reqs = t.string("requirements", "a relative path inside the archive", required=False, check=_relative_path)
    if None in (url, sha, top, dest):
        return None
    assert url is not None and sha is not None and top is not None and dest is not None
    return Source(url, sha, top, dest, reqs)


def _wheel(data: Mapping[str, Any] | None, where: str, p: _Problems) -> ReleaseWheel | None:
    if data is None:
        return None
    t = _Table(data, where, p, ("repo", "tag", "prefix", "suffix", "project"))
    repo = t.string("repo", "OWNER/NAME of a GitHub repository", check=lambda v: bool(_REPO.match(v)))
    tag = t.string("tag", "a release tag")
    prefix = t.string("prefix", "the start of the wheel's file name")
    suffix = t.string("suffix", "the end of the wheel's file name, ending in .whl", check=lambda v: v.endswith(".whl"))
    project = t.string("project", "the wheel's project name", check=_project)
    if None in (repo, tag, prefix, suffix, project):
        return None
    assert repo is not None and tag is not None and prefix is not None and suffix is not None and project is not None
    return ReleaseWheel(repo, tag, prefix, suffix, canonicalize_name(project))


def _assets(data: Mapping[str, Any] | None, where: str, p: _Problems) -> Assets | None:
    if data is None:
        return None
    t = _Table(data, where, p, ("tag", "dir", "files"))
    tag = t.string("tag", "a release tag")
    dest = t.string("dir", "a relative path inside the environment", check=_relative_path)
    files = t.strings("files", "a list of release file names")
    if files is not None:
        for f in files:
            if not _plain_name_or_file(f):
                p.add(f"{where}.files", f"expected plain file names, found {f[:_SHOWN]!r}")
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
    p = _Problems(path)
    top = _Table(data, "", p, ("engine", "builds"))
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
                p.add(f"builds[{i}]", f"expected a table, found {_describe(b)}")
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


def source_requirements(text: str, *, skip: tuple[str, ...], where: str) -> tuple[str, ...]:
    """The requirement lines of an engine's source requirements file.

    Options (``-r``, ``-e``, ``--index-url``...), URLs and ``name @ url`` are refused: they would fetch
    from elsewhere or install what the lock never saw. Lines naming a second index's packages are skipped
    (the build names those itself).
    """
    out: list[str] = []
    problems: list[str] = []
    skipped = {canonicalize_name(s) for s in skip}
    for n, raw in enumerate(text.splitlines(), start=1):
        line = _COMMENT.sub("", raw).strip()
        if not line:
            continue
        shown = line[:_SHOWN]
        if line.startswith("-"):
            problems.append(f"line {n}: options such as {line.split()[0][:_SHOWN]!r} are not allowed: {shown!r}")
            continue
        if "://" in line or line.startswith((".", "/", "~")):
            problems.append(f"line {n}: URLs and paths are not allowed: {shown!r}")
            continue
        got = _requirement(line)
        if isinstance(got, str):
            problems.append(f"line {n}: {got}: {shown!r}")
            continue
        if canonicalize_name(got.name) in skipped:
            continue
        out.append(line)
    if problems:
        listing = _listing(problems)
        raise RecipeError(
            f"{where}: the engine's requirements file has lines lockbuild refuses:\n{listing}",
            problems=tuple(problems),
            tip="Only plain requirement lines can enter a lock; name anything else in the recipe.",
        )
    return tuple(out)
