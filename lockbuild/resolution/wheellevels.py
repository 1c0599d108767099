"""Which platform a release's wheels need: the lowest manylinux level (or another architecture) that has one.

Pure logic over wheel file names. Used where a lock fails because a package has no wheel for the build's
platform (the error then names the level that has one) and by ``recipe update`` (the lowest level at which
every locked package has a wheel).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from lockbuild.fetch.index import IndexFile
from lockbuild.target import ARCHES, GLIBC_MINORS, Target


@dataclass(frozen=True)
class Level:
    """A platform the build could take instead, and the release of the package that needs it."""

    project: str
    version: str
    platform: str  # as uv spells it, e.g. x86_64-manylinux_2_31
    same_arch: bool  # False: only another architecture has a wheel of it

    def describe(self) -> str:
        return f"{self.project} {self.version} has wheels for {self.platform}"


def _glibc_platforms(arch: str, above: int) -> list[str]:
    return [f"{arch}-manylinux_2_{m}" for m in GLIBC_MINORS if m > above]


def lowest_platform(filenames: Sequence[str], target: Target) -> str | None:
    """The lowest manylinux level of the target's architecture (at or above its own) at which one of
    ``filenames`` installs for the target's Python; None if none does."""
    arch = target.parsed.arch
    own = target.parsed.libc_version[1] if target.parsed.libc == "glibc" else 0
    candidates = ([target.platform] if target.parsed.libc == "glibc" else []) + _glibc_platforms(arch, own)
    for platform in candidates:
        t = Target.of(target.python, platform)
        if any(t.wheel_rank(f) is not None for f in filenames):
            return platform
    return None


def _newest_first(files: Sequence[IndexFile], as_of: dt.datetime | None) -> list[tuple[str, list[str]]]:
    """The wheels of each release (published by ``as_of``, not yanked), the newest release first."""
    by_version: dict[Version, list[str]] = {}
    for f in files:
        if f.yanked or not f.is_wheel or (as_of is not None and f.upload_time is not None and f.upload_time > as_of):
            continue
        try:
            version = parse_wheel_filename(f.filename)[1]
        except InvalidWheelFilename:
            continue
        by_version.setdefault(version, []).append(f.filename)
    return [(str(v), by_version[v]) for v in sorted(by_version, reverse=True)]


def _newer(a: str, b: str) -> bool:
    try:
        return Version(a) > Version(b)
    except InvalidVersion:
        return False


def wheel_elsewhere(
    project: str, files: Sequence[IndexFile], target: Target, as_of: dt.datetime | None, *, at_most: str = ""
) -> Level | None:
    """For a package with no wheel for ``target``: the newest release (as of the cut-off) that has no wheel
    for the target but one at a higher manylinux level of the same architecture, else the newest that has
    one for another architecture; None if neither. ``at_most``: the newest release to consider (the one uv
    named as having no usable wheel)."""
    other: Level | None = None
    for version, names in _newest_first(files, as_of):
        if at_most and _newer(version, at_most):
            continue
        if any(target.wheel_rank(n) is not None for n in names):
            continue  # this release fits the target
        higher = lowest_platform(names, target)
        if higher is not None:
            return Level(project, version, higher, True)
        for arch in (a for a in ARCHES if a != target.parsed.arch and other is None):
            found = lowest_platform(names, Target.of(target.python, f"{arch}-manylinux2014"))
            if found is not None:
                other = Level(project, version, found, False)
    return other


def level_of(platform: str) -> int:
    """The glibc minor of a manylinux platform spelling (0 for anything else)."""
    t = Target.of("3.12", platform)
    return t.parsed.libc_version[1] if t.parsed.libc == "glibc" else 0


def needs_platform_message(found: Sequence[Level], target: Target) -> str:
    """What the index has instead, for the error of a package with no wheel for ``target``."""
    return "; ".join(f.describe() for f in found) + "."


def raised_level(found: Sequence[Level]) -> Level | None:
    """The highest manylinux level of the build's own architecture among ``found`` (None if none is)."""
    same = [f for f in found if f.same_arch]
    return max(same, key=lambda f: level_of(f.platform)) if same else None


def needs_platform_tip(found: Sequence[Level], target: Target) -> str:
    """The alternative to building the sdist: raise the build's platform (or build for the other one)."""
    top = raised_level(found)
    if top is not None:
        minor = level_of(top.platform)
        return (
            f'Raise the build\'s platform to {top.platform} (platform = "{top.platform}"): {top.project} '
            f"{top.version} has no wheel below it, so the bundle then runs only on nodes with glibc 2.{minor} "
            f"or newer, and nodes older than that (RHEL 8 has glibc 2.28) need an older release of the engine. "
            "The alternative is to require a version that publishes a wheel for this platform, or, where the "
            "package has an sdist, to build it (name it in build-on-node)."
        )
    other = found[0]
    return (
        f"{other.project} {other.version} publishes wheels only for another platform ({other.platform}): "
        "build for that platform instead, name the package in build-on-node to build its sdist, or require "
        "a version that publishes a wheel for this platform."
    )
