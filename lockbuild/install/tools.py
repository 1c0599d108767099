"""The interpreter and the uv binary the installer runs: from the node or the bundle, checked first."""

from __future__ import annotations

import shutil
import subprocess
import zipfile
from pathlib import Path

from lockbuild.errors import InstallError
from lockbuild.fsio import create_under

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


def find_python(want: str, explicit: Path | None) -> Path:
    """``--python`` if given, else ``python<X.Y>`` on PATH; its version must be exactly ``want``."""
    if explicit is not None:
        exe = explicit
    else:
        found = shutil.which(f"python{want}")
        if found is None:
            raise InstallError(
                f"this bundle is built for Python {want}, and no python{want} is on PATH.",
                tip=f"Install Python {want} on the node, or pass --python /path/to/python{want}.",
            )
        exe = Path(found)
    got = python_version(exe)
    if got != want:
        raise InstallError(
            f"this bundle is built for Python {want}, but {exe} is Python {got}.",
            tip=f"Pass --python pointing at a Python {want} interpreter, or use the bundle built for {got}.",
        )
    return exe


def extract_uv(wheel: Path, dest_dir: Path) -> Path:
    """The uv binary out of the bundled uv wheel (already checked against the manifest's sha256)."""
    try:
        with zipfile.ZipFile(wheel) as zf:
            names = [n for n in zf.namelist() if n.endswith(".data/scripts/uv")]
            if len(names) != 1:
                raise InstallError(f"{wheel.name} has no single uv binary (found {len(names)}).")
            info = zf.getinfo(names[0])
            if info.file_size > MAX_UV_BINARY:
                raise InstallError(f"{wheel.name}'s uv binary is {info.file_size} bytes; refused.")
            dest_dir.mkdir(mode=0o700)
            out = dest_dir / "uv"
            with zf.open(info) as src, create_under(dest_dir, "uv", 0o755) as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
    except zipfile.BadZipFile as exc:
        raise InstallError(f"{wheel.name} is not a valid wheel: {exc}.") from None
    return out
