"""The self-test's command, ``lockbuild test``, and what ``build --self-test`` runs after a build.

Registered on the main group by ``register`` (called at the end of ``lockbuild.cli``); parse, call
:func:`lockbuild.selftest.self_test`, render the report. A failing report is printed (or given as JSON with
``"ok": false``) and the command exits 1; a machine that cannot run the bundle exits 6.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import click

from lockbuild.commands.clikit import (
    Command,
    emit,
    json_option,
    progress_of,
    setup_output,
    threshold_option,
    trust_option,
)
from lockbuild.documents import JSON
from lockbuild.selftest import TIMEOUT
from lockbuild.text import for_terminal

if TYPE_CHECKING:  # the self-test's machinery loads when the command runs, not with every other command
    from lockbuild.selftest.report import Report


EXIT_FAILED = 1
EXIT_NOT_CHECKED = 6  # like a machine that cannot run the bundle: the self-test proves nothing here


def _show(ctx: click.Context, reports: list[Report], extra: Mapping[str, JSON] | None = None) -> None:
    """Every report; exits 1 when any failed, else 6 when any was not checked (after showing them all)."""
    data: dict[str, JSON] = {**(extra or {}), "self_test": [r.to_json() for r in reports]}
    failed = [r for r in reports if r.verdict == "failed"]
    unchecked = [r for r in reports if r.verdict == "not checked"]
    if failed:
        message, tip, kind, code = "; ".join(summary(r) for r in failed), TIP, "SelfTestFailed", EXIT_FAILED
    elif unchecked:
        message = "; ".join(f"the self-test of {r.bundle} was not checked: {r.unchecked}" for r in unchecked)
        tip, kind, code = UNCHECKED_TIP, "SelfTestNotChecked", EXIT_NOT_CHECKED
    if failed or unchecked:
        data["ok"] = False
        data["error"] = {"type": kind, "message": message, "tip": tip, "exit_code": code}
    emit(ctx, data, "\n\n".join(r.text() for r in reports))
    if failed or unchecked:
        if not ctx.obj.get("json"):
            click.echo(f"ERROR {for_terminal(message)}", err=True)
            click.echo(f"TIP {for_terminal(tip)}", err=True)
        ctx.exit(code)


TIP = (
    "Make the engine work offline (its [engine.env] settings, bundled assets), or, for a documented optional "
    "feature, name the host in [engine] allow-network."
)
UNCHECKED_TIP = (
    "Install strace (Debian: apt-get install strace) and allow ptrace (a container's seccomp profile, "
    "kernel.yama.ptrace_scope < 3): with no tracer outside the sandbox there is no verdict."
)


def summary(r: Report) -> str:
    """One line: why the self-test of ``r`` failed."""
    parts = [f"{s.name} {s.status}" for s in r.steps if s.status == "failed"] + list(r.problems[:1])
    if r.refused:
        hosts = sorted({f"{a.host}:{a.port}" if a.port is not None else a.host for a in r.refused})
        parts.append(f"{len(r.refused)} network attempt(s) to hosts not allowed: {', '.join(hosts[:5])}")
    return f"the self-test of {r.bundle} failed: " + "; ".join(parts or ["no install step passed"])


def show_after_build(ctx: click.Context, reports: list[Report], built: Mapping[str, JSON]) -> None:
    """``build --self-test``: the build's result and each report (the tests ran before the key was read)."""
    _show(ctx, reports, built)


@click.command(
    "test",
    cls=Command,
    epilog="Example: lockbuild test dist/onnxruntime-1.20.1-cpu-py311-x86_64-"
    "manylinux_2_28.lbz --trust keys/ --json\n"
    "Exit codes: 0 passed, 1 failed (a step failed, or a network attempt to a host not in allow-network), "
    "3 signature, 4 integrity, 6 not checked (this machine cannot run the bundle, or no tracer can "
    "judge it here).",
)
@click.argument("bundle", metavar="BUNDLE")
@click.option(
    "--store",
    "store_dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="A site store: where ENGINE/VERSION-VARIANT is looked up, and what completes a delta.",
)
@trust_option
@threshold_option
@click.option("--python", "python", type=click.Path(path_type=Path, dir_okay=False), help="Interpreter to use.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=TIMEOUT,
    show_default=True,
    help="Seconds the verify command and the smoke command may each take.",
)
@click.option("--no-strace", is_flag=True, help='Do not trace: the verdict is then "not checked" (exit 6).')
@click.option("--gpu", is_flag=True, help="Also run the GPU probe and the recipe's gpu-smoke command (where a GPU is).")
@click.option(
    "--model",
    "model",
    metavar="MODEL.lbz",
    help="A model bundle, checked and placed read-only in the sandbox's HF_HUB_CACHE for the smoke command.",
)
@json_option
@click.pass_context
def test(
    ctx: click.Context,
    bundle: str,
    store_dir: Path | None,
    trust_dir: Path | None,
    threshold: int | None,
    python: Path | None,
    timeout: float,
    no_strace: bool,
    gpu: bool,
    as_json: bool,
    model: str | None = None,
) -> None:
    """Prove a bundle runs offline: install it into a temporary root in a bubblewrap sandbox with no network,
    run its verify command and smoke command (with --gpu, the GPU probe and gpu-smoke command too), and
    report every network attempt a tracer outside the sandbox saw (host or family, system call, the Python
    frame that made it). Fails on any attempt to a host the recipe's allow-network does not name; without a
    tracer the verdict is "not checked". The temporary root is removed afterwards.

    \b
    BUNDLE is a .lbz (its .minisig beside it), a NAME.lbz.parts.toml from `split`, a NAME.delta.lbz
    from `delta` (with --store), or ENGINE/VERSION-VARIANT with --store DIR."""
    setup_output(ctx, as_json)
    from lockbuild.selftest.run import SelfTestOptions, self_test

    opts = SelfTestOptions(
        trust_dir=trust_dir,
        threshold=threshold,
        python=python,
        timeout=timeout,
        tracer=not no_strace,
        gpu=gpu,
        environ=dict(os.environ),
        model=model,
    )
    _show(ctx, [self_test(bundle, opts, progress_of(ctx), store=store_dir)])


COMMANDS = (test,)
