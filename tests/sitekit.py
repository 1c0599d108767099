"""Signed bundles made in memory for the site-wing tests (store, parts, registry), without uv.

``make_bundle`` writes NAME.lbz and NAME.lbz.minisig; each signature's trusted comment carries the
manifest's sha256 (lockbuild's own signer), so signature blocks alone prove the manifest.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from click.testing import CliRunner, Result
from hostile import UV_MEMBER
from hostile import manifest as hostile_manifest

from lockbuild.bundle.manifest import Member
from lockbuild.bundle.write import Entry, write_bundle
from lockbuild.cli import main
from lockbuild.minisign import read_secret_key
from lockbuild.trust import InMemorySigner, sign_bundle

AS_OF = dt.datetime(2025, 1, 6, tzinfo=dt.UTC)
SHARED = b"torch wheel bytes, identical between engine versions " * 400


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def files_for(version: str) -> list[tuple[str, bytes, str]]:
    """Two versions share the recipe-independent wheel (SHARED) and differ in the engine wheel."""
    return [
        ("recipe.toml", f'[engine]\nname = "toyengine"\n# {version}\n'.encode(), "recipe"),
        ("lock/requirements.txt", f"toyengine=={version}\n".encode(), "lock"),
        (UV_MEMBER, b"PK uv wheel bytes " * 50, "tool"),
        ("wheels/torch-2.0-py3-none-any.whl", SHARED, "wheel"),
        (f"wheels/toyengine-{version}-py3-none-any.whl", f"engine {version} ".encode() * 300, "wheel"),
    ]


def make_bundle(
    out: Path,
    secret_keys: Sequence[Path],
    *,
    version: str = "1.0",
    variant: str = "cpu",
    files: Sequence[tuple[str, bytes, str]] | None = None,
    serial_days: int = 0,
) -> Path:
    files = list(files if files is not None else files_for(version))
    as_of = AS_OF + dt.timedelta(days=serial_days)
    members = tuple(Member(p, len(d), sha(d), k, f"https://example.invalid/{p}") for p, d, k in files)
    manifest = hostile_manifest(
        members,
        version=version,
        variant=variant,
        as_of=as_of,
        serial=int(as_of.timestamp()),
        recipe_sha256=sha(files[0][1]),
    )
    out.mkdir(parents=True, exist_ok=True)
    path = out / manifest.bundle_name
    with path.open("wb") as f:
        write_bundle(f, manifest, [Entry(m, d) for m, (_, d, _) in zip(members, files, strict=True)], threads=1)
    for key_path in secret_keys:
        sign_bundle(path, InMemorySigner(read_secret_key(key_path, lambda: "")))
    return path


def cli(*args: str | Path) -> Result:
    return CliRunner().invoke(main, [str(a) for a in args])


def cli_json(*args: str | Path) -> dict[str, object]:
    import json

    r = cli(*args, "--json")
    return dict(json.loads(r.stdout.strip().splitlines()[-1] if r.exit_code else r.stdout))


KILL_AT = """
import os, signal, sys
import {module} as target
orig = target.{cls}.{method}
count = {{"n": 0}}
def patched(*a, **k):
    count["n"] += 1
    if count["n"] > {after}:
        os.kill(os.getpid(), signal.SIGKILL)
    return orig(*a, **k)
setattr(target.{cls}, "{method}", patched)
from lockbuild.cli import main
main(sys.argv[1:])
"""


def run_killed(args: Sequence[str | Path], *, module: str, cls: str, method: str, after: int) -> int:
    """Run `lockbuild ARGS` in a child that SIGKILLs itself on call number ``after + 1`` of cls.method."""
    code = KILL_AT.format(module=module, cls=cls, method=method, after=after)
    proc = subprocess.run(
        [sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, env={**os.environ}, timeout=120
    )
    return proc.returncode  # -9: killed as planned
