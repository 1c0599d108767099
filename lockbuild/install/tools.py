"""The interpreter and the uv binary the installer runs: from the node or the bundle, checked first."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from lockbuild import wheelfile
from lockbuild.digest import CHUNK
from lockbuild.errors import InstallError
from lockbuild.fsio import create_under, program_problem

MAX_UV_BINARY = 256 << 20


def python_version(exe: Path) -> str:
    try:
        proc = subprocess.run(
            [str(exe), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except OSError as exc:
        raise InstallError(f"cannot run the interpreter {exe}: {exc.strerror}.") from None
    if proc.returncode != 0:
        raise InstallError(f"the interpreter {exe} failed to start: {proc.stderr.strip()[-300:]}")
    return proc.stdout.strip()


# Where a node's own interpreter is looked for first: the system's, which every user can run.
SYSTEM_DIRS = (Path("/usr/bin"), Path("/usr/local/bin"))


@dataclass(frozen=True)
class FoundPython:
    """The interpreter an environment is built with, and where it came from (said in the result)."""

    path: Path
    origin: str  # "--python", "system" (/usr/bin, /usr/local/bin) or "PATH" (anywhere else on PATH)
    warning: str | None = None


def locate_python(want: str, explicit: Path | None, *, path: str | None = None) -> FoundPython:
    """``--python`` if given; else ``python<X.Y>`` in /usr/bin or /usr/local/bin; only then, with a
    warning, one found elsewhere on PATH (a pyenv or conda build under a home directory is often one that
    other users cannot run). Its version must be exactly ``want``."""
    name = f"python{want}"
    if explicit is not None:
        found = FoundPython(explicit, "--python")
    else:
        system = next((d / name for d in SYSTEM_DIRS if (d / name).is_file() and os.access(d / name, os.X_OK)), None)
        if system is not None:
            found = FoundPython(system, "system")
        else:
            elsewhere = shutil.which(name, path=path)
            if elsewhere is None:
                raise InstallError(
                    f"this bundle is built for Python {want}, and no {name} is in /usr/bin, /usr/local/bin or on PATH.",
                    tip=f"Install Python {want} on the node, or pass --python /path/to/{name}.",
                )
            found = FoundPython(
                Path(elsewhere),
                "PATH",
                (
                    f"using {elsewhere} for Python {want}: it was found on PATH, not in /usr/bin or /usr/local/bin; "
                    f"pass --python {elsewhere} to choose it on purpose, or install {name} system-wide."
                ),
            )
    check_not_swappable(found, want)  # before it runs: it runs as this user
    got = python_version(found.path)
    if got != want:
        raise InstallError(
            f"this bundle is built for Python {want}, but {found.path} is Python {got}.",
            tip=f"Pass --python pointing at a Python {want} interpreter, or use the bundle built for {got}.",
        )
    return found


def check_not_swappable(found: FoundPython, want: str) -> None:
    """The interpreter, as named and as each link on its way resolves, passes --root's rule
    (``fsio.program_problem``): otherwise another user could swap it before it runs as this user (often
    root), and the environment's ``pyvenv.cfg`` would name it for every later run."""
    try:
        unsafe = program_problem(found.path)
    except OSError as exc:
        raise InstallError(
            f"cannot examine the interpreter {found.path} (from {found.origin}): {exc.filename}: {exc.strerror}.",
            tip=f"Pass --python with the path of a Python {want} interpreter that exists.",
        ) from None
    if unsafe is None:
        return
    raise InstallError(
        f"refused the interpreter {found.path} (from {found.origin}): {unsafe.directory}, on its way as named or "
        f"as its links resolve, {unsafe.problem}, so another user could swap the interpreter for their own "
        "before it runs as you, and the environment's pyvenv.cfg would name it.",
        tip=f"Pass --python with an interpreter only root (or you) can change, under directories only root (or "
        f"you) can write, such as /usr/bin/python{want}: the rule --root follows (docs/site-administrators.md).",
    )


def find_python(want: str, explicit: Path | None) -> Path:
    """The interpreter :func:`locate_python` chooses."""
    return locate_python(want, explicit).path


def extract_uv(wheel: Path, dest_dir: Path) -> Path:
    """The uv binary out of the bundled uv wheel (already checked against the manifest's sha256), read by
    ``lockbuild.wheelfile``: a wheel that cannot be read is an InstallError naming it."""
    with wheel.open("rb") as raw, wheelfile.opened(raw, wheel.name, error=InstallError) as zf:
        names = [n for n in zf.namelist() if n.endswith(".data/scripts/uv")]
        if len(names) != 1:
            raise InstallError(f"{wheel.name} has no single uv binary (found {len(names)}).")
        info = zf.getinfo(names[0])
        if info.file_size > MAX_UV_BINARY:
            raise InstallError(f"{wheel.name}'s uv binary is {info.file_size} bytes; refused.")
        out = dest_dir / "uv"
        try:
            dest_dir.mkdir(mode=0o700)
            dst = create_under(dest_dir, "uv", 0o755)
        except OSError as exc:
            raise InstallError(f"cannot write {out}: {exc.strerror or exc}.") from None
        with zf.open(info) as src, dst:
            while chunk := src.read(CHUNK):
                try:
                    dst.write(chunk)
                except OSError as exc:  # the destination's failure, not the wheel's
                    raise InstallError(f"cannot write {out}: {exc.strerror or exc}.") from None
    return out
