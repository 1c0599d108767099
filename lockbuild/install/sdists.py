"""Building a bundle's sdists on the node from their hashed build closure only.

``uv build --wheel`` runs offline, isolated, with no index: a build dependency comes only from the
bundle's ``build-deps/`` with the sha256 the signed ``lock/build-requirements.txt`` gives; anything else
stops the install. The built wheels are installed with ``--no-deps``, then the rest of the lock."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from packaging.utils import InvalidWheelFilename, canonicalize_name, canonicalize_version, parse_wheel_filename

from lockbuild.bundle.lockfiles import BUILD_DIR, BUILD_LOCK, KIND
from lockbuild.bundle.manifest import Manifest
from lockbuild.errors import InstallError
from lockbuild.fsio import create_under
from lockbuild.install.runenv import run_command
from lockbuild.lock import parse_requirements_lock
from lockbuild.progress import Progress

BUILD_TIMEOUT = 3600.0
NODE_LOCK = "lock/node-requirements.txt"


def has_build_closure(m: Manifest) -> bool:
    return any(x.path == BUILD_LOCK and x.kind == "lock" for x in m.members)


def build_sdists(
    uv: Path,
    python: Path,
    unpacked: Path,
    m: Manifest,
    env: Mapping[str, str],
    progress: Progress,
    runner: Callable[..., str] = run_command,
) -> tuple[list[Path], Path]:
    """The wheels built from the bundle's sdists, and the lock of everything else (to install after them).
    ``runner``: how uv is run (an image's builds see its interpreter at the prefix, lockbuild.image)."""
    pins = parse_requirements_lock((unpacked / "lock" / "requirements.txt").read_text(encoding="utf-8"))
    by_hash = {h: p for p in pins for h in p.hashes}
    out = unpacked / ".built"
    out.mkdir(mode=0o700)
    built: list[Path] = []
    names: set[str] = set()
    for x in sorted((x for x in m.members if x.kind == "sdist"), key=lambda x: x.path):
        pin = by_hash.get(x.sha256)
        if pin is None:
            raise InstallError(f"the bundle's lock names no package with the digest of {x.path}; refused.")
        ready = [
            w
            for w in m.members
            if w.kind == "wheel"
            and w.path.startswith("sdists/")
            and _is_wheel_of(w.path.rsplit("/", 1)[-1], pin.name, pin.version)
        ]
        if ready:  # built on the builder from this sdist and the same hashed closure (signed with it)
            progress.phase(f"installing {ready[0].path.rsplit('/', 1)[-1]}, built on the builder from {x.path}")
            built.append(unpacked / ready[0].path)
            names.add(pin.name)
            continue
        argv = [
            str(uv),
            "build",
            "--wheel",
            "--offline",
            "--no-index",
            "--python",
            str(python),
            "--build-constraints",
            str(unpacked / BUILD_LOCK),
            "--require-hashes",
            "--out-dir",
            str(out),
        ]
        if any(d.kind == KIND for d in m.members):
            argv += ["--find-links", str(unpacked / BUILD_DIR)]
        progress.phase(f"building {x.path.rsplit('/', 1)[-1]} offline from the bundle's hashed build dependencies")
        before = set(out.glob("*.whl"))  # uv also writes a .gitignore there
        runner([*argv, str(unpacked / x.path)], env=dict(env), timeout=BUILD_TIMEOUT, what=f"building {x.path}")
        made = sorted(set(out.glob("*.whl")) - before)
        if len(made) != 1 or not _is_wheel_of(made[0].name, pin.name, pin.version):
            raise InstallError(
                f"building {x.path} made {', '.join(p.name for p in made) or 'nothing'}; expected one wheel of "
                f"{pin.name} {pin.version}."
            )
        built.append(made[0])
        names.add(pin.name)
    rest = [p for p in pins if p.name not in names]
    text = "".join(
        f"{p.name}=={p.version} " + " ".join(f"--hash=sha256:{h}" for h in sorted(p.hashes)) + "\n" for p in rest
    )
    with create_under(unpacked, NODE_LOCK) as f:
        f.write(text.encode())
    return built, unpacked / NODE_LOCK


def _is_wheel_of(filename: str, name: str, version: str) -> bool:
    try:
        got_name, got_version, _, _ = parse_wheel_filename(filename)
    except InvalidWheelFilename:
        return False
    return canonicalize_name(got_name) == canonicalize_name(name) and canonicalize_version(
        got_version
    ) == canonicalize_version(version)
