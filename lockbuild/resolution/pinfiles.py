"""Each locked pin's file, chosen by where the pin comes from: a project the recipe names directly, the one
candidate it gave (:func:`from_recipe`); one an extra index serves, from that index only
(:func:`from_own_index`); every other, the primary index at its cut-off (:func:`from_primary`)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass

from packaging.utils import parse_wheel_filename

from lockbuild.errors import ResolveError
from lockbuild.fetch.extraindex import ExtraIndexes, check_names_on_one_index
from lockbuild.fetch.index import Index, IndexFile
from lockbuild.fetch.lookahead import Lookahead
from lockbuild.lock import Candidate, LockedFile, Pin, choose_file
from lockbuild.recipe import Build
from lockbuild.resolution.cutoff import index_candidates, package_cut_off


@dataclass(frozen=True)
class PinSources:
    """Where a build's pins may come from: the recipe's own files (by project), the extra indexes, and the
    primary index's entries of a pin's release."""

    build: Build
    direct: Mapping[str, Candidate]
    as_of: dt.datetime
    extra: ExtraIndexes
    release: Callable[[Pin], tuple[IndexFile, ...]]


def from_recipe(pin: Pin, s: PinSources) -> LockedFile | None:
    """A pin of a project the recipe names directly (or one the lock takes from a URL): its one candidate."""
    if pin.url is None and pin.name not in s.direct:
        return None
    cand = s.direct.get(pin.name)
    if cand is None:
        raise ResolveError(f"the lock takes {pin.name} from a URL ({pin.url}) the recipe does not name.")
    version = pin.version or str(parse_wheel_filename(cand.filename)[1])
    return choose_file(Pin(pin.name, version, pin.hashes), [cand], s.build.target, origin="direct")


def from_own_index(pin: Pin, s: PinSources) -> LockedFile | None:
    """A pin of a project an extra index serves: from that index only (the == pin holds it, and the
    cut-off, if that index is timed)."""
    served = s.build.index_for(pin.name)
    if served is None:
        return None
    files = index_candidates(s.extra.clients[served.name].release(pin.name, pin.version))
    cut = package_cut_off(s.build, pin.name, s.as_of) if pin.name in s.extra.timed else None
    return choose_file(
        pin,
        files,
        s.build.target,
        origin="second",
        as_of=cut,
        pinned_sha256=s.build.pinned_sha256(pin.name),
        one_file=True,
        index=served.name,
    )


def from_primary(pin: Pin, s: PinSources) -> LockedFile:
    """Any other pin: from the primary index, at the project's cut-off."""
    files = index_candidates(s.release(pin))
    cut = package_cut_off(s.build, pin.name, s.as_of)
    return choose_file(
        pin, files, s.build.target, origin="primary", as_of=cut, pinned_sha256=s.build.pinned_sha256(pin.name)
    )


def locked_file(pin: Pin, s: PinSources) -> LockedFile:
    """The pin's file, chosen by the first kind of pin it is."""
    return from_recipe(pin, s) or from_own_index(pin, s) or from_primary(pin, s)


def primary_release(
    primary: Index, ahead: Lookahead[tuple[IndexFile, ...]] | None
) -> Callable[[Pin], tuple[IndexFile, ...]]:
    """The primary index's entries of a pin's release: the look-up started ahead when it has started (its
    answer, or its error), else looked up here, not queued behind this worker."""

    def release(pin: Pin) -> tuple[IndexFile, ...]:
        early = ahead.take(pin.name, pin.version) if ahead is not None else None
        if early is not None and not early.cancel():
            return early.result()
        return primary.release(pin.name, pin.version)

    return release


def locked_files(pins: Sequence[Pin], s: PinSources, pool: Executor, *, index_url: str) -> tuple[LockedFile, ...]:
    """Every pin's file, chosen on the pool; then each name checked to come from one index."""
    locked = tuple(pool.map(lambda pin: locked_file(pin, s), pins))
    check_names_on_one_index(locked, s.build, s.extra, pool, index_url=index_url)
    return locked
