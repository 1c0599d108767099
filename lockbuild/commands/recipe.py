"""``lockbuild recipe update``: add the builds of a new engine release to a recipe, each locked first."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import TYPE_CHECKING

import click

from lockbuild import fsio
from lockbuild.commands.clikit import Group, emit, insecure_option, json_option, progress_of, settings_of, setup_output
from lockbuild.documents import JSON
from lockbuild.proc.uvtool import uv_binary

if TYPE_CHECKING:
    from lockbuild.builder.plan import Plan
    from lockbuild.builder.session import Session
    from lockbuild.builder.update import MeasureGpu


@click.group("recipe", cls=Group, epilog="Example: lockbuild recipe update bundles/vllm.toml --version 0.33.0")
def recipe_group() -> None:
    """Keep recipes current: add the builds of an engine's new release."""


@recipe_group.command(
    "update",
    epilog="Example: lockbuild recipe update bundles/vllm.toml --version 0.33.0 --platform x86_64-manylinux_2_28",
)
@click.argument("recipe", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--version", "version", help="The engine's release to add (default: the newest final release).")
@click.option(
    "--platform",
    "platforms",
    multiple=True,
    help="A platform to build for, e.g. aarch64-manylinux_2_28 (repeatable; default: every architecture the "
    "release publishes wheels for, at the templates' manylinux level, raised where a package needs it).",
)
@click.option("--dry-run", is_flag=True, help="Print the diff only; write nothing.")
@insecure_option
@json_option
@click.pass_context
def update(
    ctx: click.Context,
    recipe: Path,
    version: str | None,
    platforms: tuple[str, ...],
    dry_run: bool,
    allow_insecure_http: bool,
    as_json: bool,
) -> None:
    """Add the builds of release VERSION of the recipe's engine, one per template and platform.

    Each build of the recipe's newest version is a template: its Python, platform family, extra indexes
    and serves carry over; the engine's pin moves to VERSION, the other == pins of the primary index are
    dropped (left to the resolver), pins on an extra index follow the version the primary resolution takes,
    and the variant is named from the CUDA level the lock holds. Every new build is locked before anything
    is written; a release that cannot be resolved is reported with uv's reason and the newest release that
    can, and nothing is written. The recipe is edited in place, every comment and the order kept, and the
    diff is printed (--dry-run: only the diff).
    """
    setup_output(ctx, as_json)
    from lockbuild.builder.session import session
    from lockbuild.builder.update import Updater, final_releases
    from lockbuild.recipe import load_recipe
    from lockbuild.recipe.edit import diff
    from lockbuild.target import parse_platform

    for p in platforms:
        try:
            parse_platform(p)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--platform") from None
    settings = settings_of(ctx, allow_insecure_http)
    uv_binary()
    r = load_recipe(recipe)
    with session(settings, progress=progress_of(ctx)) as s:
        wanted = version or final_releases(s.planner.primary, r.engine.pypi)[0]
        today = dt.datetime.now(dt.UTC).date()
        updater = Updater(r, s.planner, measure_gpu=gpu_measurer(s, today.isoformat()), today=today)
        result = updater.make(wanted, platforms)
    changes = diff(r.text, result.text, str(recipe))
    written = bool(result.made) and not dry_run
    if written:
        fsio.write_replacing(recipe, result.text.encode("utf-8"), mode=recipe.stat().st_mode & 0o777)
    data: dict[str, JSON] = {**result.to_json(), "diff": changes, "written": written, "dry_run": dry_run}
    if dry_run:
        text = changes or f"no build of {wanted} to add"
    else:
        lines = [f"added {m.id} ({m.platform})" + "".join(f"\n  {n}" for n in m.notes) for m in result.made]
        lines += [f"skipped {s}" for s in result.skipped]
        lines.append(changes if changes else f"no build of {wanted} added; {recipe} unchanged")
        text = "\n".join(lines)
    emit(ctx, data, text)


def gpu_measurer(s: Session, today: str) -> MeasureGpu:
    """The GPU fit of each new build, measured from its binaries (gpu/fit.py): the readings the cache keeps,
    else every file fetched through the cache and read. The table and the comment that says how."""
    from lockbuild.builder.gpufit import measure_plan
    from lockbuild.gpu.vocab import capability_text

    def measure(plan: Plan) -> tuple[dict[str, JSON] | None, str]:
        measured = measure_plan(plan, s.cache)
        if measured.fit is None:
            s.fetch(plan)
            measured = measure_plan(plan, s.cache, read_missing=True)
        fit = measured.fit
        how = f"measured from the binaries on {today} by `lockbuild recipe update`"
        if fit is None or not fit.gated:
            return None, f"{how}: no GPU code it knows (no gpu table)"
        table: dict[str, JSON] = {}
        if fit.min_capability is not None:
            table["min-capability"] = capability_text(fit.min_capability)
        if fit.max_capability is not None and not fit.jit_beyond:
            table["max-capability"] = capability_text(fit.max_capability)
        if fit.min_driver is not None:
            table["min-driver"] = fit.min_driver
        return table, f"{how}: {fit.line()}"

    return measure


COMMANDS = (recipe_group,)
