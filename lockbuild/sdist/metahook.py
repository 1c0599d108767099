"""An sdist's dynamic metadata, produced by its build backend in the sandbox with no network.

The backend gets no credentials, no network and none of the builder's files (:func:`produce_metadata`);
anything but its own project's METADATA refuses the lock, naming the package."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import BinaryIO

from lockbuild.errors import LockbuildError
from lockbuild.fsio import create_new, opened_dir, read_regular
from lockbuild.proc import sandbox
from lockbuild.sdist.buildreqs import BuildSystem
from lockbuild.sdist.closure import MAX_METADATA_BYTES
from lockbuild.sdist.metadata import SdistMetadata, parse_metadata, refusal
from lockbuild.sdist.prebuild import (
    SANDBOX_IN,
    SANDBOX_OUT,
    SANDBOX_UV,
    build_env,
    find_host_python,
    stage_inputs,
    uv_bind,
)
from lockbuild.target import Target

METADATA_TIMEOUT = 600
SANDBOX_ENV = Path("/tmp/build-env")  # noqa: S108 - the sandbox's own tmpfs

# Run by the build environment's Python in the sandbox: argv is the sdist, the output directory, the
# backend object ("module:object") and the backend-path entries as JSON. Standard library only.
HOOKS = r"""
import importlib, json, os, shutil, sys, tarfile, zipfile
sdist, out, backend, paths = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
src = "/tmp/src"
os.makedirs(src)
if sdist.endswith(".zip"):
    with zipfile.ZipFile(sdist) as z:
        z.extractall(src)
else:
    with tarfile.open(sdist) as t:
        if hasattr(tarfile, "data_filter"):
            t.extractall(src, filter="data")
        else:
            t.extractall(src)
tops = os.listdir(src)
if len(tops) != 1:
    sys.exit("expected one top-level directory in the sdist, found %d" % len(tops))
os.chdir(os.path.join(src, tops[0]))
sys.path[:0] = [os.path.abspath(p) for p in paths]
module, _, attrs = backend.partition(":")
hooks = importlib.import_module(module.strip())
for attr in attrs.strip().split(".") if attrs.strip() else ():
    hooks = getattr(hooks, attr)
get_requires = getattr(hooks, "get_requires_for_build_wheel", None)
requires = list(get_requires(None)) if get_requires is not None else []
with open(os.path.join(out, "requires.json"), "w") as f:
    json.dump([str(r) for r in requires], f)
prepare = getattr(hooks, "prepare_metadata_for_build_wheel", None)
if prepare is not None:
    os.makedirs("/tmp/metadata")
    info = prepare("/tmp/metadata", None)
    shutil.copyfile(os.path.join("/tmp/metadata", info, "METADATA"), os.path.join(out, "METADATA"))
else:
    os.makedirs("/tmp/wheel")
    wheel = hooks.build_wheel("/tmp/wheel", None)
    with zipfile.ZipFile(os.path.join("/tmp/wheel", wheel)) as z:
        names = [n for n in z.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
        if len(names) != 1:
            sys.exit("the wheel the backend built has %d METADATA files" % len(names))
        with open(os.path.join(out, "METADATA"), "wb") as f:
            f.write(z.read(names[0]))
"""

# One shell line in the sandbox: the environment, the build dependencies (when there are any), the hooks.
SCRIPT = (
    'set -e; uv="$1"; py="$2"; shift 2; "$uv" venv -q --offline --python "$py" "$ENV_DIR"; '
    'if [ -s "$IN/build-requirements.txt" ]; then "$uv" pip install -q --offline --no-index --no-deps '
    '--python "$ENV_DIR/bin/python" --find-links "$IN/deps" --require-hashes -r "$IN/build-requirements.txt"; fi; '
    'exec "$ENV_DIR/bin/python" "$IN/hooks.py" "$@"'
)


def produce_metadata(
    *,
    sdist: BinaryIO,
    sdist_name: str,
    sha256: str,
    project: str,
    version: str,
    system: BuildSystem,
    deps: Sequence[tuple[str, BinaryIO]],
    lock_text: str,
    target: Target,
    inherit: Mapping[str, str],
) -> SdistMetadata:
    """The metadata of ``project`` ``version`` from its sdist (already checked by ``sha256``), made by its
    backend in the sandbox without network; a ResolveError naming the package when it cannot be made.

    The sandbox sees, read-only, the sdist, its hashed build dependencies' wheels with their requirements
    file, lockbuild's uv and the target Python, and may write only its output directory. uv installs the
    wheels offline (``--offline --no-index --require-hashes``), :data:`HOOKS` calls the PEP 517 hooks, and
    the METADATA is read back by descriptor, bounded, and must name the sdist's own project and version."""
    sandbox.check_available()
    python = find_host_python(target.python, inherit)
    if python is None:
        raise refusal(project, version, f"this builder has no Python {target.python} outside a virtual environment")
    with tempfile.TemporaryDirectory(prefix="lockbuild-metadata-") as tmp:
        t = Path(tmp)
        stage_inputs(t, sdist_name, sdist, deps, lock_text if deps else "")
        with create_new(t / "in" / "hooks.py") as out:
            out.write(HOOKS.encode("utf-8"))
        env = build_env(offline=True)
        env |= {"ENV_DIR": str(SANDBOX_ENV), "IN": str(SANDBOX_IN), "SOURCE_DATE_EPOCH": "315532800"}
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
            "/bin/sh",
            "-c",
            SCRIPT,
            "sh",
            str(SANDBOX_UV),
            str(python.executable),
            str(SANDBOX_IN / sdist_name),
            str(SANDBOX_OUT),
            system.backend,
            json.dumps(list(system.backend_path)),
        ]
        try:
            proc = sandbox.run(spec, argv, timeout=METADATA_TIMEOUT)
        except sandbox.SandboxTimeout:
            raise refusal(project, version, f"its backend did not finish within {METADATA_TIMEOUT} s") from None
        if proc.returncode != 0:
            stderr = proc.stderr.decode("utf-8", "replace")
            last = next((ln for ln in reversed(stderr.splitlines()) if ln.strip()), "no output")
            asked = _asked(t / "out")
            also = f"; at build time it asks for {asked}" if asked else ""
            raise refusal(project, version, f"its backend {system.backend} failed: {last.strip()[:300]}{also}")
        with opened_dir(t / "out") as fd:
            try:
                raw = read_regular(
                    "METADATA",
                    what="metadata the backend wrote",
                    max_size=MAX_METADATA_BYTES,
                    dir_fd=fd,
                    shown=f"METADATA (of {sdist_name})",
                )
            except FileNotFoundError:
                raise refusal(project, version, "its backend wrote no METADATA") from None
            except LockbuildError as exc:
                raise refusal(project, version, exc.message) from None
    return parse_metadata(raw, project, version, sha256, what=f"the METADATA its backend {system.backend} produced")


def _asked(out: Path) -> str:
    """What the backend's get_requires_for_build_wheel answered, for a message ("" when unknown)."""
    try:
        with opened_dir(out) as fd:
            raw = read_regular(
                "requires.json", what="build requirements the backend named", max_size=1 << 16, dir_fd=fd
            )
        got = json.loads(raw)
    except (OSError, LockbuildError, ValueError, RecursionError):
        return ""
    if not isinstance(got, list) or not all(isinstance(r, str) for r in got):
        return ""
    return ", ".join(r[:80] for r in got[:10]).encode("ascii", "replace").decode()
