"""The files a bundle carries beside the locked packages (source, assets, interpreter, tool), and the
one tool chosen from the index: the uv wheel the node installs with."""

from __future__ import annotations

from dataclasses import dataclass

from lockbuild.errors import ResolveError
from lockbuild.fetch.index import Index, Publication
from lockbuild.lock import Pin, choose_file
from lockbuild.resolution.cutoff import index_candidates, release_cut_off
from lockbuild.target import Target


@dataclass(frozen=True)
class ExtraFile:
    """A bundled file that is not a Python distribution from the lock (source, asset, tool)."""

    path: str  # inside the bundle
    kind: str  # "source", "asset", "tool"
    url: str
    sha256: str
    size: int | None


def choose_uv_wheel(primary: Index, target: Target, version: str) -> ExtraFile:
    """The uv wheel for the node's platform, at the builder's uv version, from the primary index.

    The same rules as every other file: its release's cut-off (first upload + 24 h: a wheel added to
    that uv release later is absent) and never a yanked file. It is recorded with the lock's extras.
    """
    files = [f for f in primary.release("uv", version) if f.is_wheel]
    cands = index_candidates(files)
    pin = Pin("uv", version, frozenset(c.sha256 for c in cands if c.sha256))
    if not pin.hashes:
        raise ResolveError(
            f"the package index has no uv {version} wheels with sha256 digests; the node needs one to install.",
            tip="Use a builder whose uv version is published on the index.",
        )
    times = [f.upload_time for f in files if f.upload_time is not None]
    uv_cut = None
    if times:
        uv_cut = release_cut_off(primary, Publication(min(times), max(times), tuple(files)), "uv", version)
    chosen = choose_file(pin, cands, target, origin="primary", as_of=uv_cut)
    return ExtraFile(f"tools/{chosen.filename}", "tool", chosen.url, chosen.sha256, chosen.size)
