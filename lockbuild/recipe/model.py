"""The recipe model: frozen records a parsed recipe is made of (no parsing, no I/O here)."""

from __future__ import annotations

import datetime as dt
import hashlib
from dataclasses import dataclass

from lockbuild.errors import RecipeError
from lockbuild.target import Target


@dataclass(frozen=True)
class Engine:
    name: str
    pypi: str
    repo: str | None
    binary: str
    verify: tuple[str, ...]
    gpu_probe: str
    env: tuple[tuple[str, str], ...] = ()  # [engine.env]: runtime settings, sorted by name
    smoke: tuple[str, ...] = ()  # the self-test's smoke command (lockbuild test)
    allow_network: tuple[str, ...] = ()  # hosts the self-test lets the engine try to reach
    gpu_smoke: tuple[str, ...] = ()  # the self-test's GPU smoke command (lockbuild test --gpu)


@dataclass(frozen=True)
class GpuRequirement:
    min_capability: tuple[int, int] | None
    min_driver: str | None
    max_capability: tuple[int, int] | None = None  # the highest capability it has kernels for
    kernels_from: tuple[str, ...] = ()  # the packages whose kernels decide the fit (canonical names)


@dataclass(frozen=True)
class SecondIndex:
    """An explicit extra index: it serves exactly the packages it names (canonical names), nothing else.

    ``index = { url, packages }`` is named "second"; each of ``indexes = [{ name, url, packages }]`` by
    its name. The lock records the name of the index that served each file."""

    url: str
    packages: tuple[str, ...]
    name: str = "second"


@dataclass(frozen=True)
class SourceArchive:
    url: str
    sha256: str
    top: str
    dir: str
    requirements: str | None


@dataclass(frozen=True)
class ReleaseWheel:
    repo: str
    tag: str
    prefix: str
    suffix: str
    project: str


@dataclass(frozen=True)
class UrlWheel:
    """A wheel from any https URL, pinned by the sha256 the recipe gives."""

    url: str
    sha256: str


@dataclass(frozen=True)
class SelfWheel:
    """``wheel = { self = true }``: lockbuild's own wheel, made by the running lockbuild from its own files
    (byte for byte the same for the same files and cut-off) and pinned in the lock by its sha256. Only a
    build of the engine ``lockbuild`` at the running lockbuild's version may take it. With
    ``sha256``, the wheel made must be exactly that file (the resolved recipe in a bundle records it)."""

    sha256: str | None = None


@dataclass(frozen=True)
class ExtraFileSpec:
    """``extra-files = [{ url, sha256, dest }]``: a file placed in the environment at ``dest``."""

    url: str
    sha256: str
    dest: str  # relative to the environment


@dataclass(frozen=True)
class Assets:
    tag: str
    dir: str
    files: tuple[str, ...]


@dataclass(frozen=True)
class Interpreter:
    """``interpreter = { tag, file }``: a python-build-standalone release asset (``repo`` may be overridden)."""

    repo: str
    tag: str
    file: str


@dataclass(frozen=True)
class Build:
    version: str
    variant: str
    target: Target
    requirements: tuple[str, ...]
    as_of: dt.datetime | None
    free_gb: int | None
    gpu: GpuRequirement | None
    index: SecondIndex | None
    source: SourceArchive | None
    wheel: ReleaseWheel | UrlWheel | SelfWheel | None
    assets: Assets | None
    position: int
    pin_sha256: tuple[tuple[str, str], ...] = ()  # (canonical project name, sha256): that exact file
    exclude_newer_package: tuple[tuple[str, str | None], ...] = ()  # (name, RFC 3339 time or None = no cut-off)
    build_on_node: tuple[str, ...] = ()  # canonical names that may come as sdists (built on the node)
    interpreter: Interpreter | None = None  # a standalone interpreter carried in the bundle
    indexes: tuple[SecondIndex, ...] = ()  # the list form, indexes = [{ name, url, packages }]
    primary_packages: tuple[str, ...] = ()  # canonical names an extra index serves too, taken from the primary
    serves: tuple[str, ...] = ()  # newer versions this build serves where none of their builds fits
    extra_files: tuple[ExtraFileSpec, ...] = ()  # files placed inside the environment

    @property
    def extra_indexes(self) -> tuple[SecondIndex, ...]:
        """Every extra index: ``index`` (if any) first, then ``indexes`` in recipe order."""
        return ((self.index,) if self.index is not None else ()) + self.indexes

    def index_for(self, project: str) -> SecondIndex | None:
        """The extra index that serves ``project`` (canonical name), or None: the primary index."""
        return next((i for i in self.extra_indexes if project in i.packages), None)

    def pinned_sha256(self, project: str) -> str | None:
        """The sha256 the recipe pins ``project`` to (canonical name), if any."""
        return dict(self.pin_sha256).get(project)

    @property
    def id(self) -> str:
        return f"{self.version}-{self.variant}"

    @property
    def python(self) -> str:
        return self.target.python

    @property
    def platform(self) -> str:
        return self.target.platform


@dataclass(frozen=True)
class Recipe:
    path: str
    engine: Engine
    builds: tuple[Build, ...]
    text: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()

    def select(self, spec: str | None) -> tuple[Build, ...]:
        """The builds named by ``--build``: ``VARIANT`` or ``VERSION-VARIANT``; all when None."""
        if spec is None:
            return self.builds
        exact = [b for b in self.builds if b.id == spec]
        if exact:
            return tuple(exact)
        by_variant = [b for b in self.builds if b.variant == spec]
        if len(by_variant) == 1:
            return tuple(by_variant)
        choices = ", ".join(b.id for b in self.builds)
        if by_variant:
            raise RecipeError(
                f"{self.path}: --build {spec} matches several builds ({', '.join(b.id for b in by_variant)}).",
                tip="Name one as VERSION-VARIANT.",
            )
        raise RecipeError(
            f"{self.path}: no build {spec!r}; this recipe has {choices}.",
            tip="Pass --build VARIANT or --build VERSION-VARIANT, or leave it out to use every build.",
        )
