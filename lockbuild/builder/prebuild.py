"""Building an sdist on the builder when the wheel can run on the node (issue 14).

The build runs ``uv build --wheel`` offline, with no index, in a network namespace (``unshare -rn``),
with ``SOURCE_DATE_EPOCH`` at the cut-off and uv's environment allow-list: its build dependencies can
come only from the hashed closure locked for the node (``--build-constraints ... --require-hashes``),
each file read from the cache entry that was hashed. The wheel is kept only when it is a wheel of that
sdist's name and version whose tags the node's Python and platform accept; otherwise (or when this
builder cannot build it: no namespace, no Python X.Y, a failing backend) the node builds the sdist.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from packaging.utils import InvalidWheelFilename, canonicalize_name, canonicalize_version, parse_wheel_filename

from lockbuild.builder.cache import Cache
from lockbuild.target import Target
from lockbuild.uvtool import clean_env, uv_binary

BUILD_TIMEOUT = 1800


@dataclass(frozen=True)
class Prebuilt:
    """A wheel built on the builder from one sdist of the lock, bundled next to it."""

    path: str  # the member: sdists/<wheel file name>
    sdist: str  # the sdist's file name
    sha256: str
    size: int


@functools.cache
def sandbox() -> tuple[str, ...] | None:
    """The prefix that runs a command without network (``unshare -rn``), or None where it cannot."""
    exe = shutil.which("unshare")
    if exe is None:
        return None
    for argv in ((exe, "-n"), (exe, "-rn")):
        try:
            if subprocess.run([*argv, "true"], capture_output=True, timeout=30, check=False).returncode == 0:
                return argv
        except (OSError, subprocess.TimeoutExpired):
            return None
    return None


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
    """(the wheel, "") when it was built and runs on the node; else (None, why not)."""
    ns = sandbox()
    if ns is None:
        return None, "this builder cannot run a build without network (unshare -rn)"
    with tempfile.TemporaryDirectory(prefix="lockbuild-prebuild-") as tmp:
        t = Path(tmp)
        (t / "deps").mkdir()
        for filename, f in deps:
            with (t / "deps" / filename).open("wb") as out:
                shutil.copyfileobj(f, out)
        with (t / sdist_name).open("wb") as out:
            shutil.copyfileobj(sdist, out)
        (t / "build-requirements.txt").write_text(lock_text, encoding="utf-8")
        env = clean_env(t / "uv-cache", offline=True, inherit=inherit)
        env["SOURCE_DATE_EPOCH"] = str(int(as_of.timestamp()))
        argv = [*ns, uv_binary(), "build", "--wheel", "--offline", "--no-index", "--python", target.python,
                "--find-links", str(t / "deps"), "--build-constraints", str(t / "build-requirements.txt"),
                "--require-hashes", "--out-dir", str(t / "out"), str(t / sdist_name)]  # fmt: skip
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=t, stdin=subprocess.DEVNULL,
                                  timeout=BUILD_TIMEOUT, check=False)  # fmt: skip
        except subprocess.TimeoutExpired:
            return None, f"its build did not finish within {BUILD_TIMEOUT} s here"
        if proc.returncode != 0:
            last = next((ln for ln in reversed(proc.stderr.splitlines()) if ln.strip()), "no output")
            return None, f"it does not build here ({last.strip()[:200]})"
        made = sorted((t / "out").glob("*.whl"))
        if len(made) != 1 or not _wheel_of(made[0].name, project, version):
            return None, f"its build made {', '.join(p.name for p in made) or 'no wheel'}, not one wheel of it"
        if target.wheel_rank(made[0].name) is None:
            return None, f"it builds {made[0].name}, which does not run on Python {target.python} {target.platform}"
        data = made[0].read_bytes()
        sha = hashlib.sha256(data).hexdigest()
        temp = cache.new_temp(sha)
        temp.write_bytes(data)
        cache.commit(temp, sha)
        return Prebuilt(f"sdists/{made[0].name}", sdist_name, sha, len(data)), ""


def _wheel_of(filename: str, project: str, version: str) -> bool:
    try:
        name, got, _, _ = parse_wheel_filename(filename)
    except InvalidWheelFilename:
        return False
    return canonicalize_name(name) == canonicalize_name(project) and canonicalize_version(got) == canonicalize_version(
        version
    )
