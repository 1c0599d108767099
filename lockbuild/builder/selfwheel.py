"""lockbuild's own wheel, made by the running lockbuild from its own files (issue 26).

The self-bundle carries lockbuild like any engine carries its packages: a wheel pinned in the lock by
its sha256. No build backend runs (lockbuild is pure Python), so nothing from outside runs on the
builder and the wheel is the same bytes for the same files and cut-off:

- the files are the package directory's, minus bytecode caches, in sorted order;
- the metadata is the installed distribution's (name, version, summary, requires-python, and the
  dependencies that hold without an extra);
- every entry has the cut-off as its time, mode 0644 (0755 for a ``.sh``), and is deflated.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import importlib.metadata
import io
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path

import lockbuild
from lockbuild import __version__, fsio
from lockbuild.errors import RecipeError

NAME = "lockbuild"
TAG = "py3-none-any"
ENTRY_POINTS = "[console_scripts]\nlockbuild = lockbuild.cli:main\n"
MAX_FILE = 16 << 20  # no file of lockbuild's is near this: a larger one is not lockbuild's
MAX_FILES = 2000
_SKIP_DIRS = ("__pycache__",)
_SKIP_SUFFIXES = (".pyc", ".pyo")
ZIP_EPOCH = dt.datetime(1980, 1, 1, tzinfo=dt.UTC)  # the oldest time a zip entry can carry


@dataclass(frozen=True)
class SelfWheel:
    filename: str
    data: bytes

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


def package_files(top: Path) -> list[tuple[str, bytes]]:
    """``(archive name, bytes)`` of every file under lockbuild's package directory, sorted."""
    out: list[tuple[str, bytes]] = []
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and not d.startswith("."))
        for name in sorted(filenames):
            if name.endswith(_SKIP_SUFFIXES) or name.startswith("."):
                continue
            path = Path(dirpath) / name
            rel = path.relative_to(top.parent).as_posix()
            data = fsio.read_regular(path, max_size=MAX_FILE, what=f"lockbuild's file {rel}", error=RecipeError)
            out.append((rel, data))
            if len(out) > MAX_FILES:
                raise RecipeError(f"lockbuild's package directory {top} holds over {MAX_FILES} files; expected "
                                  "lockbuild's own files only.")
    out.sort()
    return out


def metadata_text() -> str:
    """The core metadata of the running lockbuild: what its installed distribution says."""
    try:
        meta = importlib.metadata.metadata(NAME)
        requires = importlib.metadata.requires(NAME) or []
    except importlib.metadata.PackageNotFoundError:
        raise RecipeError(
            "this lockbuild runs without its distribution's metadata (not installed); a self-bundle needs it.",
            tip="Install lockbuild from its checkout (pip install -e . or pip install .) and run it again.",
        ) from None
    version = meta["Version"]
    if version != __version__:
        raise RecipeError(
            f"the installed distribution says lockbuild {version}, but the running code is {__version__}; "
            "expected the two to agree.",
            tip="Reinstall lockbuild from its checkout (pip install -e .).",
        )
    lines = ["Metadata-Version: 2.1", f"Name: {NAME}", f"Version: {version}"]
    if meta["Summary"]:
        lines.append(f"Summary: {meta['Summary']}")
    if meta["Requires-Python"]:
        lines.append(f"Requires-Python: {meta['Requires-Python']}")
    lines += [f"Requires-Dist: {r}" for r in sorted(requires) if "extra ==" not in r]
    return "\n".join(lines) + "\n"


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def make_self_wheel(when: dt.datetime, top: Path | None = None) -> SelfWheel:
    """The wheel of the running lockbuild, every entry dated ``when`` (the build's cut-off)."""
    top = top if top is not None else Path(lockbuild.__file__).parent
    stamp = max(when.astimezone(dt.UTC), ZIP_EPOCH)
    date_time = (stamp.year, stamp.month, stamp.day, stamp.hour, stamp.minute, stamp.second - stamp.second % 2)
    info_dir = f"{NAME}-{__version__}.dist-info"
    entries = package_files(top)
    entries += [
        (f"{info_dir}/METADATA", metadata_text().encode()),
        (f"{info_dir}/WHEEL", f"Wheel-Version: 1.0\nGenerator: lockbuild {__version__}\n"
                              f"Root-Is-Purelib: true\nTag: {TAG}\n".encode()),
        (f"{info_dir}/entry_points.txt", ENTRY_POINTS.encode()),
    ]
    record = "".join(_record_line(n, d) + "\n" for n, d in entries) + f"{info_dir}/RECORD,,\n"
    entries.append((f"{info_dir}/RECORD", record.encode()))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in entries:
            info = zipfile.ZipInfo(name, date_time)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = (0o100755 if name.endswith(".sh") else 0o100644) << 16
            info.create_system = 3  # unix: the mode above is read
            zf.writestr(info, data, compresslevel=9)
    return SelfWheel(f"{NAME}-{__version__}-{TAG}.whl", buf.getvalue())
