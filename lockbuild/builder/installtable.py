"""What a bundle tells the node: the manifest's [install] table, from the recipe, and for lockbuild's own
bundle the signed ``bootstrap.sh`` and ``SHA256SUMS`` that install it with stock tools."""

from __future__ import annotations

import hashlib
from pathlib import PurePosixPath

from lockbuild.builder.plan import Plan
from lockbuild.builder.selfwheel import make_self_wheel
from lockbuild.bundle import bootstrap
from lockbuild.bundle.instructions import (
    AssetPlace,
    ExtraPlace,
    GpuNeeds,
    InstallTable,
    SourcePlace,
    extra_file_member,
)
from lockbuild.bundle.manifest import Member, bundle_name
from lockbuild.bundle.paths import env_reserved
from lockbuild.bundle.write import Entry
from lockbuild.errors import IntegrityError, RecipeError


def bootstrap_entries(plan: Plan, members: list[Member]) -> list[Entry]:
    """``bootstrap.sh`` and ``SHA256SUMS`` (every other member but the manifest, by its sha256).

    The script's template is read out of lockbuild's own wheel, made again here from the same files: it is
    the wheel the lock pins (the same sha256), or the build stops. So the signed script comes from the
    commit the wheel comes from, never from the work tree the running lockbuild was loaded from."""
    b = plan.build
    by_kind = {m.kind: m.path for m in members}
    wheel = make_self_wheel(plan.as_of)
    pinned = next((m.sha256 for m in members if m.path == f"wheels/{wheel.filename}"), None)
    if pinned != wheel.sha256:
        raise IntegrityError(
            f"lockbuild's own wheel, made again from {wheel.made_from}, has sha256 {wheel.sha256}; the lock pins "
            f"{pinned}. The checkout changed while the bundle was built (a commit, a checkout).",
            tip="Build again once the checkout stays on one commit.",
        )
    text = bootstrap.script(
        wheel.read(bootstrap.TEMPLATE),
        version=b.version,
        python=b.python,
        interpreter=by_kind.get("interpreter"),
        uv_wheel=by_kind["tool"],
        bundle=bundle_name(plan.recipe.engine.name, b.version, b.variant, b.platform),
    )
    run = Member(bootstrap.SCRIPT, len(text), hashlib.sha256(text).hexdigest(), bootstrap.KIND, "")
    listed = bootstrap.sums([(m.path, m.sha256) for m in (*members, run)])
    sums = Member(bootstrap.SUMS, len(listed), hashlib.sha256(listed).hexdigest(), bootstrap.KIND, "")
    return [Entry(run, text), Entry(sums, listed)]


def install_table(plan: Plan, members: list[Member]) -> InstallTable:
    """The manifest's [install] table from the recipe: the node's only instructions."""
    engine, b = plan.recipe.engine, plan.build
    by_kind = {m.kind: m.path for m in members}
    tools = [m.path for m in members if m.kind == "tool"]
    if len(tools) != 1:
        raise RecipeError(f"internal: the plan carries {len(tools)} uv wheels; expected exactly one.")
    if not any(m.kind == "wheel" for m in members) and not any(m.kind == "sdist" for m in members):
        raise RecipeError(
            f"{plan.recipe.path}: the lock of {b.id} holds no package at all; there is nothing to install.",
            tip="Check the build's requirements.",
        )
    source = None
    if b.source is not None:
        member = f"source/{PurePosixPath(b.source.url).name}"
        source = SourcePlace(member, b.source.dir, b.source.top or "")
    assets = []
    if b.assets is not None:
        for name in b.assets.files:
            clash = env_reserved(f"{b.assets.dir}/{name}")
            if clash:
                raise RecipeError(
                    f"{plan.recipe.path}: builds[{b.position}].assets would place {name} in {b.assets.dir}/, "
                    f"where {clash}.",
                    tip="Choose another assets.dir (for example the engine's name).",
                )
            assets.append(AssetPlace(f"assets/{name}", b.assets.dir))
    gpu = None
    if b.gpu is not None:
        gpu = GpuNeeds(b.gpu.min_capability, b.gpu.min_driver, b.gpu.max_capability, plan.gpu_fit)
    return InstallTable(
        binary=engine.binary,
        verify=engine.verify,
        gpu_probe=engine.gpu_probe,
        uv=tools[0],
        gpu=gpu,
        free_gb=b.free_gb or 0,
        source=source,
        assets=tuple(assets),
        interpreter=by_kind.get("interpreter"),
        requirements=tuple(b.requirements),
        env=engine.env,
        smoke=engine.smoke,
        gpu_smoke=engine.gpu_smoke,
        allow_network=engine.allow_network,
        serves=b.serves,
        extra_files=tuple(ExtraPlace(extra_file_member(x.dest), x.dest) for x in b.extra_files),
    )
