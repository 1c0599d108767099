"""The node chooses its build: the I/O around the pure rule :func:`lockbuild.choice.ranking.choose`.

Each candidate (a store's builds of ENGINE, or a folder's bundles, offered by a :class:`Place`) goes through
the one trust decision *before* it is judged, so the GPU table and ``serves`` a choice rests on are signed;
a refused one is listed with its reason and never chosen. The installer knows no store and no folder layout."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from lockbuild.choice.candidates import Choice, Option
from lockbuild.choice.ranking import choose, newest_first
from lockbuild.errors import InstallError, LockbuildError
from lockbuild.install.node import Node, free_bytes
from lockbuild.install.nodecheck import Facts, GpuCheck, Needs
from lockbuild.text import one_line
from lockbuild.trust import TrustedBundle, TrustStore, open_source
from lockbuild.trust.source import Source


@dataclass(frozen=True)
class Offered:
    """A candidate as its place offers it, before the trust decision: the source, and either the build
    its place names it (``name``: a store's ENGINE, VERSION, VARIANT, listed under that name if refused)
    or the file it is (``file``: a folder's bundle, which claims nothing until its signatures are met)."""

    source: Source
    name: tuple[str, str, str] | None = None
    file: str = ""


class Place(Protocol):
    """Where a choice's candidates come from: a store's builds, a folder's bundles. Entered (a ``with``)
    around the whole choice, so the chosen build's source stays readable until it is installed."""

    @property
    def path(self) -> Path:
        """The store or the folder, as the user named it."""
        ...

    @property
    def engine(self) -> str | None:
        """The engine asked for (``ENGINE[/VERSION] --store``); None: the one engine the place's signed
        candidates are builds of (a folder)."""
        ...

    @property
    def version(self) -> str | None:
        """The version asked for; None: the newest that has a fitting build."""
        ...

    def __enter__(self) -> Place: ...

    def __exit__(self, *exc: object) -> None: ...

    def engines(self) -> list[str]:
        """The engines the place names builds of (by name only: each build is judged when offered)."""
        ...

    def offers(self, engine: str | None) -> tuple[list[Offered], list[str]]:
        """The candidates (of ``engine``, where the place names builds) and, for the rest of what it
        holds, why each is no candidate (a delta in a folder)."""
        ...


@dataclass(frozen=True)
class OpenedOption:
    option: Option
    opened: TrustedBundle | None  # None: its signatures do not meet the policy


def facts_for(node: Node, options: Sequence[Option], root: Path) -> Facts:
    """The facts a choice is made on: the node's, with every candidate's Python counted as present (the
    installer finds the interpreter afterwards: the bundle's own, or the node's) and the root's free space."""
    probe = next((p for p in (root, *root.parents) if p.exists()), Path("/"))
    return Facts(node, frozenset(o.needs.python for o in options), free_bytes(probe))


def node_json(node: Node) -> dict[str, Any]:
    """The GPU facts a choice rests on, marked as stated (LOCKBUILD_GPU_FACTS) or detected."""
    return {
        "driver": node.driver,
        "gpus": [{"name": g.name, "capability": "{}.{}".format(*g.capability)} for g in node.gpus],
        "facts": "stated" if node.stated else "detected",
        "facts_file": node.stated,
    }


def node_line(node: Node) -> str:
    gpus = ", ".join(f"{g.name} ({g.capability[0]}.{g.capability[1]})" for g in node.gpus) or "none"
    how = f"stated in {node.stated}, not detected" if node.stated else "detected"
    return f"node: driver {node.driver or 'none'}; GPUs: {gpus} ({how})"


def _option(opened: TrustedBundle, source: str = "") -> Option:
    """A candidate from what is signed only: the manifest's needs and what the counted statement says."""
    m = opened.manifest
    newness = (opened.statement.serial, int(m.as_of.timestamp()))
    return Option(m.engine, m.version, m.variant, Needs.of(m), m.install.serves, newness=newness, source=source)


def _judge(source: Source, trust: TrustStore, threshold: int | None, name: tuple[str, str, str]) -> OpenedOption:
    """A store's build through the trust decision; refused, it is listed under its store name and never
    judged on what it claims."""
    try:
        opened = open_source(source, trust, threshold=threshold)
    except LockbuildError as exc:
        unverified = Needs("", "", None, 0)
        return OpenedOption(
            Option(*name, unverified, problem=f"not judged: its signatures are refused ({exc.message})"), None
        )
    return OpenedOption(_option(opened), opened)


def candidates(
    place: Place, engine: str | None, trust: TrustStore, threshold: int | None
) -> tuple[list[OpenedOption], list[str]]:
    """Every candidate ``place`` offers, each opened through the one trust decision before anything of it
    is judged. A build the place names is listed under that name when refused; a file that fails the
    decision is listed by its file name with the reason, and counts for nothing (files are ordered by their
    signed file names)."""
    offered, skipped = place.offers(engine)
    out: list[OpenedOption] = []
    files: list[OpenedOption] = []
    for o in offered:
        if o.name is not None:
            out.append(_judge(o.source, trust, threshold, o.name))
            continue
        try:
            opened = open_source(o.source, trust, threshold=threshold)
        except LockbuildError as exc:
            skipped.append(f"{o.file}: not judged: its signatures are refused ({exc.message})")
            continue
        files.append(OpenedOption(_option(opened, o.file), opened))
    files.sort(key=lambda c: c.opened.statement.file if c.opened else "")
    return out + files, skipped


def _one_engine(cands: Sequence[OpenedOption], where: str, skipped: Sequence[str] = ()) -> str:
    """The one engine the signed candidates are builds of (a refused file claims nothing)."""
    engines = sorted({c.option.engine for c in cands if c.opened is not None})
    if not engines:
        found = f"; skipped {'; '.join(one_line(s) for s in skipped)}" if skipped else ""
        raise InstallError(
            f"{where} holds no bundle to choose from: expected signed .lbz files with their "
            f".minisig, whose signatures meet the policy{found}.",
            tip="Copy the bundles and their .minisig files into the folder.",
        )
    if len(engines) > 1:
        raise InstallError(
            f"{where} holds signed bundles of several engines ({', '.join(engines)}); expected one, "
            "so that the choice is between builds of one engine.",
            tip="Give a folder with one engine's bundles, or import them into a store and run "
            "`lockbuild install ENGINE --store DIR`.",
        )
    return engines[0]


@dataclass(frozen=True)
class Chosen:
    choice: Choice
    opened: TrustedBundle | None
    node: Node
    skipped: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {**self.choice.to_json(), "node": node_json(self.node), "skipped": list(self.skipped)}

    def lines(self, *, fix: bool = True) -> list[str]:
        """The text: one line each (a file name or a reason that quotes one never starts a line of its own)."""
        return [
            self.choice.head(),
            one_line("  " + node_line(self.node)),
            *self.choice.passed_over(fix=fix),
            *(one_line(f"  skipped {s}") for s in self.skipped),
        ]


@contextlib.contextmanager
def chosen(
    place: Place,
    *,
    trust: TrustStore,
    threshold: int | None,
    node: Node,
    root: Path,
    allow_cpu: bool = False,
    gpu_check: GpuCheck = "auto",
) -> Iterator[Chosen]:
    """Gather the candidates ``place`` offers, open each through the trust decision, and choose. The
    chosen build's opening stays usable (its place open) inside the ``with``."""
    with place:
        cands, skipped = candidates(place, place.engine, trust, threshold)
        engine = place.engine or _one_engine(cands, f"the folder {place.path}", skipped)
        options = [c.option for c in cands]
        choice = choose(
            engine, place.version, options, facts_for(node, options, root), allow_cpu=allow_cpu, gpu_check=gpu_check
        )
        opened = next((c.opened for c in cands if c.option is choice.chosen), None)
        yield Chosen(choice, opened, node, tuple(skipped))


def refusal(result: Chosen) -> InstallError:
    c = result.choice
    lines = result.lines(fix=False)
    lines[0] += "; nothing was placed"
    return InstallError("\n".join(lines), tip=c.fix[:1].upper() + c.fix[1:] + "." if c.fix else None)


def store_choices(
    place: Place, *, trust: TrustStore, node: Node, root: Path, threshold: int | None = None
) -> list[dict[str, Any]]:
    """doctor --store: for each engine and version in the store, the build this node would take (or why
    none fits), from the same candidates and rule as ``install ENGINE/VERSION --store``."""
    out: list[dict[str, Any]] = []
    with place:
        for engine in place.engines():
            cands, _ = candidates(place, engine, trust, threshold)
            options = [c.option for c in cands]
            facts = facts_for(node, options, root)
            for version in newest_first({o.version for o in options if o.problem is None}):
                choice = choose(engine, version, options, facts)
                out.append({"engine": engine, "version": version, **choice.to_json()})
    return out
