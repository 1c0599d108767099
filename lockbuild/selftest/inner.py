"""The part of a self-test that runs inside the network namespace: ``python -m lockbuild.selftest.inner CONFIG``.

It installs the bundle with the ordinary installer into the test root (the audit hook placed in the new
environment's site-packages as soon as ``uv venv`` made it, so the verify command and the probe run with
it), then runs the smoke command (under strace where the outer run found it), and writes what happened as
JSON to the result file. The outer run (:mod:`lockbuild.selftest.run`) judges it.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from lockbuild.errors import LockbuildError
from lockbuild.fsio import create_under
from lockbuild.install.installer import Installer, InstallOptions
from lockbuild.install.node import detect
from lockbuild.install.runenv import engine_env, tail
from lockbuild.selftest import audit, trace


def loopback_up() -> str:
    """Bring up the namespace's own loopback, so a smoke command may start a server and talk to it on
    127.0.0.1 (still no route to any other host); attempts to it are reported as local."""
    import fcntl
    import socket
    import struct

    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            got = fcntl.ioctl(s, siocgifflags, struct.pack("16sH14x", b"lo", 0))
            flags = struct.unpack("16sH14x", got)[1]
            fcntl.ioctl(s, siocsifflags, struct.pack("16sH14x", b"lo", flags | iff_up))
    except OSError as exc:
        return f"down ({exc.strerror})"
    return "up"


def _place_hook(root: Path, report: Path) -> None:
    """The audit hook into the staging environment's site-packages (the installer's "install" phase)."""
    for sp in sorted(root.glob("*/*.partial/lib/python*/site-packages")):
        if ".bundle." in sp.parts[-4] or (sp / f"{audit.MODULE}.pth").exists():
            continue
        with create_under(sp, f"{audit.MODULE}.py") as f:
            f.write(audit.module_text(report).encode())
        with create_under(sp, f"{audit.MODULE}.pth") as f:
            f.write(f"import {audit.MODULE}\n".encode())


def shown(argv: list[str], most: int = 100) -> str:
    text = shlex.join(argv)
    return text if len(text) <= most else text[: most - 3] + "..."


def _step(result: dict[str, Any], name: str, status: str, detail: str = "") -> None:
    result["steps"].append({"name": name, "status": status, "detail": detail})


def run(cfg: dict[str, Any], result: dict[str, Any]) -> None:
    root, report = Path(cfg["root"]), Path(cfg["audit"])
    result["loopback"] = loopback_up()
    environ: dict[str, str] = cfg["environ"]

    def hook(phase: str) -> None:
        if phase == "install":
            _place_hook(root, report)

    python = Path(cfg["python"]) if cfg["python"] else None
    opts = InstallOptions(root=root, trust_dir=Path(cfg["trust"]), python=python, gpu_check="auto",
                          threshold=cfg["threshold"], verify_timeout=cfg["timeout"], environ=environ)  # fmt: skip
    try:
        installed = Installer(opts, hook=hook).install(Path(cfg["bundle"]))
    except LockbuildError as exc:
        failed = "verify" if "the verify command" in exc.message else "gpu-probe" if "GPU probe" in exc.message else \
            "install"  # fmt: skip
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
    elif not detect().has_nvidia:
        _step(result, "gpu-probe", "skipped", "no NVIDIA driver on this machine: the GPU probe was not run")
    else:
        _step(result, "gpu-probe", "passed", cfg["gpu_probe"])
    smoke: list[str] = list(cfg["smoke"])
    if not smoke:
        _step(result, "smoke", "skipped", "the bundle has no smoke command ([engine] smoke = [...])")
        return
    env = engine_env(env_dir, environ, [tuple(x) for x in cfg["env"]])
    argv = list(smoke)
    if (env_dir / "bin" / argv[0]).exists():
        argv[0] = str(env_dir / "bin" / argv[0])
    if cfg["strace"]:
        why = trace.unusable(cfg["strace"])
        if why:
            result["tracer"] = f"strace cannot trace here ({why}); native attempts not traced"
        else:
            argv = trace.wrap(cfg["strace"], Path(cfg["trace_out"]), argv)
    try:
        proc = subprocess.run(argv, env=env, cwd=env_dir, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=cfg["timeout"], check=False)  # fmt: skip
    except subprocess.TimeoutExpired:
        _step(result, "smoke", "failed", f"did not finish within {cfg['timeout']:.0f} s")
        return
    except OSError as exc:
        _step(result, "smoke", "failed", f"cannot run {argv[0]}: {exc.strerror}")
        return
    out = tail((proc.stdout or "") + (proc.stderr or ""), 6)
    if proc.returncode != 0:
        _step(result, "smoke", "failed", f"exit {proc.returncode}:\n{out}")
    else:
        _step(result, "smoke", "passed", shown(smoke) + (f"\n{out}" if out else ""))


def main(argv: list[str]) -> int:
    cfg = json.loads(Path(argv[1]).read_text(encoding="utf-8"))
    result: dict[str, Any] = {"steps": []}
    try:
        run(cfg, result)
    finally:
        Path(cfg["result"]).write_text(json.dumps(result), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
