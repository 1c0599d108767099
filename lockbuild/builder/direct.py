"""The files a recipe names directly, beside what the index resolves: the engine's source archive, its
wheel (each kind of wheel plans itself), release assets and the standalone interpreter.

Each is taken only with a digest the recipe or the release states, and the ones read now (the source
archive's requirements, a URL wheel, the interpreter) are read from the descriptor that was hashed.
"""

from __future__ import annotations

import datetime as dt
import lzma
import re
import tarfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO, assert_never

from packaging.utils import canonicalize_name, parse_wheel_filename

from lockbuild import __version__
from lockbuild import interpreter as standalone
from lockbuild.builder.extras import ExtraFile
from lockbuild.builder.selfwheel import NAME as SELF_NAME
from lockbuild.builder.selfwheel import make_self_wheel
from lockbuild.errors import IntegrityError, RecipeError, ResolveError
from lockbuild.fetch import github
from lockbuild.fetch.cache import Cache
from lockbuild.fetch.fetcher import Fetcher, Wanted, open_verified
from lockbuild.limits import MiB
from lockbuild.lock import Candidate
from lockbuild.progress import Progress
from lockbuild.recipe import Build, Recipe, ReleaseWheel, SelfWheel, UrlWheel
from lockbuild.recipe.checks import requirement, wheel_filename
from lockbuild.recipe.fields import SHOWN, listing


@dataclass(frozen=True)
class Reach:
    """What planning a recipe's own files needs: the verified fetcher, the cache (for lockbuild's own
    wheel), progress lines and a release's assets (by file name)."""

    fetcher: Fetcher
    cache: Cache
    progress: Progress
    release_assets: Callable[[str, str], dict[str, github.ReleaseAsset]]


@dataclass(frozen=True)
class DirectWheel:
    """The engine's wheel as the resolution takes it: the first requirement line, and the one file the
    lock may take for its project."""

    project: str
    requirement: str
    candidate: Candidate
    recorded_sha256: str | None = None  # the sha256 the resolved recipe records (lockbuild's own wheel only)


def source_archive(reach: Reach, recipe: Recipe, build: Build) -> tuple[tuple[str, ...], ExtraFile | None]:
    """The source archive's requirements (read under the lock rules) and the archive as a bundled file;
    ``((), None)`` for a build without one."""
    src = build.source
    if src is None:
        return (), None
    w = Wanted(src.url, src.sha256, None, f"{recipe.engine.name} {build.version} source archive")
    with open_verified(reach.fetcher, w) as archive:  # read from the descriptor that was hashed
        requirements = read_source_requirements(archive, build)
    return requirements, ExtraFile(f"source/{PurePosixPath(src.url).name}", "source", src.url, src.sha256, None)


def engine_wheel(reach: Reach, recipe: Recipe, build: Build, as_of: dt.datetime) -> DirectWheel | None:
    """The build's ``wheel`` table, planned by its kind; None for a build without one."""
    wheel = build.wheel
    if wheel is None:
        return None
    if isinstance(wheel, UrlWheel):
        return _url_wheel(reach, build, wheel)
    if isinstance(wheel, SelfWheel):
        return _self_wheel(reach, recipe, build, wheel, as_of)
    if isinstance(wheel, ReleaseWheel):
        return _release_wheel(reach, wheel)
    assert_never(wheel)


def _url_wheel(reach: Reach, build: Build, wheel: UrlWheel) -> DirectWheel:
    """A wheel at a URL: fetched now, like a source archive, and refused unless it has the recipe's sha256."""
    filename = wheel_filename(wheel.url)
    if filename is None:  # the recipe checked it
        raise RecipeError(f"{build.id}: expected the wheel URL to end in a wheel's file name, found {wheel.url}")
    with open_verified(reach.fetcher, Wanted(wheel.url, wheel.sha256, None, f"the wheel at {wheel.url}")):
        pass
    project = canonicalize_name(parse_wheel_filename(filename)[0])
    return DirectWheel(
        project, f"{project} @ {wheel.url}#sha256={wheel.sha256}", Candidate(filename, wheel.url, wheel.sha256, None)
    )


def _release_wheel(reach: Reach, wheel: ReleaseWheel) -> DirectWheel:
    """A GitHub release's wheel, taken with the digest the release publishes for it."""
    assets = reach.release_assets(wheel.repo, wheel.tag)
    asset = github.pick_wheel(assets, wheel.prefix, wheel.suffix, repo=wheel.repo, tag=wheel.tag)
    sha = asset.sha256()
    return DirectWheel(
        wheel.project, f"{wheel.project} @ {asset.url}#sha256={sha}", Candidate(asset.name, asset.url, sha, asset.size)
    )


def _self_wheel(reach: Reach, recipe: Recipe, build: Build, wheel: SelfWheel, as_of: dt.datetime) -> DirectWheel:
    """lockbuild's own wheel (``wheel = { self = true }``), made now and kept in the cache by its
    sha256, where the fetch finds it like any other file."""
    if recipe.engine.name != SELF_NAME or build.version != __version__:
        raise RecipeError(
            f"{recipe.path}: {build.id} takes lockbuild's own wheel (wheel = {{ self = true }}), so it must be "
            f"the engine {SELF_NAME!r} at the running lockbuild's version, {__version__}; found the engine "
            f"{recipe.engine.name!r} at {build.version}.",
            tip="Build a self-bundle with the lockbuild of that version (from its checkout), or set the "
            "build's version to the running one.",
        )
    made = make_self_wheel(as_of)
    if wheel.sha256 is not None and made.sha256 != wheel.sha256:
        raise IntegrityError(
            f"{recipe.path}: {build.id} pins lockbuild's own wheel to sha256 {wheel.sha256}, but this lockbuild "
            f"makes {made.sha256}; expected the same files as the bundle that recorded the pin.",
            tip="Build from the checkout (the same commit) that made that bundle, or drop wheel.sha256.",
        )
    reach.progress.phase(
        f"made lockbuild's own wheel {made.filename} from {made.made_from} (sha256 {made.sha256[:16]}…)"
    )
    sha, named = reach.cache.put(made.data, made.filename)
    return DirectWheel(
        SELF_NAME,
        f"{SELF_NAME} @ {named.as_uri()}#sha256={sha}",
        Candidate(made.filename, "", sha, len(made.data)),  # made here: no origin to record
        recorded_sha256=sha,
    )


def release_assets(reach: Reach, recipe: Recipe, build: Build) -> list[ExtraFile]:
    """The build's ``assets``: each named file of the engine's release, with the digest it publishes."""
    a = build.assets
    if a is None:
        return []
    repo = recipe.engine.repo
    if repo is None:
        raise RecipeError(f"{recipe.path}: builds with assets need engine.repo (the GitHub repository).")
    published = reach.release_assets(repo, a.tag)
    out = []
    for name in a.files:
        if name not in published:
            listed = ", ".join(sorted(published)) or "none"
            raise ResolveError(f"{repo} {a.tag} has no asset {name!r}; it has {listed}.")
        got = published[name]
        out.append(ExtraFile(f"assets/{name}", "asset", got.url, got.sha256(), got.size))
    return out


def interpreter(reach: Reach, build: Build) -> ExtraFile | None:
    """The standalone interpreter: a release asset taken only with its published digest, fetched now and
    refused unless it is the build's Python X.Y; None for a build without one."""
    it = build.interpreter
    if it is None:
        return None
    published = reach.release_assets(it.repo, it.tag)
    got = published.get(it.file)
    if got is None:
        raise ResolveError(
            f"{it.repo} {it.tag} has no asset {it.file!r} (the build's interpreter); it has {len(published)} other(s).",
            tip="Copy the exact file name from the release page (an install_only archive).",
        )
    with open_verified(reach.fetcher, got.wanted()) as f:  # read from the descriptor that was hashed
        check_interpreter_archive(f, it.file, build.python)
    return ExtraFile(f"python/{it.file}", "interpreter", got.url, got.sha256(), got.size)


MAX_REQUIREMENTS_FILE = MiB
_COMMENT = re.compile(r"(^|\s)#.*$")


def source_requirements(text: str, *, skip: tuple[str, ...], where: str) -> tuple[str, ...]:
    """The requirement lines of an engine's source requirements file.

    Options (``-r``, ``-e``, ``--index-url``...), URLs and ``name @ url`` are refused: they would fetch
    from elsewhere or install what the lock never saw. Lines naming an extra index's packages are skipped
    (the build names those itself).
    """
    out: list[str] = []
    problems: list[str] = []
    skipped = {canonicalize_name(s) for s in skip}
    for n, raw in enumerate(text.splitlines(), start=1):
        line = _COMMENT.sub("", raw).strip()
        if not line:
            continue
        shown = line[:SHOWN]
        if line.startswith("-"):
            problems.append(f"line {n}: options such as {line.split()[0][:SHOWN]!r} are not allowed: {shown!r}")
            continue
        if line.startswith((".", "/", "~")):
            problems.append(f"line {n}: paths are not allowed in requirements: {shown!r}")
            continue
        got = requirement(line)
        if isinstance(got, str):
            problems.append(f"line {n}: {got}: {shown!r}")
            continue
        if canonicalize_name(got.name) in skipped:
            continue
        out.append(line)
    if problems:
        shown = listing(problems)
        raise RecipeError(
            f"{where}: the engine's requirements file has lines lockbuild refuses:\n{shown}",
            problems=tuple(problems),
            tip="Only plain requirement lines can enter a lock; name anything else in the recipe.",
        )
    return tuple(out)


def read_source_requirements(archive: Path | BinaryIO, build: Build) -> tuple[str, ...]:
    """Check the source archive's top directory and read its requirements file under the lock rules.

    ``archive`` is best an open file, the one its digest was checked on (``fetch.open_verified``)."""
    src = build.source
    if src is None:
        raise RecipeError(f"{build.id}: expected a [builds.source] table to read requirements from, found none")
    where = f"{src.url} ({build.id})"
    wanted = f"{src.top}/{src.requirements}" if src.requirements else None
    saw_top = False
    text: str | None = None
    try:
        where_from = {"name": archive} if isinstance(archive, Path) else {"fileobj": archive}
        with tarfile.open(mode="r:*", **where_from) as tf:
            for member in tf:
                name = str(PurePosixPath(member.name))
                if name == src.top or name.startswith(src.top + "/"):
                    saw_top = True
                if wanted is not None and name == wanted:
                    if not member.isfile() or member.size > MAX_REQUIREMENTS_FILE:
                        raise RecipeError(f"{where}: {wanted} is not a regular file of at most 1 MiB.")
                    f = tf.extractfile(member)
                    if f is None:
                        raise RecipeError(f"{where}: {wanted} cannot be read from the archive.")
                    text = f.read().decode("utf-8", errors="strict")
    except (tarfile.TarError, OSError, UnicodeDecodeError) as exc:
        raise RecipeError(f"{where}: cannot read the source archive as a tar: {exc}") from None
    if not saw_top:
        raise RecipeError(
            f"{where}: expected a top directory {src.top!r} in the source archive, found none.",
            tip="Set source.top to the archive's top directory.",
        )
    if wanted is None:
        return ()
    if text is None:
        raise RecipeError(f"{where}: the source archive has no {wanted}.", tip="Check source.requirements.")
    skip = tuple(name for ix in build.extra_indexes for name in ix.packages)  # each extra index's own
    return source_requirements(text, skip=skip, where=where)


MAX_ENTRIES = 200_000


def check_interpreter_archive(f: BinaryIO, name: str, want: str) -> None:
    """``f`` (already checked against its published digest) holds ``python/bin/python<want>``, and no
    interpreter of another X.Y; the file name, when it names a version, must agree."""
    named = standalone.version_from_filename(name)
    found: set[str] = set()
    try:
        with tarfile.open(fileobj=f, mode="r:*") as tf:
            for i, ti in enumerate(tf):
                if i >= MAX_ENTRIES:
                    raise RecipeError(f"the interpreter archive {name} has more than {MAX_ENTRIES} entries; refused.")
                if ti.isreg():
                    found |= standalone.versions_in([ti.name])
    except (tarfile.TarError, OSError, EOFError, zlib.error, lzma.LZMAError) as exc:
        raise RecipeError(
            f"the interpreter archive {name} is not a readable tar archive: {exc}.",
            tip="Name a python-build-standalone install_only archive (python/bin/python3.X inside).",
        ) from None
    if found != {want} or (named is not None and named != want):
        shown = ", ".join(sorted(found)) or "no python/bin/python3.X at all"
        raise RecipeError(
            f"the interpreter {name} is not Python {want}, the build's python: expected python/bin/python{want} "
            f"inside, found {shown}" + (f" (its name says {named})" if named and named != want else "") + ".",
            tip=f"Name the {want} archive of the release (cpython-{want}.*-install_only.tar.gz), or change python.",
        )
