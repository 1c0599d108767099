"""The offline installer: verify, unpack, install with the bundled uv, verify, probe, swap into place.

Nothing is decompressed before the signature policy is met; every member is checked against the signed
manifest, the node's only instructions; no network; the target holds the complete old or new environment
at every instant, and a failure or kill leaves the old one working (docs/site-administrators.md)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from lockbuild.bundle.manifest import Manifest
from lockbuild.choice.ranking import check_not_older
from lockbuild.errors import InstallError, LockbuildError
from lockbuild.hubcache.envvars import with_models_env
from lockbuild.install.marker import read_marker
from lockbuild.install.moduledir import ModuleTarget, Pending, remove_module
from lockbuild.install.modulefile import format_of, spec_of
from lockbuild.install.node import Node, detect, free_bytes
from lockbuild.install.nodecheck import Facts, GpuCheck, Needs, jit_notes, unmet
from lockbuild.install.places import check_target, prepare
from lockbuild.install.pythons import PYTHONS, bundled_python, check_usable_by_others, collect, readable_by_others
from lockbuild.install.stage import Hook, Stage, View
from lockbuild.install.swap import STAGING_SUFFIX, clean_stale, engine_lock, swap_into_place
from lockbuild.install.tools import locate_python
from lockbuild.interpreter import executable
from lockbuild.progress import Progress
from lockbuild.trust import TrustedBundle, load_trust_store, open_source, trust_dir
from lockbuild.trust.source import BundleFile, Source

VERIFY_TIMEOUT = 600.0
PlacePython = Callable[[Manifest, Path], contextlib.AbstractContextManager[Path]]  # (manifest, unpacked) -> its python


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
    environ: Mapping[str, str] = field(default_factory=dict)  # the CLI's; uv and the engine get allow-lists of it
    models: Path | None = None  # --models: HF_HUB_CACHE (and HF_HUB_OFFLINE=1) among the runtime settings
    modulefiles: ModuleTarget | None = None  # --modulefiles: the module file written with the swap


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
    python: str = ""  # the interpreter the environment is built with (empty: unchanged, none chosen)
    python_origin: str = ""  # "bundle", "--python", "system" or "PATH"
    warnings: tuple[str, ...] = ()

    def python_line(self) -> str:
        return f"\n  python: {self.python} (from {self.python_origin})" if self.python else ""

    def to_json(self) -> dict[str, Any]:
        return {
            "python": {"path": self.python, "from": self.python_origin} if self.python else None,
            "warnings": list(self.warnings),
            "status": self.status,
            "engine": self.engine,
            "version": self.version,
            "variant": self.variant,
            "path": str(self.path),
            "bundle_sha256": self.bundle_sha256,
            "signers": list(self.signers),
            "seconds": round(self.seconds, 3),
        }


def _no_hook(_phase: str) -> None:
    return None


class Installer:
    """``hook`` is called with each phase's name ("extract", "install", "verify", "swap") as it ends:
    the tests' fault injection (a SIGKILL there) proves a kill at any phase leaves the old environment."""

    def __init__(
        self,
        options: InstallOptions,
        *,
        progress: Progress | None = None,
        node: Node | None = None,
        hook: Hook | None = None,
    ):
        self.o = dataclasses.replace(options, root=options.root.absolute())
        self.progress = progress or Progress.quiet()
        self.node = node
        self.hook = hook or _no_hook

    def install(self, source: Source | Path) -> InstallResult:
        """Install a bundle from any source (a ``.lbz`` path, or a source named by
        ``lockbuild.site.sources.named_source``): the one trust decision, then the one extraction."""
        started = time.monotonic()
        if isinstance(source, Path):
            source = BundleFile(source)
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="lockbuild-node") as pool:
            # the node's facts (nvidia-smi can take a second) are gathered while the bundle is hashed
            facts = pool.submit(detect, environ=self.o.environ) if self.node is None else None
            self.progress.phase(f"checking the signatures of {Path(source.label).name}")
            trusted = open_source(source, load_trust_store(trust_dir(self.o.trust_dir)), threshold=self.o.threshold)
            node = facts.result() if facts is not None else self.node
        # the signed manifest, read only after the signature policy is met; extract checks every member against it
        return self.install_opened(trusted, started, node)

    def install_opened(self, opened: TrustedBundle, started: float, node: Node | None = None) -> InstallResult:
        m, p = opened.manifest, self.progress
        if m.model is not None:
            raise InstallError(
                f"{opened.path.name} is a model bundle ({m.model.repo} at {m.model.commit}); it has no "
                "environment to install under --root.",
                tip="Install it with --models DIR.",
            )
        node = node or self.node or detect(environ=self.o.environ)
        # --python wins; else the bundle's own interpreter (placed after the extraction); else the system's
        # (/usr/bin, /usr/local/bin); only then, with a warning, one found elsewhere on PATH
        found = locate_python(m.python, self.o.python) if self.o.python or not m.install.interpreter else None
        engine_dir = prepare(self.o.root, m.engine)
        target = engine_dir / f"{m.version}-{m.variant}"
        if self.o.modulefiles is not None:  # DIR/ENGINE checked by --root's rule before any work
            self.o.modulefiles.engine_dir(m.engine)
        if found is not None and readable_by_others(engine_dir):  # who can use the environment can run its python
            check_usable_by_others(found.path, origin=found.origin, want=m.python, used_by=str(target))
        python = found.path if found is not None else None
        if found is not None:
            shown, origin = str(found.path), found.origin
        else:
            member = next(x for x in m.members if x.path == m.install.interpreter)
            shown, origin = str(self.o.root / PYTHONS / member.sha256 / executable(m.python)), "bundle"
        warnings = (found.warning,) if found is not None and found.warning else ()

        def result(status: Literal["installed", "unchanged"]) -> InstallResult:
            return InstallResult(
                status,
                m.engine,
                m.version,
                m.variant,
                target,
                opened.sha256,
                opened.signer_ids,
                time.monotonic() - started,
                *((shown, origin) if status == "installed" else ("", "")),
                warnings=warnings if status == "installed" else (),
            )

        with engine_lock(engine_dir, wait=self.o.wait):
            stale = clean_stale(engine_dir)
            if stale:
                p.note(f"removed {len(stale)} staging dir(s) left by an interrupted run")
            check_target(target)
            self.check_fit(m, node, engine_dir)
            for note in jit_notes(Needs.of(m), node) if self.o.gpu_check != "skip" else ():
                p.note(note)
            current = read_marker(target)
            if current is not None and not self.o.force and current.bundle_sha256 == opened.sha256:
                return result("unchanged")  # the CLI says so, once
            if current is not None:
                check_not_older(str(target), current.serial, m.serial, allow_downgrade=self.o.allow_downgrade)
            self._stage_and_swap(opened, python, node, target)
        p.finish()  # the CLI prints the result, once, on stdout
        return result("installed")

    def check_fit(self, m: Manifest, node: Node, where: Path) -> None:
        """The node check (install/nodecheck.py): its GPUs, driver, platform and the free space at ``where``."""
        reasons = unmet(Needs.of(m), Facts(node, frozenset({m.python}), free_bytes(where)), self.o.gpu_check)
        if reasons:
            raise InstallError(
                f"this node does not meet the needs of {m.bundle_name}: " + "; ".join(reasons) + ".",
                tip="`lockbuild doctor` shows the node's facts; use a bundle built for this node, or free space.",
            )

    def _stage_and_swap(self, opened: TrustedBundle, python: Path | None, node: Node, target: Path) -> None:
        staged = target.with_name(target.name + STAGING_SUFFIX)
        unpacked = target.with_name(target.name + ".bundle" + STAGING_SUFFIX)
        pending = self._module_file(opened, target)

        def swap() -> None:
            self.progress.phase(f"swapping {target.name} into place")
            if pending is not None:  # written before the swap; renamed into place, with the default, right after it
                pending.write()

            def exchanged() -> None:
                if pending is not None:
                    pending.commit(node, self.o.gpu_check)
                self.hook("swap")

            swap_into_place(staged, target, after_exchange=exchanged)

        try:
            self.build_env(opened, python, node, staged, unpacked, then=swap, final=target)
        except BaseException:
            shutil.rmtree(staged, ignore_errors=True)
            if pending is not None:
                pending.discard()
            raise

    def _module_file(self, opened: TrustedBundle, target: Path) -> Pending | None:
        mods = self.o.modulefiles
        if mods is None:
            return None
        m = with_models_env(opened.manifest, self.o.models)
        spec = spec_of(m, opened.sha256, opened.signer_ids, str(target), "install")
        return Pending(mods, mods.engine_dir(m.engine), spec)

    def build_env(
        self,
        opened: TrustedBundle,
        python: Path | None,
        node: Node,
        staged: Path,
        unpacked: Path,
        *,
        then: Callable[[], None],
        view: View | None = None,
        place_python: PlacePython | None = None,
        final: Path | None = None,
    ) -> None:
        """Everything `install` does to make the environment in ``staged``: the one extraction into
        ``unpacked`` (removed afterwards, whatever happens), uv offline with --require-hashes, the verify
        command, the GPU probe and the records; then ``then()`` (install: the swap), with the bundle's
        interpreter still held. An image (lockbuild.image) passes its ``view`` (the prefix its nodes mount
        it at) and ``place_python`` (its interpreter goes inside the image)."""
        manifest = with_models_env(opened.manifest, self.o.models)
        stage = Stage(unpacked, staged, manifest, self.progress, self.hook, self.o.environ, view, final)
        cleaner: threading.Thread | None = None
        try:
            with contextlib.ExitStack() as held:
                unpacked.mkdir(mode=0o700)
                opened.extract(unpacked, progress=self.progress)
                self.hook("extract")
                if python is None:
                    python = held.enter_context((place_python or self._bundled_python)(opened.manifest, unpacked))
                stage.build(python)
                # uv is done with the wheels and its cache (the environment holds hard links, not
                # references): remove them while the verify command runs instead of after it
                cleaner = threading.Thread(target=_remove_spent, args=(unpacked,), name="lockbuild-cleanup")
                cleaner.start()
                stage.verify(timeout=self.o.verify_timeout, gpu_check=self.o.gpu_check, node=node)
                mods = self.o.modulefiles
                where = (str(mods.dir.absolute()), mods.fmt) if mods is not None else ("", "")
                stage.write_records(opened.sha256, opened.signer_ids, where)
                cleaner.join()
                then()
        finally:
            if cleaner is not None:
                cleaner.join()
            shutil.rmtree(unpacked, ignore_errors=True)

    def _bundled_python(self, m: Manifest, unpacked: Path) -> contextlib.AbstractContextManager[Path]:
        """The bundle's interpreter, shared under ``<root>/.python/<sha256>/`` (lockbuild.install.pythons)."""
        member = next(x for x in m.members if x.path == m.install.interpreter)
        self.progress.phase(f"placing the bundle's Python {m.python} in {self.o.root / PYTHONS}")
        return bundled_python(self.o.root, unpacked / member.path, member.sha256, m.python, wait=self.o.wait)


def _recorded_modules(recorded: str, fmt: str, given: ModuleTarget | None) -> ModuleTarget | None:
    """Where the install wrote its module file (its marker's record), else ``--modulefiles``."""
    if recorded and fmt in ("lua", "tcl"):
        return ModuleTarget(Path(recorded), format_of(fmt))
    return given


SPENT = ("wheels", "sdists", ".uv-cache")  # what only uv reads: the records (lock, recipe, SBOM) stay


def _remove_spent(unpacked: Path) -> None:
    for name in SPENT:
        shutil.rmtree(unpacked / name, ignore_errors=True)


def remove(
    root: Path,
    engine: str,
    build_id: str,
    *,
    wait: float = 0.0,
    modulefiles: ModuleTarget | None = None,
    environ: Mapping[str, str] | None = None,
) -> Path:
    """Remove an installed environment; the removal is atomic from the outside (rename, then delete).
    The same ownership rules as install apply; the lock file goes with the last environment. The module
    file the install recorded (or ``modulefiles``' DIR) goes too, and the engine's default moves."""
    root = root.absolute()
    engine_dir = root / engine
    target = engine_dir / build_id
    plain = all(name and os.path.sep not in name and not name.startswith(".") for name in (engine, build_id))
    marker = read_marker(target) if plain else None
    if marker is None:
        raise InstallError(
            f"no lockbuild environment {engine} {build_id} under {root}.",
            tip="`lockbuild list --root ROOT` shows what is installed.",
        )
    mods = _recorded_modules(marker.modulefiles, marker.modulefiles_format, modulefiles)
    if mods is not None and not os.path.lexists(mods.dir):
        mods = None  # the folder is gone: nothing of it to remove, and nothing made again
    engine_dir = prepare(root, engine)
    if mods is not None:
        mods.engine_dir(engine)  # checked by --root's rule before anything is removed
    with engine_lock(engine_dir, wait=wait):
        clean_stale(engine_dir)
        check_target(target)
        doomed = target.with_name(f"{target.name}.removing{STAGING_SUFFIX}")
        target.rename(doomed)
        if mods is not None:  # the build is no longer installed: its file goes, the default moves
            remove_module(mods, engine, build_id, detect(environ=environ or {}), "auto")
        shutil.rmtree(doomed, ignore_errors=True)
    with contextlib.suppress(LockbuildError):  # the environment is gone; an interpreter can go next time
        collect(root, wait=wait)  # interpreters under <root>/.python that no environment uses any more
    return target
