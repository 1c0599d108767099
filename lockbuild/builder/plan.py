"""Locking one build: cut-off, engine files, resolution, and the exact file set to fetch and bundle.

The steps live beside it: the files the recipe names directly (``direct``), each pin's file by its kind
(``pinfiles``), what a locked file's index says and a wheel's METADATA (``pinmeta``), the lock's sdists
(``sdistplan``).
"""

from __future__ import annotations

import datetime as dt
import tempfile
from collections.abc import Sequence
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import tomlkit
from packaging.utils import canonicalize_name

from lockbuild.builder.direct import Reach, engine_wheel, interpreter, release_assets, source_archive
from lockbuild.builder.extras import ExtraFile, choose_uv_wheel
from lockbuild.bundle.instructions import extra_file_member
from lockbuild.errors import LockbuildError, RecipeError, ResolveError
from lockbuild.fetch import github
from lockbuild.fetch.attestations import with_provenance
from lockbuild.fetch.cache import Cache
from lockbuild.fetch.extraindex import extra_indexes, index_label
from lockbuild.fetch.fetcher import Fetcher, Wanted, open_verified
from lockbuild.fetch.index import Index
from lockbuild.fetch.lookahead import Lookahead
from lockbuild.gpu.fit import GpuFit
from lockbuild.lock import Candidate, Lock, LockedFile, parse_pylock, parse_requirements_lock
from lockbuild.proc.uvtool import uv_binary, uv_version
from lockbuild.progress import Progress
from lockbuild.recipe import Build, Recipe
from lockbuild.resolution.cutoff import cut_off, late_files_warning, release_cut_off
from lockbuild.resolution.memo import ResolutionMemo
from lockbuild.resolution.pinfiles import PinSources, locked_files, primary_release
from lockbuild.resolution.pinmeta import CHECK_DOWNLOAD_BUDGET, Listings
from lockbuild.resolution.published import check_published
from lockbuild.resolution.resolve import Resolution, compile_lock
from lockbuild.resolution.wheellevels import (
    needs_platform_message,
    needs_platform_tip,
    raised_level,
    wheel_elsewhere,
)
from lockbuild.sdist.locking import read_sdist_metadata, resolve_with_sdists
from lockbuild.sdist.metadata import SdistMetadata
from lockbuild.sdist.planning import build_closure, prebuild_sdists
from lockbuild.sdist.prebuild import Prebuilt
from lockbuild.settings import Settings
from lockbuild.times import iso


@dataclass(frozen=True)
class Plan:
    """Everything one build needs: its lock, the files to fetch, and the resolved recipe."""

    recipe: Recipe
    build: Build
    as_of: dt.datetime
    lock: Lock
    requirements: tuple[str, ...]
    extras: tuple[ExtraFile, ...]
    resolved_recipe: str
    uv_version: str
    warnings: tuple[str, ...] = ()  # shown by the CLI in text and in --json
    build_deps: tuple[LockedFile, ...] = ()  # the hashed closure the lock's sdists are built from
    build_requires: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (sdist file name, its build requirements)
    prebuilt: tuple[Prebuilt, ...] = ()  # wheels built here from sdists, bundled next to them
    resolution_reused: bool = False  # uv's resolution was remembered from an earlier run (memo.py), uv not run
    gpu_fit: GpuFit | None = None  # the measured fit (builder/gpufit.py), carried into the manifest (format 5)

    def wanted(self) -> list[Wanted]:
        # Credentials are added by the HTTP client, per host, from the settings (never per file).
        out = [Wanted(f.url, f.sha256, f.size, f.filename) for f in (*self.lock.files, *self.build_deps)]
        out += [Wanted(e.url, e.sha256, e.size, e.path) for e in self.extras]
        return out


# Index pages fetched at once to choose each locked file (started as uv chooses each version, see
# lookahead.py). More threads hardly help (the pages are parsed under the GIL) and cost memory: vLLM's
# lock peaked at 126 MB with 8, 146 MB with 16, 155 MB with 32.
LOOKUP_THREADS = 8


class Planner:
    """Locks builds against a primary index (and the build's extra indexes, each for its own packages)."""

    def __init__(self, client: httpx.Client, cache: Cache, fetcher: Fetcher, *, settings: Settings, progress: Progress):
        self.client = client
        self.cache = cache
        self.fetcher = fetcher
        self.settings = settings
        self.index_url = settings.index_url  # never carries credentials: they live in settings
        self.primary = self._primary()
        self.progress = progress
        self.memo = ResolutionMemo(cache.resolutions())

    def _primary(self) -> Index:
        return Index(self.index_url, self.client, name="the package index")

    def _release_assets(self, repo: str, tag: str) -> dict[str, github.ReleaseAsset]:
        s = self.settings
        return github.release_assets(self.client, repo, tag, api=s.github_api, download=s.github_download)

    def plan(self, recipe: Recipe, build: Build) -> Plan:
        self.primary = self._primary()  # index answers are kept for one plan only
        # The uv wheel the node needs does not depend on the resolution: looked up while uv resolves.
        with (
            ThreadPoolExecutor(max_workers=1, thread_name_prefix="lockbuild-uv-wheel") as bg,
            ThreadPoolExecutor(max_workers=LOOKUP_THREADS, thread_name_prefix="lockbuild-lookup") as pool,
        ):
            tool = bg.submit(lambda: self._uv_tool(build))
            try:
                return self._plan(recipe, build, tool, pool)
            finally:
                tool.cancel()

    def _uv_tool(self, build: Build) -> tuple[str, ExtraFile]:
        uv = uv_version(uv_binary())
        return uv, choose_uv_wheel(self.primary, build.target, uv)

    def _plan(self, recipe: Recipe, build: Build, tool_lookup: Future[tuple[str, ExtraFile]], pool: Executor) -> Plan:
        for ix in build.extra_indexes:  # uv reaches them too, on its own: the transport rule is checked first
            self.settings.check(ix.url, what=f"{build.id}: {index_label(ix)}")
        engine = recipe.engine
        warnings: list[str] = []
        if build.as_of is not None:
            as_of = cut_off(recipe, build, self.primary)
        else:
            pub = self.primary.publication(engine.pypi, build.version)
            as_of = release_cut_off(self.primary, pub, engine.pypi, build.version)
            late = late_files_warning(engine.pypi, build.version, pub, as_of)
            if late is not None:
                warnings.append(late)
        self.progress.phase(f"{engine.name} {build.id}: resolving as of {iso(as_of)}")
        listings = Listings(self.primary, extra_indexes(self.client, build), self.fetcher, self.cache)
        reach = Reach(self.fetcher, self.cache, self.progress, self._release_assets)
        from_source, archive = source_archive(reach, recipe, build)
        requirements = [*build.requirements, *from_source]
        extras: list[ExtraFile] = [archive] if archive is not None else []
        direct: dict[str, Candidate] = {}
        wheel = engine_wheel(reach, recipe, build, as_of)
        if wheel is not None:
            requirements.insert(0, wheel.requirement)
            direct[wheel.project] = wheel.candidate
        extras += release_assets(reach, recipe, build)
        for x in build.extra_files:  # fetched by the one fetcher, checked against the recipe's sha256
            self.settings.check(x.url, what=f"{build.id}: extra file {x.dest}")
            extras.append(ExtraFile(extra_file_member(x.dest), "extra-file", x.url, x.sha256, None))
        if (python := interpreter(reach, build)) is not None:
            extras.append(python)

        def read_metadata(f: LockedFile) -> SdistMetadata:
            self.progress.phase(
                f"{build.id}: reading the metadata of {f.filename} (its backend, if it must run, "
                "runs in the sandbox without network)"
            )
            return read_sdist_metadata(
                f,
                open_file=lambda g: open_verified(self.fetcher, Wanted(g.url, g.sha256, g.size, g.filename)),
                lock_build_deps=lambda reqs: self._resolve(list(reqs), build, as_of, listings, {}, pool)[1],
                target=build.target,
                inherit=dict(self.settings.child_environ),
            )

        resolution, files = resolve_with_sdists(  # no build backend runs with the network (sdistlock.py)
            lambda known: self._resolve(
                requirements, build, as_of, listings, direct, pool, sdists=build.build_on_node, sdist_metadata=known
            ),
            read_metadata,
        )
        files = with_provenance(self.client, files, listings.listed, pool)  # PEP 740
        check_published(  # an extra file's sha256 against the one its package publishes, where it does
            recipe, build, files, lambda f: open_verified(self.fetcher, Wanted(f.url, f.sha256, f.size, f.filename))
        )
        unused = sorted({name for name, _ in build.pin_sha256} - {f.name for f in files})
        if unused:
            raise RecipeError(
                f"{recipe.path}: {build.id}: pin-sha256 names {', '.join(unused)}, which the lock does not contain; "
                "expected each pinned package to be in the lock.",
                tip="Remove the stale entry, or add the package to requirements.",
            )
        sdists = sorted(f.filename for f in files if f.kind == "sdist")
        build_deps, build_requires = build_closure(
            files,
            build,
            as_of,
            fetcher=self.fetcher,
            progress=self.progress,
            lock=lambda reqs: self._resolve(reqs, build, as_of, listings, {}, pool)[1],
        )
        prebuilt = prebuild_sdists(
            files,
            build,
            as_of,
            build_deps,
            build_requires,
            warnings,
            fetcher=self.fetcher,
            cache=self.cache,
            progress=self.progress,
            inherit=dict(self.settings.child_environ),
        )
        urls = {f.filename: f.url for f in files}
        extras += [ExtraFile(p.path, "wheel", urls[p.sdist], p.sha256, p.size) for p in prebuilt]
        if sdists:
            warnings.append(
                f"{len(sdists)} package(s) have no wheel for {build.platform} and come as sdists "
                f"({', '.join(sdists[:5])}); {len(prebuilt)} built here into wheels that run on the node, the "
                f"rest built by the node offline from the {len(build_deps)} hashed build dependencies bundled"
            )
        uv, tool = tool_lookup.result()
        extras.append(tool)
        lock = Lock(resolution.format, resolution.text, files, as_of)
        return Plan(
            recipe,
            build,
            as_of,
            lock,
            tuple(requirements),
            tuple(extras),
            resolved_recipe(recipe, build, as_of, wheel.recorded_sha256 if wheel is not None else None),
            uv,
            tuple(warnings),
            build_deps,
            build_requires,
            tuple(prebuilt),
            resolution.reused,
        )

    def _compile(self, build: Build, requirements: Sequence[str], *args: Any, **kwargs: Any) -> Resolution:
        """uv's resolution; a package with no wheel for the build's platform is named with the platform that
        has one (a newer manylinux level, or another architecture), the alternative to building its sdist."""
        try:
            return compile_lock(requirements, *args, **kwargs)
        except ResolveError as exc:
            if not exc.needs_wheel:
                raise
            as_of: dt.datetime = args[1]
            found = []
            for name, at_most in exc.needs_wheel:
                ix = build.index_for(canonicalize_name(name))
                index = self.primary if ix is None else Index(ix.url, self.client, name=index_label(ix))
                try:
                    level = wheel_elsewhere(name, index.files(name), build.target, as_of, at_most=at_most)
                except LockbuildError:
                    continue  # the refusal stands as it is
                if level is not None:
                    found.append(level)
            if not found:
                raise
            top = raised_level(found)
            raise ResolveError(
                exc.message + " " + needs_platform_message(found, build.target),
                tip=needs_platform_tip(found, build.target),
                needs_wheel=exc.needs_wheel,
                platform=top.platform if top is not None else None,
                forced_by=f"{top.project} {top.version}" if top is not None else "",
            ) from None

    def _resolve(
        self,
        requirements: Sequence[str],
        build: Build,
        as_of: dt.datetime,
        listings: Listings,
        direct: dict[str, Candidate],
        pool: Executor,
        *,
        sdists: Sequence[str] = (),
        sdist_metadata: Sequence[SdistMetadata] = (),
    ) -> tuple[Resolution, tuple[LockedFile, ...]]:
        """uv's resolution (remembered, or run with its choices hinting the look-ups) and each pin's file.

        A remembered resolution is checked like a fresh one: every pin's file is chosen from the live
        index by the same rules. If any pin fails there (yanked, deleted, another digest), the memory is
        dropped and uv resolves afresh, once, so the outcome is what a fresh lock gives."""
        reuse = not self.settings.fresh_lock
        while True:
            ahead = Lookahead(pool, self.primary.release, lambda n: n not in direct and build.index_for(n) is None)
            try:
                with tempfile.TemporaryDirectory(prefix="lockbuild-resolve-") as tmp:
                    resolution = self._compile(
                        build,
                        requirements,
                        build.target,
                        as_of,
                        index_url=self.index_url,
                        indexes=build.extra_indexes,
                        timed=listings.extra.timed,
                        workdir=Path(tmp),
                        cache_dir=self.cache.uv_cache(),
                        inherit=dict(self.settings.child_environ),
                        credentials=self.settings.index_credentials,
                        sdists_allowed=sdists,
                        sdist_metadata=sdist_metadata,
                        exclude_newer_package=build.exclude_newer_package,
                        memo=self.memo,
                        reuse=reuse,
                        on_select=ahead.hint,
                    )
                try:
                    if resolution.format == "pylock.toml":
                        pins = parse_pylock(resolution.text, build.target)
                    else:
                        pins = parse_requirements_lock(resolution.text)
                    sources = PinSources(build, direct, as_of, listings.extra, primary_release(self.primary, ahead))
                    files = locked_files(pins, sources, pool, index_url=self.index_url)
                    if resolution.reused and (heavy := listings.to_download(files)) > CHECK_DOWNLOAD_BUDGET:
                        # checking the remembered answer would download more than uv needs to resolve afresh
                        # (an index without PEP 658 files, a cache without the wheels): ask uv, keep the memory
                        self.progress.phase(
                            f"{build.id}: checking the remembered resolution would download {heavy / 1e6:,.0f} MB "
                            "of wheels (the index publishes no METADATA files for them); resolving afresh"
                        )
                        reuse = False
                        continue
                    why = listings.not_the_closure(requirements, files, build, pool) if resolution.reused else None
                    if why is None:
                        return resolution, files
                    if resolution.key is not None:  # a reused resolution always has its key
                        self.memo.discard(resolution.key)
                    self.progress.phase(
                        f"{build.id}: the remembered resolution is not what the requirements need ({why[:160]}); "
                        "resolving afresh"
                    )
                    reuse = False
                except LockbuildError as exc:
                    if not resolution.reused or resolution.key is None:
                        raise
                    self.memo.discard(resolution.key)
                    self.progress.phase(
                        f"{build.id}: the remembered resolution does not hold on the index now "
                        f"({exc.message.splitlines()[0][:120]}); resolving afresh"
                    )
                    reuse = False
            finally:
                ahead.close()


def resolved_recipe(recipe: Recipe, build: Build, as_of: dt.datetime, self_wheel: str | None = None) -> str:
    """``recipe`` with only ``build`` in it and its ``as-of`` filled in (comments kept); for lockbuild's
    own wheel (``wheel = { self = true }``), its sha256 too."""
    doc = tomlkit.parse(recipe.text)
    builds = doc["builds"]
    keep = builds[build.position]
    keep["as-of"] = as_of.astimezone(dt.UTC)
    if self_wheel is not None:
        pin = tomlkit.inline_table()
        pin.update({"self": True, "sha256": self_wheel})
        keep["wheel"] = pin
    if isinstance(builds, tomlkit.items.AoT):
        new = tomlkit.aot()
        new.append(keep)
        doc["builds"] = new
    else:  # builds = [ { ... }, ... ], an inline array of tables
        for i in range(len(builds) - 1, -1, -1):
            if i != build.position:
                del builds[i]
    return tomlkit.dumps(doc)
