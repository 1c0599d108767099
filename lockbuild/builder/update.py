"""``recipe update``: the builds of a new engine release, made from the recipe's newest builds and locked.

Each build of the recipe's newest version is a template (``recipe/edit.py`` moves its pins); each new build
is locked, at the lowest manylinux level its packages have wheels for, before anything is written.
"""

from __future__ import annotations

import datetime as dt
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import tomlkit
from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import Version

from lockbuild.builder.plan import Plan, Planner
from lockbuild.bundle.firstuse import follows
from lockbuild.documents import JSON
from lockbuild.errors import LockbuildError, RemoteError, ResolveError
from lockbuild.fetch.extraindex import index_label
from lockbuild.fetch.index import Index
from lockbuild.recipe import Build, Recipe, ReleaseWheel, parse_recipe
from lockbuild.recipe.edit import Pins, build_table, cuda_level, moved_requirements, template_tables, variant_name
from lockbuild.target import ARCHES, parse_platform
from lockbuild.times import iso

MAX_RAISES = 6  # manylinux levels tried above the template's, per build
MAX_OLDER = 8  # older releases tried for "the newest that can be resolved"
COMMENT_WIDTH = 110  # the new build's comment lines, "# " aside


@dataclass(frozen=True)
class Made:
    id: str
    platform: str
    notes: tuple[str, ...]
    table: tomlkit.items.Table
    comment: tuple[str, ...]
    plan: Plan


@dataclass(frozen=True)
class Update:
    version: str
    text: str  # the recipe with the new builds (the old text when none was made)
    made: tuple[Made, ...]
    skipped: tuple[str, ...]

    def to_json(self) -> dict[str, JSON]:
        return {
            "version": self.version,
            "added": [{"build": m.id, "platform": m.platform, "notes": list(m.notes)} for m in self.made],
            "skipped": list(self.skipped),
        }


def final_releases(index: Index, project: str) -> list[str]:
    """The project's final releases on the index (no pre-, dev- or yanked-only releases), newest first."""
    found: set[Version] = set()
    for f in index.files(project):
        if f.yanked:
            continue
        try:
            v = parse_wheel_filename(f.filename)[1] if f.is_wheel else parse_sdist_filename(f.filename)[1]
        except (InvalidWheelFilename, InvalidSdistFilename):
            continue
        if not (v.is_prerelease or v.is_devrelease):
            found.add(v)
    return [str(v) for v in sorted(found, reverse=True)]


def release_arches(index: Index, project: str, version: str) -> list[str]:
    """The architectures the release's own wheels are built for (empty for a pure-Python release)."""
    arches: set[str] = set()
    for f in index.release(project, version):
        try:
            tags = parse_wheel_filename(f.filename)[3] if f.is_wheel else frozenset()
        except InvalidWheelFilename:
            continue
        arches |= {a for t in tags for a in ARCHES if "linux" in t.platform and t.platform.endswith(a)}
    return [a for a in ARCHES if a in arches]


def _relabelled(url: str, relabel: dict[str, str]) -> str:
    """An extra index's URL with its CUDA level moved (https://flashinfer.ai/whl/cu128 -> .../cu130)."""
    return "/".join(relabel.get(part, part) for part in url.split("/"))


def _indexes_kept(value: object, kept: set[str], relabel: dict[str, str]) -> JSON:
    """The template's ``index`` or ``indexes`` for the new build: an index none of whose packages the
    build still names is left out (None when none is left), the CUDA level in a URL moved."""
    entries = value if isinstance(value, list) else [value]
    out: list[JSON] = []
    for e in entries:
        if isinstance(e, dict) and any(canonicalize_name(str(p)) in kept for p in e.get("packages", [])):
            out.append({**e, "url": _relabelled(str(e.get("url", "")), relabel)})
    if not out:
        return None
    return out if isinstance(value, list) else out[0]


MeasureGpu = Callable[[Plan], tuple[dict[str, JSON] | None, str]]  # the gpu table (None: none), and how


class Updater:
    """Makes the builds of one release from a recipe's templates; writes nothing."""

    def __init__(self, recipe: Recipe, planner: Planner, *, measure_gpu: MeasureGpu, today: dt.date) -> None:
        self.recipe = recipe
        self.planner = planner
        self.measure_gpu = measure_gpu
        self.today = today
        self.tables = template_tables(recipe.text)

    def templates(self) -> list[Build]:
        def key(b: Build) -> Version:
            return Version(b.version)

        newest = max(self.recipe.builds, key=key).version
        return [b for b in self.recipe.builds if b.version == newest]

    def _lock(self, fields: dict[str, JSON], template: Build, drop: Sequence[str] = ()) -> tuple[Plan, Build]:
        base = {k: v for k, v in self.tables[template.position].items() if k not in drop}
        table = build_table(base, fields)
        text = tomlkit.dumps({"engine": tomlkit.parse(self.recipe.text)["engine"], "builds": [table]})
        r = parse_recipe(text, self.recipe.path)
        return self.planner.plan(r, r.builds[0]), r.builds[0]

    def make(self, version: str, platforms: Sequence[str]) -> Update:
        pypi = self.recipe.engine.pypi
        if not self.planner.primary.release(pypi, version):
            raise RemoteError(
                f"{self.planner.primary.name} ({self.planner.index_url}) has no release {pypi}=={version}.",
                tip="Check the version (`recipe update` without --version takes the newest final release).",
            )
        arches = release_arches(self.planner.primary, pypi, version)
        made: list[Made] = []
        skipped: list[str] = []
        taken = {b.id for b in self.recipe.builds}
        first = True
        for t in self.templates():
            family = t.platform.split("-", 1)[1]
            wanted = list(platforms) or [f"{a}-{family}" for a in arches] or [t.platform]
            for platform in wanted:
                try:
                    m = self._one(t, version, platform, taken)
                except ResolveError as exc:
                    if first and exc.platform is None and not exc.needs_wheel:
                        raise self._unresolvable(t, version, platform, exc) from None
                    skipped.append(f"{t.id} on {platform}: {exc.message.splitlines()[0]}")
                    continue
                except LockbuildError as exc:
                    skipped.append(f"{t.id} on {platform}: {exc.message.splitlines()[0]}")
                    continue
                finally:
                    first = False
                if isinstance(m, str):
                    skipped.append(f"{t.id} on {platform}: {m}")
                    continue
                taken.add(m.id)
                made.append(m)
        from lockbuild.recipe.edit import with_builds

        text = with_builds(self.recipe.text, [(m.comment, m.table) for m in made]) if made else self.recipe.text
        if made:
            parse_recipe(text, self.recipe.path)  # the whole recipe still reads
        return Update(version, text, tuple(made), tuple(skipped))

    def _unresolvable(self, t: Build, version: str, platform: str, exc: ResolveError) -> ResolveError:
        pypi = self.recipe.engine.pypi
        older = [
            v for v in final_releases(self.planner.primary, pypi) if Version(t.version) <= Version(v) < Version(version)
        ][:MAX_OLDER]  # down to the templates' own release
        found = None
        for v in older:
            try:
                self._one(t, v, platform, set(), only_primary=True)
            except LockbuildError:
                continue
            found = v
            break
        newest = (
            f"{found} is the newest that can" + (" (the recipe has its builds)" if found == t.version else "")
            if found is not None
            else f"none of the {len(older)} releases from {t.version} to {version} can either"
        )
        if found is not None and found != t.version:
            tip = f"Run `lockbuild recipe update {self.recipe.path} --version {found}`."
        else:
            tip = "Wait for the release's dependencies to be published; the recipe's builds stay as they are."
        return ResolveError(
            f"{pypi} {version} cannot be resolved from this index ({platform}); {newest}. uv's reason:\n"
            + "\n".join(exc.message.splitlines()[1:]),
            tip=tip,
        )

    def _one(
        self,
        t: Build,
        version: str,
        platform: str,
        taken: set[str],
        *,
        only_primary: bool = False,
    ) -> Made | str:
        """The build of ``version`` from template ``t`` on ``platform`` (raised as its packages need), locked;
        or why it was skipped."""
        if t.source is not None or t.assets is not None:
            return f"its source archive or release assets belong to {t.version}; add the build by hand"
        fields: dict[str, JSON] = {"version": version, "variant": t.variant, "platform": platform}
        serves = [v for v in t.serves if Version(v) > Version(version)]  # the newer releases it still serves
        fields["serves"] = serves if serves else None
        if isinstance(t.wheel, ReleaseWheel):
            w = t.wheel
            fields["wheel"] = {
                "repo": w.repo,
                "tag": w.tag.replace(t.version, version),
                "prefix": w.prefix.replace(t.version, version),
                "suffix": w.suffix,
                "project": w.project,
            }
        elif t.wheel is not None:
            return f"its wheel is pinned by URL and sha256 to {t.version}; add the build by hand"
        follow_map = {
            str(n): f for n in (canonicalize_name(r.split("=")[0]) for r in t.requirements) if (f := follows(n))
        }
        pins = moved_requirements(t, self.recipe.engine.pypi, version, follow_map)
        notes: list[str] = []
        drop = ("index", "indexes", "primary-packages")
        fields["requirements"] = list(pins.primary)
        plan, _ = self._raising(fields, t, notes, drop)
        if only_primary:
            return "only the primary resolution was asked for"
        locked = {f.name: f.version for f in plan.lock.files}
        requirements = list(pins.primary)
        relabel: dict[str, str] = {}
        requirements += self._followers(t, pins, locked, notes, relabel)
        second = self._second(t, pins, locked)
        if isinstance(second, str):
            return second
        requirements += second
        kept = {str(canonicalize_name(r.split("=")[0])) for r in requirements}
        for key in ("index", "indexes"):
            if key in self.tables[t.position]:
                fields[key] = _indexes_kept(self.tables[t.position][key], kept, relabel)
        if all(fields.get(k) is None for k in ("index", "indexes")):
            fields["primary-packages"] = None  # it names extra indexes' packages: no extra index is left
        if requirements != list(pins.primary):
            fields["requirements"] = requirements
            plan, _ = self._raising(fields, t, notes, ())
        arch = parse_platform(str(fields["platform"])).arch
        level = cuda_level([(f.name, f.version) for f in plan.lock.files])
        fields["variant"] = variant_name(t, level, arch)
        bid = f"{version}-{fields['variant']}"
        if bid in taken:
            return f"the recipe already has a build {bid}"
        if level is not None:
            runtime = next(f for f in plan.lock.files if f.name.startswith("nvidia-cuda-runtime"))
            notes.append(f"variant {fields['variant']}: CUDA level from {runtime.name} {runtime.version}")
        gpu = self.measure_gpu(plan)
        comment = [
            f"{self.recipe.engine.name} {version} ({fields['platform']}), made from the {t.id} build by",
            f"`lockbuild recipe update --version {version}` on {self.today.isoformat()}; locked as of "
            f"{iso(plan.as_of)}: {len(plan.lock.files)} packages.",
            *(
                line
                for n in notes
                for line in textwrap.wrap(f"- {n}", COMMENT_WIDTH, subsequent_indent="  ", break_on_hyphens=False)
            ),
        ]
        fields["gpu"], measured = gpu
        comment += textwrap.wrap(f"- gpu: {measured}", COMMENT_WIDTH, subsequent_indent="  ", break_on_hyphens=False)
        table = build_table(self.tables[t.position], fields)
        return Made(bid, str(fields["platform"]), tuple(notes), table, tuple(comment), plan)

    def _raising(self, fields: dict[str, JSON], t: Build, notes: list[str], drop: Sequence[str]) -> tuple[Plan, Build]:
        """Locked, the platform raised to the manylinux level a package needs, each time naming it."""
        for _ in range(MAX_RAISES):
            try:
                return self._lock(fields, t, drop)
            except ResolveError as exc:
                if exc.platform is None or exc.platform == fields["platform"]:
                    raise
                notes.append(f"platform {exc.platform}: {exc.forced_by} has no older wheel")
                fields["platform"] = exc.platform
        return self._lock(fields, t, drop)

    def _followers(
        self, t: Build, pins: Pins, locked: dict[str, str], notes: list[str], relabel: dict[str, str]
    ) -> list[str]:
        """The followers pinned to their leader's locked version (flashinfer-cubin to flashinfer-python's),
        a CUDA label moved to the lock's level; one that cannot be had is left out, with a note."""
        out = []
        level = cuda_level(list(locked.items()))
        for name in pins.followers:
            leader = follows(name)
            version = locked.get(leader or "")
            if version is None:
                notes.append(f"{name} left out: the lock has no {leader}")
                continue
            label = next(
                (req.partition("+")[2] for req in t.requirements if canonicalize_name(req.split("=")[0]) == name), ""
            )
            if label.startswith("cu") and level is not None and label != level:
                relabel[label] = level
                label = level
            want = f"{version}+{label}" if label else version
            ix = t.index_for(name)
            url = "" if ix is None else _relabelled(ix.url, relabel)
            index = self.planner.primary if ix is None else Index(url, self.planner.client, name=index_label(ix))
            try:
                there = index.matching(name, want)
            except LockbuildError as exc:
                notes.append(
                    f"{name} left out: {exc.message.splitlines()[0]} (it must equal {leader} {version}); the lock "
                    "names it as a first-use download"
                )
                continue
            if not there:
                notes.append(
                    f"{name} left out: {index.name} has no {name} {want} (it must equal {leader} {version}); "
                    "the lock names it as a first-use download"
                )
                continue
            out.append(f"{name}=={want}")
        return out

    def _second(self, t: Build, pins: Pins, locked: dict[str, str]) -> list[str] | str:
        out = []
        for name, label in pins.second:
            ix = t.index_for(name)
            if ix is None:  # moved_requirements puts only an extra index's packages here
                continue
            version = locked.get(name)
            if version is None:
                return f"{name} is pinned on {index_label(ix)} but the new release does not take it"
            want = f"{version.partition('+')[0]}+{label}" if label else version
            try:
                there = Index(ix.url, self.planner.client, name=index_label(ix)).matching(name, want)
            except LockbuildError as exc:
                return f"{index_label(ix)} cannot be read from here ({exc.message.splitlines()[0]})"
            if not there:
                return f"{index_label(ix)} has no {name} {want}"
            out.append(f"{name}=={want}")
        return out
