"""Running the engine's own code (the verify command, the GPU probe) in a minimal, explicit environment.

The child inherits nothing by default: PATH, HOME, TMPDIR, the locale, and of the GPU settings only device
selection and driver capabilities. No proxy, no credential, no *_TOKEN, no LD_PRELOAD, no PYTHON* variable
reaches the engine, whatever the installer was given."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from lockbuild.errors import InstallError
from lockbuild.proc.child import run_keeping_tail

SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PASSED = ("HOME", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "TZ")
GPU_PASSED = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES")


def engine_env(env_dir: Path, inherit: Mapping[str, str], settings: Sequence[tuple[str, str]] = ()) -> dict[str, str]:
    """The whole environment the verify command and the probe see; ``settings`` are the engine's [engine.env]
    (from the signed manifest), given as defaults the way the environment's own start-up file gives them."""
    env = {k: inherit[k] for k in PASSED + GPU_PASSED if k in inherit and "\0" not in inherit[k]}
    env.setdefault("LANG", "C.UTF-8")
    env.setdefault("HOME", str(env_dir))
    env["PATH"] = f"{env_dir / 'bin'}:{SYSTEM_PATH}"
    env["VIRTUAL_ENV"] = str(env_dir)
    env["PYTHONNOUSERSITE"] = "1"
    for name, value in settings:
        env.setdefault(name, value)
    return env


def tail(text: str, lines: int = 12) -> str:
    kept = [line for line in text.strip().splitlines() if line.strip()]
    return "\n".join(f"    {line}" for line in kept[-lines:])


OUTPUT_KEPT = 256 << 10  # the last bytes of a command's output kept for its error (it may print without end)


def run_command(argv: Sequence[str], *, env: dict[str, str], timeout: float, what: str, cwd: Path | None = None) -> str:
    """Run ``argv`` with exactly ``env``; the end of its output (stdout and stderr as it wrote them, the last
    :data:`OUTPUT_KEPT` bytes), or an InstallError with the last lines of it."""
    try:
        done = run_keeping_tail(argv, env=env, timeout=timeout, keep=OUTPUT_KEPT, cwd=cwd)
    except OSError as exc:
        raise InstallError(f"{what}: cannot run {argv[0]}: {exc.strerror}.") from None
    if done.returncode is None:
        raise InstallError(f"{what} did not finish within {timeout:.0f} s.")
    out = done.tail.decode("utf-8", "replace")
    if done.returncode != 0:
        raise InstallError(f"{what} failed (exit {done.returncode}):\n{tail(out)}")
    return out
