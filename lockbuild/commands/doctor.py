"""The node's doctor: what this node has, what is installed, and which catalogue builds fit it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import click

from lockbuild.commands.clikit import Command, emit, json_option, root_option, setup_output, trust_option
from lockbuild.errors import LockbuildError

if TYPE_CHECKING:
    from lockbuild.install.survey import CatalogueBuild


@click.command(cls=Command, epilog="Example: lockbuild doctor --root /opt/engines --catalogue bundles/ --json")
@root_option
@click.option(
    "--catalogue",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Directory of recipes (*.toml) and bundles (*.lbz) to check against this node (default: ./bundles "
    "when it exists; otherwise no catalogue is checked).",
)
@click.option(
    "--store",
    "store_dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="A site store: for each engine and version in it, the build this node would take, or why none fits.",
)
@trust_option
@json_option
@click.pass_context
def doctor(
    ctx: click.Context,
    root: Path,
    catalogue: Path | None,
    trust_dir: Path | None,
    as_json: bool,
    store_dir: Path | None = None,
) -> None:
    """Report what this node has: NVIDIA driver and GPUs, Pythons, free space, trusted keys, installed
    engines, and which catalogue builds fit it (and why the others don't); with --store, the build it
    would take of each engine and version in the store."""
    setup_output(ctx, as_json)
    from lockbuild.install.survey import examine, render
    from lockbuild.trust import trust_dir as resolve_trust_dir

    chosen: Path | None = catalogue if catalogue is not None else DEFAULT_CATALOGUE
    how = "--catalogue" if catalogue is not None else "default"
    if catalogue is None and not DEFAULT_CATALOGUE.is_dir():
        chosen, how = None, "none"
    trust = resolve_trust_dir(trust_dir)
    candidates, problems = _catalogue(chosen, trust) if chosen is not None else ([], [])
    from lockbuild.install.node import detect
    from lockbuild.site.sources import StoreOffers  # the store's builds, fed to the installer's choice

    report = examine(
        root,
        candidates=candidates,
        problems=problems,
        trust=trust,
        store=StoreOffers(store_dir) if store_dir is not None else None,
        node=detect(environ=os.environ),
    )
    where = str(chosen.absolute()) if chosen is not None else None
    report["catalogue_dir"] = {"path": where, "from": how}
    said = {
        "--catalogue": f"{where} (--catalogue)",
        "default": f"{where} (the default, ./bundles)",
        "none": f"not checked: no --catalogue, and no ./bundles in {Path.cwd()}",
    }[how]
    emit(ctx, report, render(report) + f"\ncatalogue   {said}")


DEFAULT_CATALOGUE = Path("bundles")  # relative to the current directory: a checkout's recipes


def _catalogue(directory: Path, trust: Path) -> tuple[list[CatalogueBuild], list[str]]:
    """Doctor's candidates: each build of each recipe, and each bundle's signed needs, read only once its
    signatures met the trust policy (a bundle they do not meet is a problem, named by its file name)."""
    from lockbuild.bundle.instructions import GpuNeeds
    from lockbuild.choice.choose import candidates
    from lockbuild.install.nodecheck import Needs, space_needed
    from lockbuild.install.survey import CatalogueBuild
    from lockbuild.recipe import load_recipe
    from lockbuild.recipe.modelrecipe import is_model_recipe_file

    if not directory.is_dir():
        return [], [f"no catalogue directory {directory.absolute()}; pass --catalogue DIR"]
    out: list[CatalogueBuild] = []
    problems: list[str] = []
    for path in sorted(directory.glob("*.toml")):
        if is_model_recipe_file(path):  # a [model] recipe: nothing to fit
            continue
        try:
            recipe = load_recipe(path)
        except LockbuildError as exc:
            problems.append(exc.message)
            continue
        for b in recipe.builds:
            gpu = GpuNeeds(b.gpu.min_capability, b.gpu.min_driver, b.gpu.max_capability) if b.gpu else None
            needs = Needs(b.python, b.platform, gpu, space_needed(0, b.free_gb or 0))
            out.append(CatalogueBuild(path.name, recipe.engine.name, b.id, needs))
    bundles = sorted(directory.glob("*.lbz"))
    if not bundles:
        return out, problems
    from lockbuild.site.sources import FolderOffers  # the folder's bundles, fed to the one trust decision
    from lockbuild.trust import load_trust_store

    try:
        store = load_trust_store(trust)
    except LockbuildError as exc:
        problems.extend(f"{p.name}: not judged: {exc.message}" for p in bundles)
        return out, problems
    judged, skipped = candidates(FolderOffers(directory), None, store, None)
    problems.extend(skipped)
    for j in judged:
        if j.opened is None or j.opened.manifest.model is not None:  # a model bundle: no environment to fit
            continue
        m = j.opened.manifest
        out.append(CatalogueBuild(j.opened.statement.file, m.engine, f"{m.version}-{m.variant}", Needs.of(m)))
    return out, problems


COMMANDS = (doctor,)
