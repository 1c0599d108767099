"""The recipe's tables that name files from outside the package index: extra indexes, the engine's
source archive, a wheel (GitHub release or URL), the interpreter, release assets. Each reader collects
its problems into the recipe's ``Problems`` and returns None when the table is unusable."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from lockbuild import interpreter
from lockbuild.bundle.paths import claim, collision_key, env_reserved, path_problem
from lockbuild.documents import Problems
from lockbuild.recipe.checks import (
    SHA256,
    TAG_EXPECTED,
    file_part,
    git_tag,
    github_repo,
    pinned_version,
    plain_name,
    plain_name_or_file,
    project_name,
    relative_path,
    url_problem,
    wheel_filename,
)
from lockbuild.recipe.fields import SHOWN, Table, describe
from lockbuild.recipe.model import (
    Assets,
    ExtraFileSpec,
    Interpreter,
    ReleaseWheel,
    SecondIndex,
    SelfWheel,
    SourceArchive,
    UrlWheel,
)

MAX_INDEXES = 16
_RESERVED_INDEX_NAMES = ("primary", "second")  # the package index, and the name ``index = {...}`` has


def _url(t: Table, name: str, expected: str) -> str | None:
    """A URL key: checked by ``url_problem`` (no credential in it, and none echoed in the message)."""
    value = t.get(name, str, expected)
    if value is None:
        return None
    why = url_problem(value, expected)
    if why is not None:
        t.p.add(t.key(name), why)
        return None
    return value


def parse_index(
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
    url = _url(t, "url", "an http(s) URL of a simple index")
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


def parse_indexes(
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
        got = parse_index(entry, f"{where}.indexes[{j}]", p, reqs, keys=("name", "url", "packages"))
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


def parse_source(data: Mapping[str, Any] | None, where: str, p: Problems) -> SourceArchive | None:
    if data is None:
        return None
    t = Table(data, where, p, ("url", "sha256", "top", "dir", "requirements"))
    url = _url(t, "url", "an http(s) URL of a source archive")
    sha = t.string("sha256", "64 lower-case hex digits", check=lambda v: bool(SHA256.fullmatch(v)))
    top = t.string("top", "the archive's top directory (a relative path)", check=relative_path)
    dest = t.string("dir", "a relative path inside the environment", check=relative_path)
    reqs = t.string("requirements", "a relative path inside the archive", required=False, check=relative_path)
    if url is None or sha is None or top is None or dest is None:
        return None
    return SourceArchive(url, sha, top, dest, reqs)


def _url_wheel(data: Mapping[str, Any], where: str, p: Problems) -> UrlWheel | None:
    t = Table(data, where, p, ("url", "sha256"))
    url = _url(t, "url", "an http(s) URL of a wheel file")
    sha = t.string("sha256", "the wheel's sha256, 64 lower-case hex digits", check=lambda v: bool(SHA256.fullmatch(v)))
    if url is not None and wheel_filename(url) is None:
        p.add(
            f"{where}.url", f"expected a URL ending in a wheel file name (NAME-VERSION-TAGS.whl), found {url[:SHOWN]!r}"
        )
        url = None
    if url is None or sha is None:
        return None
    return UrlWheel(url, sha)


def _self_wheel(data: Mapping[str, Any], where: str, p: Problems) -> SelfWheel | None:
    t = Table(data, where, p, ("self", "sha256"))
    sha = t.string(
        "sha256",
        "the wheel's sha256, 64 lower-case hex digits",
        required=False,
        check=lambda v: bool(SHA256.fullmatch(v)),
    )
    if t.get("self", bool, "true (lockbuild's own wheel, made by the running lockbuild)") is not True:
        if data.get("self") is False:
            p.add(f"{where}.self", "expected true, found false; leave the wheel table out instead")
        return None
    return SelfWheel(sha)


def parse_wheel(data: Mapping[str, Any] | None, where: str, p: Problems) -> ReleaseWheel | UrlWheel | SelfWheel | None:
    if data is None:
        return None
    if "url" in data:
        return _url_wheel(data, where, p)
    if "self" in data:
        return _self_wheel(data, where, p)
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
    if repo is None or tag is None or prefix is None or suffix is None or project is None:
        return None
    return ReleaseWheel(repo, tag, prefix, suffix, canonicalize_name(project))


def parse_interpreter(
    data: Mapping[str, Any] | None, where: str, p: Problems, python: str | None
) -> Interpreter | None:
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


def parse_assets(data: Mapping[str, Any] | None, where: str, p: Problems) -> Assets | None:
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
    if tag is None or dest is None or files is None:
        return None
    return Assets(tag, dest, files)


MAX_EXTRA_FILES = 64


def parse_extra_files(t: Table, where: str, p: Problems) -> tuple[ExtraFileSpec, ...]:
    """``extra-files = [{ url, sha256, dest }]``: files placed inside the environment at ``dest`` (a plain
    relative path, by the archive path rules, that shadows no file of the environment itself)."""
    items = t.get("extra-files", list, "a list of { url, sha256, dest } tables", required=False) or []
    if len(items) > MAX_EXTRA_FILES:
        p.add(f"{where}.extra-files", f"expected at most {MAX_EXTRA_FILES} files, found {len(items)}")
        return ()
    out: list[ExtraFileSpec] = []
    seen: dict[str, str] = {}
    for i, item in enumerate(items):
        at = f"{where}.extra-files[{i}]"
        if not isinstance(item, dict):
            p.add(at, f"expected a {{ url, sha256, dest }} table, found {describe(item)}")
            continue
        e = Table(item, at, p, ("url", "sha256", "dest"))
        url = _url(e, "url", "an http(s) URL of the file")
        sha = e.string(
            "sha256", "the file's sha256, 64 lower-case hex digits", check=lambda v: bool(SHA256.fullmatch(v))
        )
        dest = e.string("dest", "a relative path inside the environment, e.g. share/tiktoken/o200k_base.tiktoken")
        if dest is not None:
            why = path_problem(dest) or env_reserved(dest) or claim(seen, collision_key(dest), "file")
            if why is not None:
                p.add(
                    f"{at}.dest",
                    f"expected a plain relative path inside the environment, found {dest[:SHOWN]!r}: {why}",
                )
                dest = None
        if url is not None and sha is not None and dest is not None:
            out.append(ExtraFileSpec(url, sha, dest))
    return tuple(out)
