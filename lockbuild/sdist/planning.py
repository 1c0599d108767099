"""The lock's sdists, planned: their build requirements (read from each sdist, never run) locked with
hashes, and each sdist built here from that closure only, when its wheel runs on the node."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence

from lockbuild.bundle.lockfiles import build_lock_text
from lockbuild.errors import ResolveError
from lockbuild.fetch.cache import Cache
from lockbuild.fetch.fetcher import Fetcher, Wanted, open_verified
from lockbuild.lock import LockedFile
from lockbuild.progress import Progress
from lockbuild.recipe import Build
from lockbuild.sdist.buildreqs import build_requires
from lockbuild.sdist.prebuild import Prebuilt, prebuild
from lockbuild.times import iso

BuildRequires = tuple[tuple[str, tuple[str, ...]], ...]  # (sdist file name, its build requirements)


def _sdists(files: Sequence[LockedFile]) -> list[LockedFile]:
    return sorted((f for f in files if f.kind == "sdist"), key=lambda f: f.filename)


def build_closure(
    files: Sequence[LockedFile],
    build: Build,
    as_of: dt.datetime,
    *,
    fetcher: Fetcher,
    progress: Progress,
    lock: Callable[[list[str]], tuple[LockedFile, ...]],
) -> tuple[tuple[LockedFile, ...], BuildRequires]:
    """The lock's sdists' build requirements (read from each sdist, never run), resolved at the same
    cut-off for the same target, wheels only, with hashes (``lock``): what the node builds them from."""
    per: list[tuple[str, tuple[str, ...]]] = []
    for f in _sdists(files):
        with open_verified(fetcher, Wanted(f.url, f.sha256, f.size, f.filename)) as fh:
            per.append((f.filename, build_requires(fh, f.filename)))
    wanted = sorted({r for _, reqs in per for r in reqs})
    if not wanted:
        return (), tuple(per)
    progress.phase(f"{build.id}: resolving the build dependencies of {len(per)} sdist(s)")
    try:
        return lock(wanted), tuple(per)
    except ResolveError as exc:
        shown = "; ".join(f"{sdist} needs {', '.join(reqs)}" for sdist, reqs in per if reqs)
        raise ResolveError(
            f"cannot lock the build dependencies of the sdists ({shown}) as of {iso(as_of)}: {exc.message}",
            tip="The node builds an sdist only from hashed build dependencies bundled with it. Require a "
            "version of the package that publishes a wheel for this target, or make its build "
            "dependencies available as wheels on the index by the cut-off.",
        ) from None


def prebuild_sdists(
    files: Sequence[LockedFile],
    build: Build,
    as_of: dt.datetime,
    deps: Sequence[LockedFile],
    requires: Sequence[tuple[str, tuple[str, ...]]],
    warnings: list[str],
    *,
    fetcher: Fetcher,
    cache: Cache,
    progress: Progress,
    inherit: Mapping[str, str],
) -> list[Prebuilt]:
    """Each sdist built here, from its hashed closure only, when the wheel runs on the node."""
    out: list[Prebuilt] = []
    lock_text = build_lock_text(deps, requires)
    for f in _sdists(files):
        progress.phase(f"{build.id}: building {f.filename} without network from its hashed build closure")
        opened = [open_verified(fetcher, Wanted(d.url, d.sha256, d.size, d.filename)) for d in deps]
        try:
            with open_verified(fetcher, Wanted(f.url, f.sha256, f.size, f.filename)) as sdist:
                got, why = prebuild(
                    sdist=sdist,
                    sdist_name=f.filename,
                    project=f.name,
                    version=f.version,
                    deps=[(d.filename, fh) for d, fh in zip(deps, opened, strict=True)],
                    lock_text=lock_text,
                    target=build.target,
                    as_of=as_of,
                    cache=cache,
                    inherit=dict(inherit),
                )
        finally:
            for fh in opened:
                fh.close()
        if got is None:
            warnings.append(f"{f.filename} was not built on the builder: {why}; the node builds it")
        else:
            out.append(got)
    return out
