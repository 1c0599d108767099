"""lockbuild's own wheel, made by the running lockbuild from its own files, pinned in the self-bundle's lock.

No build backend runs (lockbuild is pure Python), so nothing from outside runs on the builder, and the wheel
is the same bytes for the same files and cut-off: from a checkout, the blobs of the commit checked out
(``from_checkout``); else the files the installed distribution's RECORD lists (``from_installed``)."""

from __future__ import annotations

import datetime as dt
import hashlib
import importlib.metadata
import io
import os
import shutil
import subprocess
import tempfile
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lockbuild
from lockbuild import __version__, fsio
from lockbuild.digest import record_line
from lockbuild.documents import loads_toml
from lockbuild.errors import RecipeError

NAME = "lockbuild"
TAG = "py3-none-any"
ENTRY_POINTS = "[console_scripts]\nlockbuild = lockbuild.cli:main\n"
MAX_FILE = 16 << 20  # no file of lockbuild's is near this: a larger one is not lockbuild's
MAX_FILES = 2000
MAX_ARCHIVE = 64 << 20
GIT_TIMEOUT = 60.0
_SKIP_DIRS = ("__pycache__",)
_SKIP_SUFFIXES = (".pyc", ".pyo")
ZIP_EPOCH = dt.datetime(1980, 1, 1, tzinfo=dt.UTC)  # the oldest time a zip entry can carry


@dataclass(frozen=True)
class MadeWheel:
    filename: str
    data: bytes
    made_from: str  # "commit <sha> of <checkout>" or "the installed distribution"

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    def read(self, name: str) -> bytes:
        """The bytes of the wheel's file ``name`` (``lockbuild/bundle/bootstrap.sh``): those of the commit
        (or installed files) the wheel was made from."""
        with zipfile.ZipFile(io.BytesIO(self.data)) as zf:
            try:
                return zf.read(name)
            except KeyError:
                raise RecipeError(
                    f"lockbuild's own wheel, made from {self.made_from}, holds no {name}; expected "
                    "lockbuild's own files.",
                    tip="Build the self-bundle from a lockbuild checkout or installation that has it.",
                ) from None


@dataclass(frozen=True)
class Contents:
    files: tuple[tuple[str, bytes], ...]  # (archive name, bytes), sorted
    metadata: str
    made_from: str


def _wanted(name: str) -> bool:
    parts = name.split("/")
    return (
        parts[0] == NAME
        and len(parts) > 1
        and not any(p in _SKIP_DIRS or p.startswith(".") for p in parts)
        and not name.endswith(_SKIP_SUFFIXES)
    )


# git with no configuration but the repository's own, and none of it that changes what a blob reads as:
# no system or global file, no HOME, no replace refs, literal pathspecs. Only plumbing runs (ls-tree,
# cat-file of blob ids), which applies no attributes, filters, textconv or export-subst; each blob read is
# hashed here again against its id, so what the wheel holds is exactly what the commit names.
_GIT_ENV = {
    "PATH": "/usr/bin:/bin",
    "LC_ALL": "C",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_ATTR_NOSYSTEM": "1",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_OPTIONAL_LOCKS": "0",
}
_GIT_FLAGS = (
    "--no-replace-objects",
    "--literal-pathspecs",
    "-c",
    "core.attributesFile=/dev/null",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "core.hooksPath=/dev/null",
)
_REGULAR = ("100644", "100755")  # git's modes for a file; a link (120000) or a submodule is no file
_OBJECT_HASH = {40: "sha1", 64: "sha256"}  # a blob id's length names the repository's object format


def _git(root: Path, *args: str, limit: int, stdin: bytes | None = None) -> bytes:
    git = shutil.which("git")
    if git is None:
        raise RecipeError(
            f"a self-bundle from the checkout {root} needs git, and none is on PATH.",
            tip="Install git, or build the self-bundle with an installed lockbuild.",
        )
    try:
        with tempfile.TemporaryDirectory(prefix="lockbuild-git-home-") as home:
            env = {**_GIT_ENV, "HOME": home, "XDG_CONFIG_HOME": home}
            proc = subprocess.run(
                [git, *_GIT_FLAGS, "-C", str(root), *args],
                input=stdin,
                capture_output=True,
                timeout=GIT_TIMEOUT,
                env=env,
                check=False,
            )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RecipeError(
            f"cannot run git in the checkout {root}: {exc}.",
            tip="Install git, or build the self-bundle with an installed lockbuild.",
        ) from None
    if proc.returncode != 0:
        raise RecipeError(
            f"git {args[0]} failed in the checkout {root}: {proc.stderr.decode(errors='replace').strip()[-300:]}",
            tip="A self-bundle is made from the commit checked out; check the checkout with git status.",
        )
    if len(proc.stdout) > limit:
        raise RecipeError(f"git {args[0]} in {root} gave {len(proc.stdout)} bytes; expected at most {limit}.")
    return proc.stdout


@dataclass(frozen=True)
class _Blob:
    name: str
    oid: str
    size: int


def _tree(root: Path, commit: str) -> list[_Blob]:
    """The regular files of ``commit`` under lockbuild/ and its pyproject.toml, with their blob ids and sizes."""
    raw = _git(
        root, "ls-tree", "-r", "-z", "-l", "--full-tree", commit, "--", NAME, "pyproject.toml", limit=MAX_FILES * 400
    )
    blobs, total = [], 0
    for entry in raw.split(b"\0"):
        if not entry:
            continue
        head, _, path = entry.partition(b"\t")
        fields = head.decode("ascii", errors="replace").split()
        if len(fields) != 4 or fields[0] not in _REGULAR or fields[1] != "blob":
            continue  # a symbolic link or a submodule: not a file of the wheel
        name = path.decode("utf-8", errors="replace")
        if name != "pyproject.toml" and not _wanted(name):
            continue
        size = int(fields[3]) if fields[3].isdigit() else MAX_FILE + 1
        if size > MAX_FILE:
            raise RecipeError(
                f"{name} at commit {commit[:12]} is {fields[3]} bytes; expected lockbuild's own files, "
                f"at most {MAX_FILE} bytes each."
            )
        total += size
        blobs.append(_Blob(name, fields[2], size))
    if total > MAX_ARCHIVE or len(blobs) > MAX_FILES + 1:
        raise RecipeError(
            f"commit {commit[:12]} of {root} holds {len(blobs)} files of {total} bytes under {NAME}/; "
            f"expected lockbuild's own files (at most {MAX_FILES}, {MAX_ARCHIVE} bytes)."
        )
    return blobs


def _read_blobs(root: Path, commit: str, blobs: list[_Blob]) -> dict[str, bytes]:
    """Each blob's bytes as the object store holds them (``cat-file --batch``: no filter runs), checked
    against its id: a blob that does not hash to its name is refused."""
    out = _git(
        root,
        "cat-file",
        "--batch",
        stdin=b"".join(f"{b.oid}\n".encode() for b in blobs),
        limit=sum(b.size + 100 for b in blobs) + 100,
    )
    got: dict[str, bytes] = {}
    at = 0
    for b in blobs:
        eol = out.find(b"\n", at)
        header = out[at:eol].decode("ascii", errors="replace").split() if eol >= 0 else []
        if header != [b.oid, "blob", str(b.size)]:
            raise RecipeError(
                f"git cat-file in {root} answered {' '.join(header)[:120]!r} for {b.name} ({b.oid}) of "
                f"commit {commit[:12]}; expected a blob of {b.size} bytes.",
                tip="Check the checkout with git fsck.",
            )
        data = out[eol + 1 : eol + 1 + b.size]
        at = eol + 1 + b.size + 1
        algorithm = _OBJECT_HASH.get(len(b.oid), "")
        if not algorithm or hashlib.new(algorithm, b"blob %d\0" % len(data) + data).hexdigest() != b.oid:
            raise RecipeError(
                f"{b.name} of commit {commit[:12]} in {root} does not hash to its blob id {b.oid}; "
                "expected the committed bytes.",
                tip="Check the checkout with git fsck.",
            )
        got[b.name] = data
    return got


def from_checkout(root: Path) -> Contents:
    """The package files and the metadata of the commit checked out at ``root``, each read as the blob the
    commit names (never through the work tree, attributes, filters or git's configuration).

    Not ``git archive``: it runs the checkout's own attributes, so a ``filter.*.smudge`` command or
    ``export-subst`` could rewrite a module while HEAD and ``git status`` stay clean. An uncommitted edit
    or a stray file (an editor's backup, a ``.rej``) is not shipped."""
    commit = _git(root, "rev-parse", "--verify", "HEAD^{commit}", limit=100).decode().strip()
    blobs = _tree(root, commit)
    data = _read_blobs(root, commit, blobs)
    files = [(b.name, data[b.name]) for b in blobs if b.name != "pyproject.toml"]
    pyproject = data.get("pyproject.toml")
    project: Mapping[str, Any] = {}
    if pyproject is not None:
        refused = f"pyproject.toml of commit {commit[:12]} in {root} cannot be read"
        project = loads_toml(  # bounded by the blob's size, which git read
            pyproject, max_bytes=len(pyproject), refuse=lambda why: RecipeError(f"{refused}: {why.detail}.")
        ).get("project", {})
    if len(files) > MAX_FILES or not files:
        raise RecipeError(
            f"commit {commit[:12]} of {root} holds {len(files)} files under {NAME}/; expected "
            f"lockbuild's own files (1 to {MAX_FILES})."
        )
    version = project.get("version")
    if project.get("name") != NAME or version != __version__:
        raise RecipeError(
            f"commit {commit[:12]} of {root} is {project.get('name')!r} {version!r}, but the running lockbuild is "
            f"{__version__}; expected the commit of the running lockbuild.",
            tip="Commit (or check out) the version you mean to bundle, and run that lockbuild.",
        )
    deps = [d for d in project.get("dependencies", []) if isinstance(d, str)]
    meta = _metadata(version, project.get("description"), project.get("requires-python"), deps)
    return Contents(tuple(sorted(files)), meta, f"commit {commit} of {root}")


def from_installed() -> Contents:
    """The files the installed distribution's RECORD lists under ``lockbuild/``, and its metadata."""
    try:
        dist = importlib.metadata.distribution(NAME)
    except importlib.metadata.PackageNotFoundError:
        raise RecipeError(
            "this lockbuild runs without its distribution's metadata (not installed); a self-bundle needs it.",
            tip="Install lockbuild (pip install .) or run it from a git checkout.",
        ) from None
    names = sorted({str(f) for f in dist.files or () if _wanted(str(f))})
    if not names or len(names) > MAX_FILES:
        raise RecipeError(
            f"the installed lockbuild's RECORD lists {len(names)} of its files; expected lockbuild's own files "
            f"(1 to {MAX_FILES}). An editable install lists none.",
            tip="Run lockbuild from its git checkout, or install it with pip install . (not -e).",
        )
    top = Path(lockbuild.__file__).parent.parent
    files = tuple(
        (n, fsio.read_regular(top / n, max_size=MAX_FILE, what=f"lockbuild's file {n}", error=RecipeError))
        for n in names
    )
    meta = dist.metadata
    if meta["Version"] != __version__:
        raise RecipeError(
            f"the installed distribution says lockbuild {meta['Version']}, but the running code is "
            f"{__version__}; expected the two to agree.",
            tip="Reinstall lockbuild.",
        )
    requires = [r for r in dist.requires or () if "extra ==" not in r]
    return Contents(
        files, _metadata(__version__, meta["Summary"], meta["Requires-Python"], requires), "the installed distribution"
    )


def _metadata(version: str, summary: object, requires_python: object, requires: list[str]) -> str:
    lines = ["Metadata-Version: 2.1", f"Name: {NAME}", f"Version: {version}"]
    if isinstance(summary, str) and summary:
        lines.append(f"Summary: {summary}")
    if isinstance(requires_python, str) and requires_python:
        lines.append(f"Requires-Python: {requires_python}")
    lines += [f"Requires-Dist: {r}" for r in sorted(requires)]
    return "\n".join(lines) + "\n"


def own_contents() -> Contents:
    """From the git checkout the running lockbuild is in, else from its installed distribution."""
    root = Path(lockbuild.__file__).resolve().parent.parent
    if (root / ".git").exists() and (root / "pyproject.toml").is_file():
        return from_checkout(root)
    return from_installed()


def make_self_wheel(when: dt.datetime, contents: Contents | None = None) -> MadeWheel:
    """The wheel of the running lockbuild (or of ``contents``), every entry dated ``when`` (the cut-off):
    entries in sorted order, mode 0644 (0755 for a ``.sh``), stored without compression (the bundle is
    compressed as a whole; a zlib build would change deflated bytes)."""
    got = contents if contents is not None else own_contents()
    stamp = max(when.astimezone(dt.UTC), ZIP_EPOCH)
    date_time = (stamp.year, stamp.month, stamp.day, stamp.hour, stamp.minute, stamp.second - stamp.second % 2)
    info_dir = f"{NAME}-{__version__}.dist-info"
    entries = list(got.files)
    entries += [
        (f"{info_dir}/METADATA", got.metadata.encode()),
        (
            f"{info_dir}/WHEEL",
            f"Wheel-Version: 1.0\nGenerator: lockbuild {__version__}\nRoot-Is-Purelib: true\nTag: {TAG}\n".encode(),
        ),
        (f"{info_dir}/entry_points.txt", ENTRY_POINTS.encode()),
    ]
    record = "".join(record_line(n, d) + "\n" for n, d in entries) + f"{info_dir}/RECORD,,\n"
    entries.append((f"{info_dir}/RECORD", record.encode()))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in entries:
            info = zipfile.ZipInfo(name, date_time)
            info.compress_type = zipfile.ZIP_STORED
            info.external_attr = (0o100755 if name.endswith(".sh") else 0o100644) << 16
            info.create_system = 3  # unix: the mode above is read
            zf.writestr(info, data)
    return MadeWheel(f"{NAME}-{__version__}-{TAG}.whl", buf.getvalue(), got.made_from)
