"""The files a recipe names directly, beside what the index resolves: the engine's source archive, its
wheel (each kind of wheel plans itself), release assets and the standalone interpreter.

Each is taken only with a digest the recipe or the release states, and the ones read now (the source
archive's requirements, a URL wheel, the interpreter) are read from the descriptor that was hashed.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import assert_never

from packaging.utils import canonicalize_name, parse_wheel_filename

from lockbuild import __version__
from lockbuild.builder.extras import ExtraFile
from lockbuild.builder.pyarchive import check_interpreter_archive
from lockbuild.builder.selfwheel import NAME as SELF_NAME
from lockbuild.builder.selfwheel import make_self_wheel
from lockbuild.builder.sources import read_source_requirements
from lockbuild.errors import IntegrityError, RecipeError, ResolveError
from lockbuild.fetch import github
from lockbuild.fetch.cache import Cache
from lockbuild.fetch.fetcher import Fetcher, Wanted, open_verified
from lockbuild.lock import Candidate
from lockbuild.progress import Progress
from lockbuild.recipe import Build, Recipe, ReleaseWheel, SelfWheel, UrlWheel
from lockbuild.recipe.checks import wheel_filename


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
