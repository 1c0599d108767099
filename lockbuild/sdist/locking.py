"""Locking with ``build-on-node`` sdists, and no build backend run with the network.

uv is given every such sdist's metadata, so it runs no backend; the metadata of the versions it chooses is
read here (statically from PKG-INFO, else by the backend in the sandbox with no network), and the
resolution repeated until every sdist in the lock was resolved with its own metadata."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from typing import BinaryIO, TypeVar

from lockbuild.bundle.lockfiles import build_lock_text
from lockbuild.errors import LockbuildError, ResolveError
from lockbuild.lock import LockedFile
from lockbuild.sdist.buildreqs import build_system, top_level_file
from lockbuild.sdist.metadata import SdistMetadata, refusal, static_metadata
from lockbuild.sdist.metahook import produce_metadata
from lockbuild.target import Target

MAX_ROUNDS = 8
R = TypeVar("R")


def resolve_with_sdists(
    resolve: Callable[[tuple[SdistMetadata, ...]], tuple[R, tuple[LockedFile, ...]]],
    read: Callable[[LockedFile], SdistMetadata],
) -> tuple[R, tuple[LockedFile, ...]]:
    """``resolve(known metadata)`` until each sdist it locks is one whose metadata it was given."""
    known: dict[tuple[str, str], SdistMetadata] = {}
    for _ in range(MAX_ROUNDS):
        resolution, files = resolve(tuple(known[k] for k in sorted(known)))
        sdists = [f for f in files if f.kind == "sdist"]
        new = [f for f in sdists if (f.name, f.version) not in known]
        if not new:
            for f in sdists:
                if known[(f.name, f.version)].sha256 != f.sha256:
                    raise ResolveError(
                        f"{f.filename} (sha256 {f.sha256}) is locked, but its metadata was read from another file "
                        f"of {f.name} {f.version} (sha256 {known[(f.name, f.version)].sha256}).",
                        tip="The index changed during the lock; run it again.",
                    )
            return resolution, files
        for f in new:
            known[(f.name, f.version)] = read(f)
    shown = ", ".join(f"{n} {v}" for n, v in sorted(known))
    raise ResolveError(
        f"the resolution did not settle within {MAX_ROUNDS} rounds: each chose other versions of the build-on-node "
        f"sdists (read so far: {shown}).",
        tip="Pin the build-on-node packages with == in requirements.",
    )


def read_sdist_metadata(
    f: LockedFile,
    *,
    open_file: Callable[[LockedFile], BinaryIO],
    lock_build_deps: Callable[[Sequence[str]], Sequence[LockedFile]],
    target: Target,
    inherit: Mapping[str, str],
) -> SdistMetadata:
    """The metadata of the locked sdist ``f``: static from its PKG-INFO, else made by its backend offline.
    ``open_file`` opens a locked file checked by its digest; ``lock_build_deps`` locks requirements
    (wheels only, the build's cut-off and target)."""
    with open_file(f) as fh:
        system = build_system(fh, f.filename)
        fh.seek(0)
        pkg_info = top_level_file(fh, f.filename, "PKG-INFO")
    if pkg_info is not None:
        static = static_metadata(pkg_info, f.name, f.version, f.sha256)
        if static is not None:
            return static
    try:
        deps = tuple(lock_build_deps(system.requires)) if system.requires else ()
    except LockbuildError as exc:
        why = f"its build dependencies ({', '.join(system.requires)}) cannot be locked: {exc.message.splitlines()[0]}"
        raise refusal(f.name, f.version, why[:600]) from None
    lock_text = build_lock_text(deps, [(f.filename, system.requires)])
    with ExitStack() as stack:
        opened = [stack.enter_context(open_file(d)) for d in deps]
        sdist = stack.enter_context(open_file(f))
        return produce_metadata(
            sdist=sdist,
            sdist_name=f.filename,
            sha256=f.sha256,
            project=f.name,
            version=f.version,
            system=system,
            deps=[(d.filename, fh) for d, fh in zip(deps, opened, strict=True)],
            lock_text=lock_text,
            target=target,
            inherit=inherit,
        )
