"""Locking one build: cut-off, engine files, resolution, and the exact file set to fetch and bundle."""

from __future__ import annotations

import datetime as dt
import tempfile
from collections.abc import Sequence
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
from packaging.utils import parse_wheel_filename

from lockbuild import fsio
from lockbuild.builder import github
from lockbuild.builder.buildreqs import build_requires
from lockbuild.builder.cache import Cache
from lockbuild.builder.closure import MAX_METADATA_BYTES, closure_problem, wheel_metadata
from lockbuild.builder.cutoff import (
    cut_off,
    index_candidates,
    late_files_warning,
    package_cut_off,
    release_cut_off,
)
from lockbuild.builder.direct import Reach, engine_wheel, interpreter, release_assets, source_archive
from lockbuild.builder.extraindex import ExtraIndexes, check_names_on_one_index, extra_indexes, index_label
from lockbuild.builder.extras import ExtraFile, choose_uv_wheel
from lockbuild.builder.fetch import Fetcher, Wanted, open_verified
from lockbuild.builder.index import Index, IndexFile
from lockbuild.builder.lookahead import Lookahead
from lockbuild.builder.memo import ResolutionMemo
from lockbuild.builder.prebuild import Prebuilt, prebuild
from lockbuild.builder.provenance import with_provenance
from lockbuild.builder.resolve import Resolution, compile_lock
from lockbuild.builder.resolved import resolved_recipe
from lockbuild.builder.sdistlock import read_sdist_metadata, resolve_with_sdists
from lockbuild.builder.sdistmeta import SdistMetadata
from lockbuild.builder.selfwheel import NAME as SELF_NAME
from lockbuild.bundle.buildlock import build_lock_text
from lockbuild.errors import IntegrityError, LockbuildError, RecipeError, ResolveError
from lockbuild.lock import Candidate, Lock, LockedFile, Pin, choose_file, parse_pylock, parse_requirements_lock
from lockbuild.progress import Progress
from lockbuild.recipe import Build, Recipe, SelfWheel
from lockbuild.settings import Settings
from lockbuild.times import iso
from lockbuild.uvtool import uv_binary, uv_version


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
        extra = extra_indexes(self.client, build)
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
                lock_build_deps=lambda reqs: self._resolve(list(reqs), build, as_of, extra, {}, pool)[1],
                target=build.target,
                inherit=dict(self.settings.child_environ),
            )

        resolution, files = resolve_with_sdists(  # no build backend runs with the network (sdistlock.py)
            lambda known: self._resolve(
                requirements, build, as_of, extra, direct, pool, sdists=build.build_on_node, sdist_metadata=known
            ),
            read_metadata,
        )
        files = with_provenance(self.client, files, lambda f: self._listed(f, extra), pool)  # PEP 740
        unused = sorted({name for name, _ in build.pin_sha256} - {f.name for f in files})
        if unused:
            raise RecipeError(
                f"{recipe.path}: {build.id}: pin-sha256 names {', '.join(unused)}, which the lock does not contain; "
                "expected each pinned package to be in the lock.",
                tip="Remove the stale entry, or add the package to requirements.",
            )
        sdists = sorted(f.filename for f in files if f.kind == "sdist")
        build_deps, build_requires = self._build_closure(files, build, as_of, extra, pool)
        prebuilt = self._prebuild(files, build, as_of, build_deps, build_requires, warnings)
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
        self_made = isinstance(build.wheel, SelfWheel)
        lock = Lock(resolution.format, resolution.text, files, as_of)
        return Plan(
            recipe,
            build,
            as_of,
            lock,
            tuple(requirements),
            tuple(extras),
            resolved_recipe(recipe, build, as_of, own.sha256 if (own := direct.get(SELF_NAME)) and self_made else None),
            uv,
            tuple(warnings),
            build_deps,
            build_requires,
            tuple(prebuilt),
            resolution.reused,
        )

    def _resolve(
        self,
        requirements: Sequence[str],
        build: Build,
        as_of: dt.datetime,
        extra: ExtraIndexes,
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
                    resolution = compile_lock(
                        requirements,
                        build.target,
                        as_of,
                        index_url=self.index_url,
                        indexes=build.extra_indexes,
                        timed=extra.timed,
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
                    files = self._files(pins, build, direct, as_of, extra, pool, ahead)
                    why = self._not_the_closure(requirements, files, build, extra, pool) if resolution.reused else None
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

    def _not_the_closure(
        self,
        requirements: Sequence[str],
        files: Sequence[LockedFile],
        build: Build,
        extra: ExtraIndexes,
        pool: Executor,
    ) -> str | None:
        """Why a remembered resolution's files are not exactly the closure of ``requirements`` on the build's
        target (closure.py), or None. Each pin's METADATA is the index's PEP 658 file where it publishes one,
        else the wheel's own, each taken only with its digest (the wheel is then in the cache for the fetch)."""
        by_name = {f.name: f for f in files}
        if len(by_name) != len(files) or any(f.kind != "wheel" for f in files):
            return "it pins a package twice, or an sdist"
        got = dict(zip(by_name, pool.map(lambda f: self._metadata(f, extra), files), strict=True))
        pins = {f.name: f.version for f in files}
        return closure_problem(requirements, pins, got.__getitem__, build.target.marker_environment())

    def _listed(self, f: LockedFile, extra: ExtraIndexes) -> tuple[IndexFile, ...]:
        """The index entries of a locked file's release (kept from the look-ups that chose it)."""
        if f.origin == "primary":
            return self.primary.release(f.name, f.version)
        if f.origin == "second" and f.index in extra.clients:
            return extra.clients[f.index].release(f.name, f.version)
        return ()

    def _metadata(self, f: LockedFile, extra: ExtraIndexes) -> bytes:
        """A locked wheel's METADATA: the index's PEP 658 file (by its listed sha256), or the wheel's own."""
        listed: tuple[IndexFile, ...] = ()
        if f.origin == "primary":
            listed = self.primary.release(f.name, f.version)
        elif f.origin == "second" and f.index in extra.clients:
            listed = extra.clients[f.index].release(f.name, f.version)
        entry = next((x for x in listed if x.filename == f.filename and x.sha256 == f.sha256), None)
        if entry is not None and entry.metadata_sha256 is not None:
            w = Wanted(entry.metadata_url, entry.metadata_sha256, None, f"the metadata of {f.filename}")
            with open_verified(self.fetcher, w) as fh:
                return fsio.bounded_read(fh, MAX_METADATA_BYTES, what=w.label, error=IntegrityError)
        kept = self.cache.metadata(f.sha256)  # taken out when the wheel entered the cache: the wheel unopened
        if kept is None and self.cache.lookup(f.sha256, f.size, hashed=False) is None:
            self.fetcher.download(Wanted(f.url, f.sha256, f.size, f.filename))  # hashed as it came; keeps it
            kept = self.cache.metadata(f.sha256)
        if kept is not None:
            return kept
        with open_verified(self.fetcher, Wanted(f.url, f.sha256, f.size, f.filename)) as fh:  # cached before
            data = wheel_metadata(fh, f.filename)
        self.cache.keep_metadata(f.sha256, data)
        return data

    def _build_closure(
        self, files: Sequence[LockedFile], build: Build, as_of: dt.datetime, extra: ExtraIndexes, pool: Executor
    ) -> tuple[tuple[LockedFile, ...], tuple[tuple[str, tuple[str, ...]], ...]]:
        """The lock's sdists' build requirements (read from each sdist, never run), resolved at the same
        cut-off for the same target, wheels only, with hashes: what the node builds them from."""
        per: list[tuple[str, tuple[str, ...]]] = []
        for f in sorted((f for f in files if f.kind == "sdist"), key=lambda f: f.filename):
            with open_verified(self.fetcher, Wanted(f.url, f.sha256, f.size, f.filename)) as fh:
                per.append((f.filename, build_requires(fh, f.filename)))
        wanted = sorted({r for _, reqs in per for r in reqs})
        if not wanted:
            return (), tuple(per)
        self.progress.phase(f"{build.id}: resolving the build dependencies of {len(per)} sdist(s)")
        try:
            return self._resolve(wanted, build, as_of, extra, {}, pool)[1], tuple(per)
        except ResolveError as exc:
            shown = "; ".join(f"{sdist} needs {', '.join(reqs)}" for sdist, reqs in per if reqs)
            raise ResolveError(
                f"cannot lock the build dependencies of the sdists ({shown}) as of {iso(as_of)}: {exc.message}",
                tip="The node builds an sdist only from hashed build dependencies bundled with it. Require a "
                "version of the package that publishes a wheel for this target, or make its build "
                "dependencies available as wheels on the index by the cut-off.",
            ) from None

    def _prebuild(
        self,
        files: Sequence[LockedFile],
        build: Build,
        as_of: dt.datetime,
        deps: Sequence[LockedFile],
        requires: Sequence[tuple[str, tuple[str, ...]]],
        warnings: list[str],
    ) -> list[Prebuilt]:
        """Each sdist built here, from its hashed closure only, when the wheel runs on the node."""
        out: list[Prebuilt] = []
        lock_text = build_lock_text(deps, requires)
        for f in sorted((f for f in files if f.kind == "sdist"), key=lambda f: f.filename):
            self.progress.phase(f"{build.id}: building {f.filename} without network from its hashed build closure")
            opened = [open_verified(self.fetcher, Wanted(d.url, d.sha256, d.size, d.filename)) for d in deps]
            try:
                with open_verified(self.fetcher, Wanted(f.url, f.sha256, f.size, f.filename)) as sdist:
                    got, why = prebuild(
                        sdist=sdist,
                        sdist_name=f.filename,
                        project=f.name,
                        version=f.version,
                        deps=[(d.filename, fh) for d, fh in zip(deps, opened, strict=True)],
                        lock_text=lock_text,
                        target=build.target,
                        as_of=as_of,
                        cache=self.cache,
                        inherit=dict(self.settings.child_environ),
                    )
            finally:
                for fh in opened:
                    fh.close()
            if got is None:
                warnings.append(f"{f.filename} was not built on the builder: {why}; the node builds it")
            else:
                out.append(got)
        return out

    def _files(
        self,
        pins: Sequence[Pin],
        build: Build,
        direct: dict[str, Candidate],
        as_of: dt.datetime,
        extra: ExtraIndexes,
        pool: Executor,
        ahead: Lookahead[tuple[IndexFile, ...]] | None = None,
    ) -> tuple[LockedFile, ...]:
        primary = self.primary

        def release(pin: Pin) -> tuple[IndexFile, ...]:
            early = ahead.take(pin.name, pin.version) if ahead is not None else None
            if early is not None and not early.cancel():  # started (or done): its answer, or its error
                return early.result()
            return primary.release(pin.name, pin.version)  # here, not queued behind this worker

        def one(pin: Pin) -> LockedFile:
            pinned = build.pinned_sha256(pin.name)
            if pin.url is not None or pin.name in direct:
                cand = direct.get(pin.name)
                if cand is None:
                    raise ResolveError(f"the lock takes {pin.name} from a URL ({pin.url}) the recipe does not name.")
                version = pin.version or _wheel_version(cand.filename)
                return choose_file(Pin(pin.name, version, pin.hashes), [cand], build.target, origin="direct")
            served = build.index_for(pin.name)
            if served is not None:  # from its own index only; the == pin holds it (and the cut-off, if timed)
                files = index_candidates(extra.clients[served.name].release(pin.name, pin.version))
                cut = package_cut_off(build, pin.name, as_of) if pin.name in extra.timed else None
                return choose_file(
                    pin,
                    files,
                    build.target,
                    origin="second",
                    as_of=cut,
                    pinned_sha256=pinned,
                    one_file=True,
                    index=served.name,
                )
            files = index_candidates(release(pin))
            cut = package_cut_off(build, pin.name, as_of)
            return choose_file(pin, files, build.target, origin="primary", as_of=cut, pinned_sha256=pinned)

        locked = tuple(pool.map(one, pins))
        check_names_on_one_index(locked, build, extra, pool, index_url=self.index_url)
        return locked


def _wheel_version(filename: str) -> str:
    return str(parse_wheel_filename(filename)[1])
