"""Locking one build: cut-off, engine files, resolution, and the exact file set to fetch and bundle."""

from __future__ import annotations

import datetime as dt
import tarfile
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO

import httpx
from packaging.utils import canonicalize_version, parse_wheel_filename

from lockbuild.builder import github
from lockbuild.builder.cache import Cache
from lockbuild.builder.fetch import Fetcher, Wanted, open_verified
from lockbuild.builder.index import Index, IndexFile
from lockbuild.builder.resolve import compile_lock
from lockbuild.errors import RecipeError, ResolveError
from lockbuild.lock import Candidate, Lock, LockedFile, Pin, choose_file, parse_pylock, parse_requirements_lock
from lockbuild.progress import Progress
from lockbuild.recipe import Build, Recipe, source_requirements
from lockbuild.settings import Settings
from lockbuild.times import iso
from lockbuild.uvtool import uv_binary, uv_version

CUT_OFF_DELAY = dt.timedelta(hours=24)
MAX_REQUIREMENTS_FILE = 1 << 20


@dataclass(frozen=True)
class ExtraFile:
    """A bundled file that is not a Python distribution from the lock (source, asset, tool)."""

    path: str  # inside the bundle
    kind: str  # "source", "asset", "tool"
    url: str
    sha256: str
    size: int | None


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

    def wanted(self) -> list[Wanted]:
        # Credentials are added by the HTTP client, per host, from the settings (never per file).
        out = [Wanted(f.url, f.sha256, f.size, f.filename) for f in self.lock.files]
        out += [Wanted(e.url, e.sha256, e.size, e.path) for e in self.extras]
        return out


def cut_off(recipe: Recipe, build: Build, index: Index) -> dt.datetime:
    """``as-of`` when set, else the release's publication time plus 24 hours.

    Whole seconds (rounded down), in UTC: uv, the lock, the resolved recipe and the manifest all
    record the same instant, and nothing uploaded after the named time can slip in.
    """
    when = build.as_of or index.publication_time(recipe.engine.pypi, build.version) + CUT_OFF_DELAY
    return when.astimezone(dt.UTC).replace(microsecond=0)


def _candidates(files: Sequence[IndexFile]) -> list[Candidate]:
    return [Candidate(f.filename, f.url, f.sha256, f.size) for f in files]


def read_source_requirements(archive: Path | BinaryIO, build: Build) -> tuple[str, ...]:
    """Check the source archive's top directory and read its requirements file under the lock rules.

    ``archive`` is best an open file, the one its digest was checked on (``fetch.open_verified``)."""
    src = build.source
    assert src is not None
    where = f"{src.url} ({build.id})"
    wanted = f"{src.top}/{src.requirements}" if src.requirements else None
    saw_top = False
    text: str | None = None
    try:
        where_from = {"name": archive} if isinstance(archive, Path) else {"fileobj": archive}
        with tarfile.open(mode="r:*", **where_from) as tf:
            for member in tf:
                name = str(PurePosixPath(member.name))
                if name == src.top or name.startswith(src.top + "/"):
                    saw_top = True
                if wanted is not None and name == wanted:
                    if not member.isfile() or member.size > MAX_REQUIREMENTS_FILE:
                        raise RecipeError(f"{where}: {wanted} is not a regular file of at most 1 MiB.")
                    f = tf.extractfile(member)
                    assert f is not None
                    text = f.read().decode("utf-8", errors="strict")
    except (tarfile.TarError, OSError, UnicodeDecodeError) as exc:
        raise RecipeError(f"{where}: cannot read the source archive as a tar: {exc}") from None
    if not saw_top:
        raise RecipeError(
            f"{where}: expected a top directory {src.top!r} in the source archive, found none.",
            tip="Set source.top to the archive's top directory.",
        )
    if wanted is None:
        return ()
    if text is None:
        raise RecipeError(f"{where}: the source archive has no {wanted}.", tip="Check source.requirements.")
    skip = build.index.packages if build.index else ()
    return source_requirements(text, skip=skip, where=where)


class Planner:
    """Locks builds against a primary index (and the build's second index, when it has one)."""

    def __init__(self, client: httpx.Client, cache: Cache, fetcher: Fetcher, *, settings: Settings, progress: Progress):
        self.client = client
        self.cache = cache
        self.fetcher = fetcher
        self.settings = settings
        self.index_url = settings.index_url  # never carries credentials: they live in settings
        self.primary = Index(self.index_url, client, name="the package index")
        self.progress = progress

    def _release_assets(self, repo: str, tag: str) -> dict[str, github.ReleaseAsset]:
        s = self.settings
        return github.release_assets(self.client, repo, tag, api=s.github_api, download=s.github_download)

    def plan(self, recipe: Recipe, build: Build) -> Plan:
        engine = recipe.engine
        as_of = cut_off(recipe, build, self.primary)
        self.progress.phase(f"{engine.name} {build.id}: resolving as of {iso(as_of)}")
        requirements = list(build.requirements)
        extras: list[ExtraFile] = []
        direct: dict[str, Candidate] = {}
        if build.source is not None:
            src = build.source
            w = Wanted(src.url, src.sha256, None, f"{engine.name} {build.version} source archive")
            with open_verified(self.fetcher, w) as archive:  # read from the descriptor that was hashed
                requirements += read_source_requirements(archive, build)
            extras.append(ExtraFile(f"source/{PurePosixPath(src.url).name}", "source", src.url, src.sha256, None))
        if build.wheel is not None:
            wh = build.wheel
            assets = self._release_assets(wh.repo, wh.tag)
            asset = github.pick_wheel(assets, wh.prefix, wh.suffix, repo=wh.repo, tag=wh.tag)
            sha = asset.sha256()
            requirements.insert(0, f"{wh.project} @ {asset.url}#sha256={sha}")
            direct[wh.project] = Candidate(asset.name, asset.url, sha, asset.size)
        if build.assets is not None:
            a = build.assets
            repo = engine.repo
            if repo is None:
                raise RecipeError(f"{recipe.path}: builds with assets need engine.repo (the GitHub repository).")
            published = self._release_assets(repo, a.tag)
            for name in a.files:
                if name not in published:
                    raise ResolveError(
                        f"{repo} {a.tag} has no asset {name!r}; it has {', '.join(sorted(published)) or 'none'}."
                    )
                got = published[name]
                extras.append(ExtraFile(f"assets/{name}", "asset", got.url, got.sha256(), got.size))
        with tempfile.TemporaryDirectory(prefix="lockbuild-resolve-") as tmp:
            resolution = compile_lock(
                requirements,
                build.target,
                as_of,
                index_url=self.index_url,
                second=build.index,
                workdir=Path(tmp),
                cache_dir=self.cache.uv_cache(),
                inherit=dict(self.settings.child_environ),
                credentials=self.settings.index_credentials,
                sdists_allowed=getattr(build, "build_on_node", ()),
            )
        if resolution.format == "pylock.toml":
            pins = parse_pylock(resolution.text, build.target)
        else:
            pins = parse_requirements_lock(resolution.text)
        files = self._files(pins, build, direct)
        warnings: list[str] = []
        sdists = sorted(f.filename for f in files if f.kind == "sdist")
        if sdists:
            warnings.append(
                f"{len(sdists)} package(s) have no wheel for {build.platform} and come as sdists "
                f"({', '.join(sdists[:5])}); their build dependencies are not in the lock, so an offline "
                "install must build them with what the node has, and may fail"
            )
        uv = uv_version(uv_binary())
        tool = self._uv_tool(build, uv)
        extras.append(tool)
        lock = Lock(resolution.format, resolution.text, files, as_of)
        return Plan(
            recipe, build, as_of, lock, tuple(requirements), tuple(extras), recipe.resolved_text(build, as_of),
            uv, tuple(warnings),
        )  # fmt: skip

    def _files(self, pins: Sequence[Pin], build: Build, direct: dict[str, Candidate]) -> tuple[LockedFile, ...]:
        second = Index(build.index.url, self.client, name="the second index") if build.index else None
        second_names = set(build.index.packages) if build.index else set()

        def one(pin: Pin) -> LockedFile:
            if pin.url is not None or pin.name in direct:
                cand = direct.get(pin.name)
                if cand is None:
                    raise ResolveError(f"the lock takes {pin.name} from a URL ({pin.url}) the recipe does not name.")
                version = pin.version or _wheel_version(cand.filename)
                return choose_file(Pin(pin.name, version, pin.hashes), [cand], build.target, origin="direct")
            if pin.name in second_names:
                assert second is not None
                return choose_file(pin, _candidates(second.files(pin.name)), build.target, origin="second")
            return choose_file(pin, _candidates(self.primary.files(pin.name)), build.target, origin="primary")

        with ThreadPoolExecutor(max_workers=8) as pool:
            return tuple(pool.map(one, pins))

    def _uv_tool(self, build: Build, version: str) -> ExtraFile:
        """The uv wheel for the node's platform, at the builder's uv version, from the primary index."""
        files = [f for f in self.primary.files("uv") if f.version == canonicalize_version(version) and f.is_wheel]
        cands = _candidates(files)
        pin = Pin("uv", version, frozenset(c.sha256 for c in cands if c.sha256))
        if not pin.hashes:
            raise ResolveError(
                f"the package index has no uv {version} wheels with sha256 digests; the node needs one to install.",
                tip="Use a builder whose uv version is published on the index.",
            )
        chosen = choose_file(pin, cands, build.target, origin="primary")
        return ExtraFile(f"tools/{chosen.filename}", "tool", chosen.url, chosen.sha256, chosen.size)


def _wheel_version(filename: str) -> str:
    return str(parse_wheel_filename(filename)[1])
