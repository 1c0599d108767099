"""A build's extra indexes (``index``, ``indexes``): a client for each, which packages the cut-off holds
there, and the rule that each locked name comes from one index only."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass

import httpx

from lockbuild.errors import ResolveError
from lockbuild.fetch.index import Index
from lockbuild.lock import LockedFile
from lockbuild.recipe import Build, SecondIndex
from lockbuild.resolution.cutoff import check_exact_pin, recipe_pin


@dataclass(frozen=True)
class ExtraIndexes:
    """The build's extra indexes as clients (by index name), and which of their packages the cut-off holds."""

    clients: Mapping[str, Index]
    timed: frozenset[str]  # packages whose pinned release has upload times on its index


def index_label(index: SecondIndex) -> str:
    """How messages name an extra index: "the second index" (``index``), "index NAME" (``indexes``)."""
    return "the second index" if index.name == "second" else f"index {index.name!r}"


def extra_indexes(client: httpx.Client, build: Build) -> ExtraIndexes:
    """A client for each extra index, each == pin checked to name exactly one release there (the rules of
    an index without upload times), and the packages whose pinned release has upload times on its index:
    for those the cut-off holds too, unless exclude-newer-package exempts them."""
    clients = {ix.name: Index(ix.url, client, name=index_label(ix)) for ix in build.extra_indexes}
    timed: set[str] = set()
    for ix in build.extra_indexes:
        for name in ix.packages:
            spec = recipe_pin(build, name)
            matched = clients[ix.name].matching(name, spec) if spec is not None else ()
            check_exact_pin(build, name, matched, clients[ix.name])
            if matched and all(f.upload_time is not None for f in matched):
                timed.add(name)
    return ExtraIndexes(clients, frozenset(timed))


def check_names_on_one_index(
    locked: Sequence[LockedFile], build: Build, extra: ExtraIndexes, pool: Executor, *, index_url: str
) -> None:
    """Every package locked from the primary index, transitive ones too, is a name no extra index serves,
    unless the recipe names it in primary-packages. Otherwise a dependency of an extra index's package
    that the extra index also serves (torchtriton for PyTorch's nightlies, 2022) would be locked from
    whoever claimed the name on the primary index; the recipe must say which index it belongs to."""
    if not build.extra_indexes:
        return
    names = sorted({f.name for f in locked if f.origin == "primary" and f.name not in build.primary_packages})
    asks = [(name, ix) for name in names for ix in build.extra_indexes]
    served = pool.map(lambda a: extra.clients[a[1].name].serves(a[0]), asks)
    both = [(name, ix) for (name, ix), yes in zip(asks, served, strict=True) if yes]
    if not both:
        return
    shown = "; ".join(
        f"{name} from the package index ({index_url}), and {index_label(ix)} ({ix.url}) serves {name} too"
        for name, ix in both[:20]
    )
    first, ix = both[0]
    raise ResolveError(
        f"{build.id}: {len(both)} package(s) of the lock are served by both the package index and an extra "
        f"index: {shown}{' ...' if len(both) > 20 else ''}. Expected each locked name on one index only: a "
        "dependency that an extra index serves would otherwise be taken from whoever holds its name on the "
        "primary index (how torchtriton was taken in 2022).",
        tip=f"Say in the recipe which index each belongs to: if {first} belongs with its index's packages, "
        f"add it to {index_label(ix)}'s packages and pin it with == in requirements; if it is the primary "
        f"index's, name it in the build's primary-packages = [\"{first}\", ...].",
    )
