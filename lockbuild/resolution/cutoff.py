"""The cut-off and the pins: pure rules on index answers (which time a build is locked as of, which
release and file a pin may name on an index without upload times). No I/O."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, canonicalize_version

from lockbuild.errors import RemoteError, ResolveError
from lockbuild.fetch.index import Index, IndexFile, Publication
from lockbuild.lock import Candidate
from lockbuild.recipe import Build, Recipe
from lockbuild.recipe.checks import pinned_version
from lockbuild.times import iso, parse_time

CUT_OFF_DELAY = dt.timedelta(hours=24)


def cut_off(recipe: Recipe, build: Build, index: Index) -> dt.datetime:
    """``as-of`` when set, else the release's first upload plus 24 hours (a file added to the release
    later never moves it).

    Whole seconds (rounded down), in UTC: uv, the lock, the resolved recipe and the manifest all
    record the same instant, and nothing uploaded after the named time can slip in.
    """
    if build.as_of is not None:
        return build.as_of.astimezone(dt.UTC).replace(microsecond=0)
    pub = index.publication(recipe.engine.pypi, build.version)
    return release_cut_off(index, pub, recipe.engine.pypi, build.version)


def release_cut_off(index: Index, pub: Publication, project: str, version: str) -> dt.datetime:
    try:
        return (pub.first + CUT_OFF_DELAY).astimezone(dt.UTC).replace(microsecond=0)
    except OverflowError:
        raise RemoteError(
            f"{index.name} ({index.url}) says {project}=={version} was first uploaded at {iso(pub.first)}; "
            "expected a time at least a day before year 9999; refused.",
            tip="Set as-of on the build to give the cut-off explicitly.",
        ) from None


def late_files_warning(project: str, version: str, pub: Publication, as_of: dt.datetime) -> str | None:
    """A warning when the release's own files span more than a day: the later ones are not locked."""
    if pub.last - pub.first <= CUT_OFF_DELAY:
        return None
    late = sorted(f.filename for f in pub.files if f.upload_time is not None and f.upload_time >= as_of)
    shown = ", ".join(late[:5]) + (f" and {len(late) - 5} more" if len(late) > 5 else "")
    return (
        f"{project}=={version}'s files were uploaded over more than a day ({iso(pub.first)} to {iso(pub.last)}); "
        f"the cut-off is the first upload + 24 h ({iso(as_of)}), so only files that existed then are locked"
        + (f"; treated as absent: {shown}" if late else "")
    )


def index_candidates(files: Sequence[IndexFile]) -> list[Candidate]:
    return [Candidate(f.filename, f.url, f.sha256, f.size, f.upload_time, f.yanked, f.yank_reason) for f in files]


def package_cut_off(build: Build, project: str, as_of: dt.datetime) -> dt.datetime | None:
    """The cut-off for one package: the build's, or the recipe's exclude-newer-package time (None: none)."""
    exempt = dict(build.exclude_newer_package)
    if project not in exempt:
        return as_of
    when = exempt[project]
    return parse_time(when) if when is not None else None


def recipe_pin(build: Build, project: str) -> str | None:
    """The version the recipe's requirements pin ``project`` to with ``==``, if they do."""
    for r in map(Requirement, build.requirements):
        if canonicalize_name(r.name) == project:
            return pinned_version(r)
    return None


def check_exact_pin(build: Build, project: str, files: Sequence[IndexFile], index: Index) -> str:
    """The one version ``project`` may take from an index without upload times.

    The recipe's ``==`` must name a full version, local label included, that exactly one release on the
    index matches (``torch==2.8.0`` also matches ``2.8.0+cu129`` and any ``2.8.0+...`` added later), unless
    the recipe pins the file by sha256.
    """
    spec = recipe_pin(build, project)
    versions = sorted({v for v in (f.version for f in files) if v is not None})
    if build.pinned_sha256(project) is not None:
        return spec or ""
    if len(versions) > 1:
        raise ResolveError(
            f"{project}=={spec} matches {len(versions)} releases on {index.name} ({index.url}): "
            f"{', '.join(versions[:10])}; it publishes no upload times, so the pin must name exactly one.",
            tip=f"Name the full version, local label included (e.g. {project}=={versions[0]}), "
            f'or pin the file: pin-sha256 = {{ {project} = "..." }}.',
        )
    if versions and spec is not None and canonicalize_version(spec) != versions[0]:
        raise ResolveError(
            f"{project}=={spec} matches only {project} {versions[0]} on {index.name} ({index.url}) today, but a "
            "release with another local label added later would match it too; the index publishes no upload "
            "times, so the pin must name the full version.",
            tip=f"Pin {project}=={versions[0]} in requirements, or pin the file by sha256 with pin-sha256.",
        )
    return versions[0] if versions else (spec or "")
