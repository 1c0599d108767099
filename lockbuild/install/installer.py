"""The offline installer: verify, unpack, install with the bundled uv, verify, probe, swap into place.

Promises (docs/site-administrators.md): nothing is decompressed before the signature policy is met;
every member is checked against the signed manifest; no network is used; the target path holds the
complete old environment or the complete new one at every instant; a failure or a kill leaves the
old environment working and is cleaned up by the next run.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from lockbuild import __version__
from lockbuild.bundle.manifest import Manifest
from lockbuild.bundle.read import read_head
from lockbuild.errors import InstallError
from lockbuild.install import archives
from lockbuild.install.checks import (
    GpuCheck,
    check_gpu,
    check_node,
    check_space,
)
from lockbuild.install.marker import MARKER, RECORD_DIR, Installed, read_marker
from lockbuild.install.node import Node, detect
from lockbuild.install.swap import STAGING_SUFFIX, clean_stale, engine_lock, swap_into_place
from lockbuild.install.tools import extract_uv, find_python
from lockbuild.progress import Progress
from lockbuild.recipe import Build, Engine, Recipe, parse_recipe
from lockbuild.times import iso
from lockbuild.trust import TrustedBundle, load_store, open_bundle, trust_dir
from lockbuild.uvtool import clean_env

FAULT_ENV = "LOCKBUILD_FAULT_INJECT"  # tests only: SIGKILL this process at the named phase
VERIFY_TIMEOUT = 600.0
PROBE_TIMEOUT = 300.0

TORCH_PROBE = """\
import torch
assert torch.cuda.is_available(), "torch sees no CUDA device"
x = torch.ones(64, device="cuda")
print(float((x * 2).sum()), torch.cuda.get_device_name(0), torch.cuda.get_device_capability(0))
"""


@dataclass(frozen=True)
class InstallOptions:
    root: Path
    trust_dir: Path | None = None
    python: Path | None = None
    gpu_check: GpuCheck = "auto"
    force: bool = False
    allow_downgrade: bool = False
    threshold: int | None = None
    wait: float = 0.0
    verify_timeout: float = VERIFY_TIMEOUT


@dataclass(frozen=True)
class InstallResult:
    status: Literal["installed", "unchanged"]
    engine: str
    version: str
    variant: str
    path: Path
    bundle_sha256: str
    signers: tuple[str, ...]
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "engine": self.engine,
            "version": self.version,
            "variant": self.variant,
            "path": str(self.path),
            "bundle_sha256": self.bundle_sha256,
            "signers": list(self.signers),
            "seconds": round(self.seconds, 3),
        }


def _checkpoint(phase: str) -> None:
    if os.environ.get(FAULT_ENV) == phase:
        os.kill(os.getpid(), signal.SIGKILL)


def _tail(text: str, lines: int = 12) -> str:
    kept = [line for line in text.strip().splitlines() if line.strip()]
    return "\n".join(f"    {line}" for line in kept[-lines:])


def _run(argv: Sequence[str], *, env: dict[str, str], timeout: float, what: str, cwd: Path | None = None) -> str:
    try:
        proc = subprocess.run(
            list(argv), env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        raise InstallError(f"{what} did not finish within {timeout:.0f} s.") from None
    except OSError as exc:
        raise InstallError(f"{what}: cannot run {argv[0]}: {exc.strerror}.") from None
    out = (proc.stdout or "") + (proc.stderr or "")
    if proc.returncode != 0:
        raise InstallError(f"{what} failed (exit {proc.returncode}):\n{_tail(out)}")
    return out


class Installer:
    def __init__(self, options: InstallOptions, *, progress: Progress | None = None, node: Node | None = None):
        self.o = dataclasses.replace(options, root=options.root.absolute())
        self.progress = progress or Progress.quiet()
        self.node = node

    def install(self, bundle: Path) -> InstallResult:
        started = time.monotonic()
        p = self.progress
        p.phase(f"checking the signatures of {bundle.name}")
        verified = open_bundle(bundle, load_store(trust_dir(self.o.trust_dir)), threshold=self.o.threshold)
        manifest = verified.manifest  # the signed manifest: read only after the signature policy is met
        _, recipe_raw = read_head(bundle)
        recipe = parse_recipe(recipe_raw.decode("utf-8"), f"{bundle.name}:recipe.toml")
        build = recipe.builds[0]
        if (recipe.engine.name, build.version, build.variant) != (manifest.engine, manifest.version, manifest.variant):
            raise InstallError("the bundle's recipe and manifest name different builds; the bundle is malformed.")
        node = self.node or detect()
        check_node(manifest, node)
        python = find_python(manifest.python, self.o.python)
        check_gpu(build, node, self.o.gpu_check)
        engine_dir = self.o.root / manifest.engine
        target = engine_dir / build.id
        signers = tuple(k.key_id_hex for k in verified.signers)

        def result(status: Literal["installed", "unchanged"]) -> InstallResult:
            return InstallResult(
                status,
                manifest.engine,
                build.version,
                build.variant,
                target,
                verified.digests.sha256,
                signers,
                time.monotonic() - started,
            )

        with engine_lock(engine_dir, wait=self.o.wait):
            stale = clean_stale(engine_dir)
            if stale:
                p.phase(f"removed {len(stale)} staging dir(s) left by an interrupted run")
            current = read_marker(target)
            if current is not None and not self.o.force and current.bundle_sha256 == verified.digests.sha256:
                p.phase(f"{manifest.engine} {build.id} is already installed from this bundle; nothing to do")
                return result("unchanged")
            if current is not None and current.serial > manifest.serial and not self.o.allow_downgrade:
                raise InstallError(
                    f"{target} holds a newer build (serial {current.serial}) than this bundle ({manifest.serial}).",
                    tip="Pass --allow-downgrade to roll back on purpose.",
                )
            check_space(engine_dir, manifest, build)
            self._stage_and_swap(bundle, verified, manifest, recipe, build, python, target, signers)
        p.phase(f"installed {manifest.engine} {build.id} at {target}")
        return result("installed")

    def _stage_and_swap(
        self,
        bundle: Path,
        verified: TrustedBundle,
        manifest: Manifest,
        recipe: Recipe,
        build: Build,
        python: Path,
        target: Path,
        signers: tuple[str, ...],
    ) -> None:
        staged = target.with_name(target.name + STAGING_SUFFIX)
        unpacked = target.with_name(target.name + ".bundle" + STAGING_SUFFIX)
        try:
            unpacked.mkdir()
            verified.extract(unpacked, progress=self.progress)  # the signed file and manifest, or refused
            _checkpoint("extract")
            self._install_env(unpacked, staged, manifest, recipe.engine, build, python)
            self._verify(staged, recipe.engine, build)
            self._write_records(unpacked, staged, manifest, recipe.engine, build, verified, signers)
            self.progress.phase(f"swapping {target.name} into place")
            swap_into_place(staged, target, after_exchange=lambda: _checkpoint("swap"))
        except BaseException:
            shutil.rmtree(staged, ignore_errors=True)
            raise
        finally:
            shutil.rmtree(unpacked, ignore_errors=True)

    def _install_env(
        self, unpacked: Path, staged: Path, manifest: Manifest, engine: Engine, build: Build, python: Path
    ) -> None:
        p = self.progress
        tools = sorted((unpacked / "tools").glob("uv-*.whl"))
        if len(tools) != 1:
            raise InstallError(f"the bundle carries {len(tools)} uv wheels in tools/; expected exactly one.")
        uv = extract_uv(tools[0], unpacked / ".uv")
        env = clean_env(unpacked / ".uv-cache", offline=True)
        p.phase(f"creating a Python {manifest.python} environment")
        _run(
            [str(uv), "venv", "--relocatable", "--python", str(python), "--no-project", str(staged)],
            env=env,
            timeout=600,
            what="uv venv",
        )
        _checkpoint("install")
        env_python = staged / "bin" / "python"
        argv = [
            str(uv),
            "pip",
            "install",
            "--python",
            str(env_python),
            "--offline",
            "--no-index",
            "--require-hashes",
            "--find-links",
            str(unpacked / "wheels"),
            "-r",
            str(unpacked / "lock" / "requirements.txt"),
        ]
        if (unpacked / "sdists").is_dir():
            argv += ["--find-links", str(unpacked / "sdists")]
        else:
            argv.append("--no-build")
        count = sum(1 for m in manifest.members if m.kind in ("wheel", "sdist"))
        p.phase(f"installing {count} package(s) offline with uv {manifest.uv_version}")
        _run(argv, env=env, timeout=3600, what="uv pip install")
        if build.source is not None:
            archive = unpacked / "source" / build.source.url.rsplit("/", 1)[-1]
            p.phase(f"unpacking the source into {build.source.dir}/")
            archives.extract(archive, staged / build.source.dir, strip=build.source.top)
        if build.assets is not None:
            dest = staged / build.assets.dir
            for name in build.assets.files:
                src = unpacked / "assets" / name
                p.phase(f"unpacking {name} into {build.assets.dir}/")
                if archives.is_archive(name):
                    archives.extract(src, dest)
                else:
                    archives.place_file(src, dest)

    def _verify(self, staged: Path, engine: Engine, build: Build) -> None:
        p = self.progress
        binary = staged / "bin" / engine.binary
        if not binary.exists():
            raise InstallError(
                f"the environment has no bin/{engine.binary} after installing; the recipe says engine.binary "
                f"is {engine.binary!r}.",
                tip="Check engine.binary in the recipe against the console scripts the engine installs.",
            )
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "CONDA"))}
        env["PATH"] = f"{staged / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env["VIRTUAL_ENV"] = str(staged)
        argv = list(engine.verify)
        if (staged / "bin" / argv[0]).exists():
            argv[0] = str(staged / "bin" / argv[0])
        p.phase(f"running the verify command: {' '.join(engine.verify)}")
        _run(
            argv,
            env=env,
            timeout=self.o.verify_timeout,
            what=f"the verify command ({' '.join(engine.verify)})",
            cwd=staged,
        )
        _checkpoint("verify")
        self._probe(staged, engine, build, env)

    def _probe(self, staged: Path, engine: Engine, build: Build, env: dict[str, str]) -> None:
        mode = self.o.gpu_check
        if engine.gpu_probe == "none" or mode == "skip":
            return
        node = self.node or detect()
        if mode == "auto" and not node.has_nvidia:
            self.progress.phase("no NVIDIA driver on this node: skipping the GPU probe (--gpu-check require forces it)")
            return
        py = str(staged / "bin" / "python")
        argv = [py, "-c", TORCH_PROBE] if engine.gpu_probe == "torch" else [py, str(staged / engine.gpu_probe)]
        self.progress.phase("probing the GPU")
        try:
            _run(argv, env=env, timeout=PROBE_TIMEOUT, what="the GPU probe", cwd=staged)
        except InstallError as exc:
            hint = None
            if "no kernel image" in exc.message:
                hint = (
                    f"this build ({build.variant}) has no kernels for this node's GPU: install the bundle of "
                    "another variant built for it (another CUDA version or compute capability)."
                )
            raise InstallError(exc.message, tip=hint or "Check the driver with nvidia-smi.") from None

    def _write_records(
        self,
        unpacked: Path,
        staged: Path,
        manifest: Manifest,
        engine: Engine,
        build: Build,
        verified: TrustedBundle,
        signers: tuple[str, ...],
    ) -> None:
        records = staged / RECORD_DIR
        records.mkdir(parents=True, exist_ok=True)
        (records / "lock").mkdir(exist_ok=True)
        for m in manifest.members:
            if m.kind in ("recipe", "lock", "sbom"):
                shutil.copyfile(unpacked / m.path, records / m.path)
        (records / "bundle.toml").write_bytes(manifest.to_toml())
        marker = Installed(
            engine=manifest.engine,
            version=manifest.version,
            variant=manifest.variant,
            binary=f"bin/{engine.binary}",
            requirements=build.requirements,
            exclude_newer=iso(manifest.as_of),
            uv=manifest.uv_version,
            installed=iso(dt.datetime.now(dt.UTC)),
            bundle=manifest.bundle_name,
            bundle_sha256=verified.digests.sha256,
            serial=manifest.serial,
            signers=signers,
            python=manifest.python,
            platform=manifest.platform,
            lockbuild=__version__,
        )
        tmp = staged / (MARKER + ".tmp")
        with tmp.open("w", encoding="utf-8") as f:
            json.dump(marker.to_json(), f, indent=2, sort_keys=True)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(staged / MARKER)


def remove(root: Path, engine: str, build_id: str, *, wait: float = 0.0) -> Path:
    """Remove an installed environment; the removal is atomic from the outside (rename, then delete)."""
    root = root.absolute()
    engine_dir = root / engine
    target = engine_dir / build_id
    if not (target / MARKER).is_file():
        raise InstallError(
            f"no lockbuild environment {engine} {build_id} under {root}.",
            tip="`lockbuild list --root ROOT` shows what is installed.",
        )
    with engine_lock(engine_dir, wait=wait):
        clean_stale(engine_dir)
        doomed = target.with_name(f"{target.name}.removing{STAGING_SUFFIX}")
        target.rename(doomed)
        shutil.rmtree(doomed, ignore_errors=True)
    return target
