"""The part of a self-test that runs inside the sandbox: ``python -m lockbuild.selftest.inner`` (config on stdin).

It installs the bundle, runs the smoke commands and prints one nonce-marked result line (:func:`main`). The
outer run (:mod:`lockbuild.selftest.run`) takes the steps from that line only, and the network attempts
from the tracer's log, never from here."""

from __future__ import annotations

import base64
import contextlib
import ctypes
import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from lockbuild.errors import LockbuildError
from lockbuild.fsio import create_under
from lockbuild.install.installer import Installer, InstallOptions
from lockbuild.install.runenv import engine_env, tail
from lockbuild.limits import MiB
from lockbuild.selftest import tracelog, watch
from lockbuild.site.sources import named_source

PR_SET_DUMPABLE = 4
RESULT = "LOCKBUILD-SELFTEST-RESULT"


def not_dumpable() -> bool:
    """``prctl(PR_SET_DUMPABLE, 0)``: other processes of this user can no longer read or write this one."""
    with contextlib.suppress(OSError, AttributeError):
        return int(ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)) == 0
    return False


def canary() -> None:
    """A note the tracer must log: proof, for the outer run, that it traced inside the sandbox."""
    note = json.dumps({"event": tracelog.CANARY}).encode()
    with contextlib.suppress(OSError):
        os.removexattr(tracelog.MARKER + base64.urlsafe_b64encode(note).decode().rstrip("="), "user.lockbuild")


def _place_hook(root: Path) -> None:
    """The watch hook into the staging environment's site-packages (the installer's "install" phase)."""
    for sp in sorted(root.glob("*/*.partial/lib/python*/site-packages")):
        if ".bundle." in sp.parts[-4] or (sp / watch.PTH).exists():
            continue
        with create_under(sp, f"{watch.MODULE}.py") as f:
            f.write(watch.module_text().encode())
        with create_under(sp, watch.PTH) as f:
            f.write(watch.pth_line().encode())


def shown(argv: list[str], most: int = 100) -> str:
    text = shlex.join(argv)
    return text if len(text) <= most else text[: most - 3] + "..."


def _step(result: dict[str, Any], name: str, status: str, detail: str = "") -> None:
    result["steps"].append({"name": name, "status": status, "detail": detail})


def _command(
    result: dict[str, Any], name: str, command: list[str], env_dir: Path, env: dict[str, str], timeout: float
) -> None:
    argv = list(command)
    if (env_dir / "bin" / argv[0]).exists():
        argv[0] = str(env_dir / "bin" / argv[0])
    # output into an unnamed file, not a pipe: a daemon the command leaves behind keeps a pipe open, and the
    # step would wait for it (the sandbox's PID namespace kills it when this run ends)
    with tempfile.TemporaryFile() as captured:
        try:
            proc = subprocess.Popen(
                argv, env=env, cwd=env_dir, stdin=subprocess.DEVNULL, stdout=captured, stderr=subprocess.STDOUT
            )
        except OSError as exc:
            _step(result, name, "failed", f"cannot run {argv[0]}: {exc.strerror}")
            return
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            _step(result, name, "failed", f"did not finish within {timeout:.0f} s")
            return
        captured.seek(0)
        out = tail(captured.read(MiB).decode("utf-8", "replace"), 6)
    if code != 0:
        _step(result, name, "failed", f"exit {code}:\n{out}")
    else:
        _step(result, name, "passed", shown(command) + (f"\n{out}" if out else ""))


def run_inside(cfg: dict[str, Any], result: dict[str, Any]) -> None:
    root = Path(cfg["root"])
    environ: dict[str, str] = cfg["environ"]
    gpu: str | None = cfg["gpu"]  # None: the GPU steps run; else why not

    def hook(phase: str) -> None:
        if phase == "install":
            _place_hook(root)

    python = Path(cfg["python"]) if cfg["python"] else None
    opts = InstallOptions(
        root=root,
        trust_dir=Path(cfg["trust"]),
        python=python,
        gpu_check="skip" if gpu else "require",
        threshold=cfg["threshold"],
        verify_timeout=cfg["timeout"],
        environ=environ,
        models=Path(cfg["models"]) if cfg.get("models") else None,
    )
    try:
        store = Path(cfg["store"]) if cfg.get("store") else None
        with named_source(cfg["bundle"], store=store) as source:  # as every command names a bundle
            installed = Installer(opts, hook=hook).install(source)
    except LockbuildError as exc:
        failed = (
            "verify"
            if "the verify command" in exc.message
            else "gpu-probe"
            if "GPU probe" in exc.message
            else "install"
        )
        for name in ("install", "verify", "gpu-probe"):
            if name == failed:
                _step(result, name, "failed", exc.message + (f" ({exc.tip})" if exc.tip else ""))
                break
            _step(result, name, "passed")
        _step(result, "smoke", "not run")
        return
    env_dir = installed.path
    _step(result, "install", "passed", f"{env_dir.parent.name}/{env_dir.name} in a temporary root (removed afterwards)")
    _step(result, "verify", "passed", shown(cfg["verify"]))
    if cfg["gpu_probe"] == "none":
        _step(result, "gpu-probe", "skipped", "the bundle has no GPU probe")
    elif gpu:
        _step(result, "gpu-probe", "not run", gpu)
    else:
        _step(result, "gpu-probe", "passed", cfg["gpu_probe"])
    env = engine_env(env_dir, environ, [tuple(x) for x in cfg["env"]])
    if cfg["smoke"]:
        _command(result, "smoke", list(cfg["smoke"]), env_dir, env, cfg["timeout"])
    else:
        _step(result, "smoke", "skipped", "the bundle has no smoke command ([engine] smoke = [...])")
    if cfg["gpu_smoke"]:
        if gpu:
            _step(result, "gpu-smoke", "not run", gpu)
        else:
            _command(result, "gpu-smoke", list(cfg["gpu_smoke"]), env_dir, env, cfg["timeout"])


def main() -> int:
    """Install with the ordinary installer (the watch hook placed as soon as ``uv venv`` made the
    environment), run the smoke commands, print ``RESULT <nonce> <json>`` as the last act. The process is
    made not dumpable first, and the nonce is read from stdin before any engine code runs and kept in no
    file or environment, so an engine (a child, the same user) cannot forge the line."""
    cfg = json.loads(sys.stdin.buffer.read(MiB))
    nonce = str(cfg["nonce"])
    result: dict[str, Any] = {"steps": [], "dumpable": not not_dumpable()}
    canary()
    try:
        run_inside(cfg, result)
    except Exception as exc:  # reported to the outer run, which fails the test on it
        result["error"] = f"{type(exc).__name__}: {exc}"[:2000]
    sys.stdout.flush()
    line = f"\n{RESULT} {nonce} {json.dumps(result)}\n"
    sys.stdout.write(line)
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
