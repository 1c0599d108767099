"""The prefix view: the image's staging directory shown at PREFIX, in a mount namespace (bubblewrap).

uv, the verify command, the probe and the compiler run where PREFIX is the staging directory, so every path
they write is PREFIX's; nothing is made at PREFIX on this machine. Own user, PID and network namespaces. Not
the sandbox for other people's code: the verify command runs as unconfined as ``install`` runs it."""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path

from lockbuild.errors import InstallError
from lockbuild.install.runenv import run_command
from lockbuild.install.stage import Runner
from lockbuild.proc.sandbox import bwrap_path

# PREFIX may not cover what the build runs from
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/dev", "/proc", "/sys")


def check_prefix(prefix: Path, needed: Sequence[Path] = ()) -> Path:
    """``prefix`` as given, if it is a plain absolute path that hides nothing the build needs."""
    text = str(prefix)
    if not prefix.is_absolute() or os.path.normpath(text) != text or text == "/" or "\0" in text or "//" in text:
        raise InstallError(
            f"--prefix must be a plain absolute path other than /, such as /opt/engines/vllm-0.11.0; found {text!r}.",
            tip="Give the path where the nodes will mount the image.",
        )
    for p in (*map(Path, SYSTEM), *needed):
        if p == prefix or p.is_relative_to(prefix):
            raise InstallError(
                f"--prefix {prefix} would cover {p}, which the image's build needs.",
                tip="Give a prefix of its own, such as /opt/engines/ENGINE-VERSION.",
            )
    return prefix


def _kind(path: Path) -> str | None:
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return None
    if stat.S_ISLNK(mode):
        return "link"
    if stat.S_ISDIR(mode):
        return "dir"
    return "file" if stat.S_ISREG(mode) else None


def mounts(staged: Path, prefix: Path) -> list[str]:
    """bwrap's arguments for the view: the host's entries beside PREFIX's path, then staged at PREFIX.

    At each level down to PREFIX, the host's other entries are bound at their own names and the next
    component is a new directory, so nothing on the host is hidden but what PREFIX itself covers; a new
    ``/proc`` and the host's ``/dev`` (the GPU's device nodes for the probe)."""
    out = ["--proc", "/proc", "--dev-bind", "/dev", "/dev"]
    here = Path("/")
    for name in prefix.parts[1:]:
        host = _kind(here) == "dir"  # a level the host has as a plain directory: its other entries stay visible
        if host:
            for p in sorted(here.iterdir()):
                if p.name == name or p in (Path("/proc"), Path("/dev")):
                    continue
                kind = _kind(p)
                if kind == "link":
                    out += ["--symlink", str(p.readlink()), str(p)]
                elif kind in ("dir", "file"):
                    out += ["--bind", str(p), str(p)]
        here = here / name
        if here != prefix:
            out += ["--dir", str(here)]
    return [*out, "--bind", str(staged), str(prefix)]


def argv(staged: Path, prefix: Path, command: Sequence[str], *, cwd: Path | None = None) -> list[str]:
    """The bwrap command line that runs ``command`` with ``staged`` seen at ``prefix``."""
    head = [str(bwrap_path()), "--unshare-user", "--unshare-pid", "--unshare-net", "--die-with-parent"]
    return [*head, *mounts(staged, prefix), "--chdir", str(cwd or "/"), "--", *command]


def runner(staged: Path, prefix: Path) -> Runner:
    """install/runenv.py's ``run_command``, in the view: the same explicit environment, timeout and errors."""

    def run_in_view(
        command: Sequence[str], *, env: dict[str, str], timeout: float, what: str, cwd: Path | None = None
    ) -> str:
        return run_command(argv(staged, prefix, command, cwd=cwd), env=env, timeout=timeout, what=what)

    return run_in_view
