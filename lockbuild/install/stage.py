"""Building an environment from an unpacked bundle, as its signed manifest says: uv venv, the offline
uv install, the source and assets placed, the verify command and the GPU probe, the records.

Only the manifest's [install] table is read, never the recipe. Every file is created O_CREAT|O_EXCL|O_NOFOLLOW
in the staging directory, so an existing name (bin/python, a script) is refused, never written through."""

from __future__ import annotations

import datetime as dt
import json
import os
import shlex
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from lockbuild import __version__
from lockbuild.bundle.manifest import Manifest
from lockbuild.envtable import expand_prefix
from lockbuild.errors import InstallError
from lockbuild.fsio import create_under, make_dirs_under
from lockbuild.install import archives, envfiles
from lockbuild.install.marker import MARKER, RECORD_DIR, Installed
from lockbuild.install.node import Node
from lockbuild.install.nodecheck import GpuCheck
from lockbuild.install.runenv import engine_env, run_command
from lockbuild.install.sdists import build_sdists, has_build_closure
from lockbuild.install.tools import extract_uv
from lockbuild.proc.uvtool import clean_env
from lockbuild.progress import Progress
from lockbuild.times import iso

Hook = Callable[[str], None]
Runner = Callable[..., str]  # runenv.run_command's signature: (argv, *, env, timeout, what, cwd=None) -> output
PROBE_TIMEOUT = 300.0

TORCH_PROBE = """\
import torch
assert torch.cuda.is_available(), "torch sees no CUDA device"
x = torch.ones(64, device="cuda")
print(float((x * 2).sum()), torch.cuda.get_device_name(0), torch.cuda.get_device_capability(0))
"""


@dataclass(frozen=True)
class View:
    """Where the environment's own programs (uv, the verify command, the probe) see it, and how they are
    run there. An install: the staging directory itself, run directly. An image (lockbuild.image): the
    prefix its nodes mount it at, shown over the staging directory in a mount namespace, so every path
    uv and Python write into the environment is the prefix."""

    at: Path
    run: Runner = run_command
    existing: bool = False  # the directory already holds the image's interpreter: uv venv --allow-existing
    fixed: dt.datetime | None = None  # an image's marker: this time (its cut-off) and no device or inode


@dataclass(frozen=True)
class Stage:
    """One environment being built: the unpacked bundle, the staging directory, what drives it."""

    unpacked: Path
    staged: Path
    manifest: Manifest
    progress: Progress
    hook: Hook
    environ: Mapping[str, str]  # what the installer may pass on (filtered again for the engine's code)
    view: View | None = None  # None: the staging directory, as `install` builds it
    final: Path | None = None  # where an install's environment ends up (after the swap)

    @property
    def at(self) -> Path:
        return self.view.at if self.view is not None else self.staged

    @property
    def settings(self) -> tuple[tuple[str, str], ...]:
        """[engine.env] with ``{prefix}`` as the environment's final path: an image's prefix, an install's
        directory after the swap (never the staging path), each expanded value checked again (envtable)."""
        t = self.manifest.install
        home = self.view.at if self.view is not None else (self.final or self.staged)
        try:
            return expand_prefix(t.env, str(home), allow_network=t.allow_network)
        except ValueError as exc:
            raise InstallError(
                f"the bundle's runtime setting {exc}; refused.",
                tip="Install to a directory whose path is plain text (no control characters), or rebuild the "
                "bundle without {prefix} in that setting.",
            ) from None

    @property
    def run(self) -> Runner:
        return self.view.run if self.view is not None else run_command

    def build(self, python: Path) -> None:
        m, p = self.manifest, self.progress
        uv = extract_uv(self.unpacked / m.install.uv, self.unpacked / ".uv")
        env = clean_env(self.unpacked / ".uv-cache", offline=True, inherit=self.environ)
        p.phase(f"creating a Python {m.python} environment")
        existing = ["--allow-existing"] if self.view is not None and self.view.existing else []
        self.run(
            [str(uv), "venv", "--relocatable", "--python", str(python), "--no-project", *existing, str(self.at)],
            env=env,
            timeout=600,
            what="uv venv",
        )
        st = self.staged.lstat()
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            raise InstallError(f"uv venv did not make a plain directory at {self.staged}.")
        self.staged.chmod(0o755)
        self.hook("install")
        lock, kinds = self.unpacked / "lock" / "requirements.txt", {"wheel", "sdist"}
        if has_build_closure(m):  # sdists built from the bundle's hashed build dependencies only
            built, lock = build_sdists(uv, python, self.unpacked, m, env, p, self.run)
            self.run(
                [
                    str(uv),
                    "pip",
                    "install",
                    "--python",
                    str(self.at / "bin" / "python"),
                    "--offline",
                    "--no-index",
                    "--no-deps",
                    *map(str, built),
                ],
                env=env,
                timeout=3600,
                what="uv pip install",
            )
            kinds = {"wheel"}
        # uv unpacks each wheel once into its cache (.uv-cache, beside the staging directory, so on the
        # target's filesystem) and hard-links the files into the environment: no second copy is written
        argv = [
            str(uv),
            "pip",
            "install",
            "--python",
            str(self.at / "bin" / "python"),
            "--offline",
            "--no-index",
            "--require-hashes",
            "--link-mode",
            "hardlink",
        ]
        for kind, folder in (("wheel", "wheels"), ("sdist", "sdists")):
            if kind in kinds and any(x.kind == kind for x in m.members):  # only folders the bundle has
                argv += ["--find-links", str(self.unpacked / folder)]
        if "sdist" not in kinds or not any(x.kind == "sdist" for x in m.members):
            argv.append("--no-build")
        argv += ["-r", str(lock)]
        count = sum(1 for x in m.members if x.kind in ("wheel", "sdist"))
        p.phase(f"installing {count} package(s) offline with uv {m.uv_version}")
        self.run(argv, env=env, timeout=3600, what="uv pip install")
        self._place()
        envfiles.write(self.staged, m.python, self.settings)  # [engine.env]: every entry point sees it

    def _place(self) -> None:
        t, p = self.manifest.install, self.progress
        if t.source is not None:
            p.phase(f"unpacking the source into {t.source.dir}/")
            archives.unpack_archive(
                self.unpacked / t.source.member,
                self.staged / t.source.dir,
                strip=t.source.top or None,
                within=self.staged,
            )
        for a in t.assets:
            name = a.member.rsplit("/", 1)[-1]
            p.phase(f"unpacking {name} into {a.dir}/")
            if archives.is_archive(name):
                archives.unpack_archive(self.unpacked / a.member, self.staged / a.dir, within=self.staged)
            else:
                archives.place_file(self.unpacked / a.member, self.staged, f"{a.dir}/{name}")
        for x in t.extra_files:  # placed as they are, never unpacked
            p.phase(f"placing {x.dest}")
            archives.place_file(self.unpacked / x.member, self.staged, x.dest)

    def verify(self, *, timeout: float, gpu_check: GpuCheck, node: Node) -> None:
        t, p = self.manifest.install, self.progress
        binary = self.staged / "bin" / t.binary
        if not binary.exists():
            raise InstallError(
                f"the environment has no bin/{t.binary} after installing; the bundle's manifest names "
                f"{t.binary!r} as the engine's binary.",
                tip="Rebuild the bundle with engine.binary set to a console script the engine installs.",
            )
        env = engine_env(self.at, self.environ, self.settings)
        argv = list(t.verify)
        if (self.staged / "bin" / argv[0]).exists():
            argv[0] = str(self.at / "bin" / argv[0])
        shown = shlex.join(t.verify)
        p.phase(f"running the verify command: {shown}")
        self.run(argv, env=env, timeout=timeout, what=f"the verify command ({shown})", cwd=self.at)
        self.hook("verify")
        self._probe(env, gpu_check, node)

    def _probe(self, env: dict[str, str], mode: GpuCheck, node: Node) -> None:
        probe = self.manifest.install.gpu_probe
        if probe == "none" or mode == "skip":
            return
        if mode == "auto" and not node.has_nvidia:
            self.progress.note("no NVIDIA driver on this node: skipping the GPU probe (--gpu-check require forces it)")
            return
        py = str(self.at / "bin" / "python")
        argv = [py, "-c", TORCH_PROBE] if probe == "torch" else [py, str(self.at / probe)]
        self.progress.phase("probing the GPU")
        try:
            self.run(argv, env=env, timeout=PROBE_TIMEOUT, what="the GPU probe", cwd=self.at)
        except InstallError as exc:
            hint = None
            if "no kernel image" in exc.message:
                hint = (
                    f"this build ({self.manifest.variant}) has no kernels for this node's GPU: install the bundle "
                    "of another variant built for it (another CUDA version or compute capability)."
                )
            raise InstallError(exc.message, tip=hint or "Check the driver with nvidia-smi.") from None

    def write_records(self, sha256: str, signers: tuple[str, ...], modules: tuple[str, str] = ("", "")) -> None:
        """The lock, recipe and SBOM as installed (the record of what is there), then the marker, which
        names this directory's device and inode (kept by the swap's rename)."""
        m = self.manifest
        make_dirs_under(self.staged, f"{RECORD_DIR}/lock")
        for x in m.members:
            if x.kind in ("recipe", "lock", "sbom"):
                archives.place_file(self.unpacked / x.path, self.staged, f"{RECORD_DIR}/{x.path}")
        with create_under(self.staged, f"{RECORD_DIR}/bundle.toml") as f:
            f.write(m.to_toml())
        st = os.lstat(self.staged)
        fixed = self.view.fixed if self.view is not None else None
        dev, ino = (0, 0) if fixed is not None else (st.st_dev, st.st_ino)  # an image is no directory of this disk
        marker = Installed(
            engine=m.engine,
            version=m.version,
            variant=m.variant,
            binary=f"bin/{m.install.binary}",
            requirements=m.install.requirements,
            exclude_newer=iso(m.as_of),
            uv=m.uv_version,
            installed=iso(fixed or dt.datetime.now(dt.UTC)),
            bundle=m.bundle_name,
            bundle_sha256=sha256,
            serial=m.serial,
            signers=signers,
            python=m.python,
            platform=m.platform,
            lockbuild=__version__,
            dev=dev,
            ino=ino,
            env=m.install.env,
            modulefiles=modules[0],
            modulefiles_format=modules[1],
        )
        with create_under(self.staged, MARKER) as f:
            f.write((json.dumps(marker.to_json(), indent=2, sort_keys=True) + "\n").encode())
            f.flush()
            os.fsync(f.fileno())
