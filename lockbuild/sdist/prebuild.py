"""Building an sdist on the builder when the wheel can run on the node, in the sandbox (:func:`prebuild`).

Build dependencies come only from the hashed closure locked for the node. When this builder has no
Python X.Y, the backend fails or the wheel does not fit, the node builds the sdist; where the sandbox
cannot start, the build stops with a tip: nothing runs unsandboxed."""

from __future__ import annotations

import datetime as dt
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from packaging.utils import InvalidWheelFilename, canonicalize_name, canonicalize_version, parse_wheel_filename

from lockbuild.digest import copy_with_hash
from lockbuild.errors import LockbuildError
from lockbuild.fetch.cache import Cache
from lockbuild.fsio import create_new, list_dir, open_regular, opened_dir
from lockbuild.proc import sandbox
from lockbuild.proc.uvtool import clean_env, uv_binary
from lockbuild.target import Target

BUILD_TIMEOUT = 1800
MAX_WHEEL = 4 << 30  # a wheel the build made, read back from the sandbox's output directory
SANDBOX_UV = Path("/opt/lockbuild/uv")  # where lockbuild's uv binary appears in the sandbox
SANDBOX_IN = Path("/build/in")  # the sdist, its build dependencies and their constraints: read-only
SANDBOX_OUT = Path("/build/out")  # the only writable host directory
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"


@dataclass(frozen=True)
class Prebuilt:
    """A wheel built on the builder from one sdist of the lock, bundled next to it."""

    path: str  # the member: sdists/<wheel file name>
    sdist: str  # the sdist's file name
    sha256: str
    size: int


@dataclass(frozen=True)
class HostPython:
    """A Python X.Y of this machine, as the sandbox sees it: its executable and its installation."""

    executable: Path
    binds: tuple[sandbox.Bind, ...]


def find_host_python(version: str, inherit: Mapping[str, str]) -> HostPython | None:
    """This machine's Python ``version`` (a system one: never a virtual environment, lockbuild's own
    included, nor a uv-managed Python under the build account's home, which any earlier build could have
    written), bound read-only at its own path; None when there is none."""
    with tempfile.TemporaryDirectory(prefix="lockbuild-pyfind-") as tmp:
        env = clean_env(Path(tmp) / "uv-cache", inherit=inherit, offline=True)
        env["UV_NO_MANAGED_PYTHON"] = "1"
        try:
            proc = subprocess.run(
                [uv_binary(), "python", "find", "--system", version],
                capture_output=True,
                text=True,
                env=env,
                cwd=tmp,
                timeout=120,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
    found = proc.stdout.strip()
    if proc.returncode != 0 or not found:
        return None
    exe = Path(found).resolve()
    prefix = exe.parent.parent  # <prefix>/bin/pythonX.Y
    binds = () if _under_system(exe) else (sandbox.Bind(prefix, prefix),)
    return HostPython(exe, binds)


def _under_system(p: Path) -> bool:
    return any(p.is_relative_to(d) for d in ("/usr", "/bin", "/lib", "/lib64"))


def build_env(*, offline: bool, extra_path: Sequence[Path] = ()) -> dict[str, str]:
    """uv's whole environment inside the sandbox: its configuration shut out, a throw-away cache, no
    Python download and no uv-managed Python, nothing of the builder's environment."""
    env = clean_env(Path("/tmp/uv-cache"), inherit={}, offline=offline)  # noqa: S108 - the sandbox's tmpfs
    env["UV_NO_MANAGED_PYTHON"] = "1"
    env["UV_PYTHON_INSTALL_DIR"] = "/nonexistent/uv-python"
    env["PATH"] = ":".join([*(str(p) for p in extra_path), SANDBOX_PATH])
    env["HOME"] = str(sandbox.Spec().home)
    env["TMPDIR"] = "/tmp"  # noqa: S108 - the sandbox's tmpfs
    env["LANG"] = "C.UTF-8"
    return env


def uv_bind() -> sandbox.Bind:
    """lockbuild's uv binary, read-only, at SANDBOX_UV."""
    return sandbox.Bind(Path(uv_binary()).resolve(), SANDBOX_UV)


def prebuild(
    *,
    sdist: BinaryIO,
    sdist_name: str,
    project: str,
    version: str,
    deps: Sequence[tuple[str, BinaryIO]],
    lock_text: str,
    target: Target,
    as_of: dt.datetime,
    cache: Cache,
    inherit: Mapping[str, str],
) -> tuple[Prebuilt | None, str]:
    """(the wheel, "") when it was built and runs on the node; else (None, why not). Raises SandboxError
    when the sandbox cannot start here (the build stops: nothing runs unsandboxed).

    ``uv build --wheel`` offline, no index, in the sandbox: read-only the sdist, its hashed build closure
    (``--build-constraints ... --require-hashes``), uv and Python X.Y; writable only its output directory;
    HOME and /tmp throw-away; ``SOURCE_DATE_EPOCH`` the cut-off. The wheel is read back without following a
    link and kept only when it is that sdist's name and version with tags the node accepts."""
    sandbox.check_available()
    python = find_host_python(target.python, inherit)
    if python is None:
        return None, f"this builder has no Python {target.python} (outside any virtual environment)"
    with tempfile.TemporaryDirectory(prefix="lockbuild-prebuild-") as tmp:
        t = Path(tmp)
        stage_inputs(t, sdist_name, sdist, deps, lock_text)
        env = build_env(offline=True)
        env["SOURCE_DATE_EPOCH"] = str(int(as_of.timestamp()))
        spec = sandbox.Spec(
            binds=(
                uv_bind(),
                *python.binds,
                sandbox.Bind(t / "in", SANDBOX_IN),
                sandbox.Bind(t / "out", SANDBOX_OUT, writable=True),
            ),
            env=env,
            cwd=SANDBOX_OUT,
            network=False,
        )
        argv = [
            str(SANDBOX_UV),
            "build",
            "--wheel",
            "--offline",
            "--no-index",
            "--python",
            str(python.executable),
            "--find-links",
            str(SANDBOX_IN / "deps"),
            "--build-constraints",
            str(SANDBOX_IN / "build-requirements.txt"),
            "--require-hashes",
            "--out-dir",
            str(SANDBOX_OUT),
            str(SANDBOX_IN / sdist_name),
        ]
        try:
            proc = sandbox.run(spec, argv, timeout=BUILD_TIMEOUT)
        except sandbox.SandboxTimeout:
            return None, f"its build did not finish within {BUILD_TIMEOUT} s here"
        if proc.returncode != 0:
            stderr = proc.stderr.decode("utf-8", "replace")
            last = next((ln for ln in reversed(stderr.splitlines()) if ln.strip()), "no output")
            return None, f"it does not build here ({last.strip()[:200]})"
        return _keep(t / "out", project, version, sdist_name, target, cache)


def stage_inputs(
    work: Path, sdist_name: str, sdist: BinaryIO, deps: Sequence[tuple[str, BinaryIO]], lock_text: str
) -> None:
    """What a sandboxed build of an sdist reads, laid out in ``work``: ``in/`` (the checked sdist, its
    build dependencies in ``in/deps/``, their hashed lock) and an empty ``out/``, every file made new."""
    (work / "in" / "deps").mkdir(parents=True)
    (work / "out").mkdir()
    for filename, f in deps:
        with create_new(work / "in" / "deps" / plain_name(filename)) as out:
            shutil.copyfileobj(f, out)
    with create_new(work / "in" / plain_name(sdist_name)) as out:
        shutil.copyfileobj(sdist, out)
    with create_new(work / "in" / "build-requirements.txt") as out:
        out.write(lock_text.encode("utf-8"))


def plain_name(filename: str) -> str:
    if not filename or "/" in filename or filename in (".", "..") or "\0" in filename:
        raise LockbuildError(f"expected a plain file name for a build input; found {filename!r}.")
    return filename


def _keep(
    out: Path, project: str, version: str, sdist_name: str, target: Target, cache: Cache
) -> tuple[Prebuilt | None, str]:
    """The one wheel the sandbox wrote, read by descriptor without following a link, into the cache."""
    with opened_dir(out) as fd:
        made = [n for n in list_dir(fd) if n.endswith(".whl")]
        if len(made) != 1 or not _wheel_of(made[0], project, version):
            return None, f"its build made {', '.join(made) or 'no wheel'}, not one wheel of it"
        name = made[0]
        if target.wheel_rank(name) is None:
            return None, f"it builds {name}, which does not run on Python {target.python} {target.platform}"
        try:
            f, size = open_regular(
                name,
                what="wheel its build made",
                max_size=MAX_WHEEL,
                dir_fd=fd,
                shown=f"{name} (built from {sdist_name})",
            )
        except LockbuildError as exc:
            return None, exc.message
        temp = cache.new_temp("0" * 64)  # named by its digest once known (commit)
        with f, create_new(temp, mode=0o600) as dst:
            copied, sha = copy_with_hash(f, dst, size)
    if copied != size:
        temp.unlink()
        return None, f"{name} changed while it was read"
    cache.commit(temp, sha, name=name)
    return Prebuilt(f"sdists/{name}", sdist_name, sha, size), ""


def _wheel_of(filename: str, project: str, version: str) -> bool:
    try:
        name, got, _, _ = parse_wheel_filename(filename)
    except InvalidWheelFilename:
        return False
    return canonicalize_name(name) == canonicalize_name(project) and canonicalize_version(got) == canonicalize_version(
        version
    )
