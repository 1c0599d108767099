"""``lockbuild test``: install a signed bundle into a throw-away root inside the bubblewrap sandbox, run its
commands, and judge every network attempt from a tracer that runs outside the sandbox (:func:`self_test`).

The judge is outside the judged: the steps come from the inner run's result line, the attempts from the
tracer's log only. A tracer missing, unable to ptrace, or blind inside (no canary) gives "not checked"."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import secrets
import shutil
import stat
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lockbuild
from lockbuild import fsio
from lockbuild.bundle.firstuse import bundle_first_use
from lockbuild.errors import InstallError, LockbuildError, PlatformError
from lockbuild.hubcache.envvars import with_models_env
from lockbuild.install.node import detect
from lockbuild.install.nodecheck import Facts, Needs, unmet
from lockbuild.install.runenv import GPU_PASSED, PASSED
from lockbuild.install.tools import find_python
from lockbuild.limits import MiB
from lockbuild.proc.sandbox import SYSTEM_DIRS, Bind, SandboxTimeout, Spec
from lockbuild.proc.sandbox import run as sandboxed
from lockbuild.progress import Progress
from lockbuild.selftest import TIMEOUT, inner, seccomp, trace, workdir
from lockbuild.selftest.report import Report, Step, judge
from lockbuild.site.sources import DeltaFile, PartsFile, named_source
from lockbuild.trust import load_trust_store, open_source, trust_dir
from lockbuild.trust.source import BundleFile, Source, signature_path

NO_TRACER = "strace is not installed"
BOX = Path("/selftest")  # where the sandbox sees the test's files
CODE = Path("/opt/lockbuild-selftest")  # lockbuild's own package, read-only, for the inner run
GPU_BIN = Path("/opt/lockbuild-gpu/bin")  # nvidia-smi, under --gpu
MAX_OUTPUT = MiB  # bytes of the inner run's output kept for a message
SECCOMP_PROBLEM = "the engine installed a seccomp filter: this self-test cannot vouch for it"


@dataclass(frozen=True)
class SelfTestOptions:
    trust_dir: Path | None = None
    threshold: int | None = None
    python: Path | None = None
    timeout: float = TIMEOUT
    tracer: bool = True  # trace with strace (without it the verdict is "not checked")
    gpu: bool = False  # also the GPU probe and the gpu-smoke command, where a GPU is present
    environ: Mapping[str, str] = field(default_factory=dict)  # the CLI's; the test run gets an allow-list of it
    base: Path | None = None  # where lockbuild-selftest-<uid> lives (default: the temp directory)
    model: str | None = None  # --model MODEL.lbz: placed (trusted) in the sandbox's HF_HUB_CACHE, read-only


def platform_problems(manifest: Any, python: Path | None) -> tuple[str, ...]:
    """Why this machine cannot run the bundle (empty: it can). GPU needs and free space are not platform
    problems: the install step reports them like any other failure."""
    pythons: frozenset[str] = frozenset()
    if manifest.install.interpreter is not None:
        pythons = frozenset({manifest.python})  # the bundle carries its interpreter
    else:
        with contextlib.suppress(InstallError):
            find_python(manifest.python, python)
            pythons = frozenset({manifest.python})
    facts = Facts(detect(), pythons, 1 << 62)
    return unmet(Needs(manifest.python, manifest.platform, None, 0), facts, "skip")


def copy_trust(src: Path, dest: Path, most: int = MiB) -> None:
    """The trust directory's regular files into ``dest`` (0700, this user's), bound read-only into the
    sandbox, where a root-owned /etc/lockbuild/keys would show as owned by nobody. The outer run has already
    checked the signatures against ``src`` itself."""
    dest.mkdir(mode=0o700)
    with fsio.opened_dir(src, follow=True) as fd:
        for name in sorted(fsio.list_dir(fd)):
            st = fsio.lstat_at(name, fd)
            if st is None or not stat.S_ISREG(st.st_mode) or st.st_size > most:
                continue
            data = fsio.read_regular(name, what="trusted key", max_size=most, dir_fd=fd)
            with fsio.create_under(dest, name, 0o600) as f:
                f.write(data)


def _system(p: Path) -> bool:
    return any(p == Path(d) or Path(d) in p.parents for d in SYSTEM_DIRS)


def _code_binds(node_python: Path | None) -> tuple[list[Bind], list[str]]:
    """What the inner run needs of this machine: the interpreter (and a venv's prefix), the site directories
    of lockbuild's dependencies, lockbuild's own package (at :data:`CODE`), the node's Python. Read-only."""
    pkg = Path(lockbuild.__file__).resolve().parent
    binds = [Bind(pkg, CODE / "lockbuild")]
    want: list[Path] = []
    want += [Path(sys.prefix), Path(sys.base_prefix), Path(sys.exec_prefix)]
    for exe in (Path(sys.executable), *([node_python] if node_python else [])):
        real = exe.resolve()
        want += [exe.parent.parent, real.parent.parent]
    path = []
    for entry in sys.path:
        site = Path(entry)
        if not entry or site.name not in ("site-packages", "dist-packages") or not site.is_dir():
            continue
        path.append(str(site))
        want.append(site)
    seen: list[Path] = []
    for w in want:
        d = Path(os.path.abspath(w))  # noqa: PTH100 (the path as named: a venv's bin/python is a link)
        if _system(d) or not d.exists() or any(s == d or s in d.parents for s in seen):
            continue
        seen = [s for s in seen if d not in s.parents] + [d]
    binds += [Bind(p, p) for p in seen]
    return binds, [str(CODE), *path]


def _gpu_binds(environ: Mapping[str, str]) -> tuple[list[Bind], str | None]:
    """Under --gpu: nvidia-smi (at :data:`GPU_BIN`) and the /dev/nvidia* devices; or why the GPU steps do not run."""
    node = detect()
    if not node.has_nvidia:
        return [], "GPU steps not run: no NVIDIA driver on this machine (nvidia-smi found none)"
    binds: list[Bind] = []
    smi = shutil.which("nvidia-smi", path=environ.get("PATH"))
    if smi:
        binds.append(Bind(Path(smi).resolve(), GPU_BIN / "nvidia-smi"))
    for dev in sorted(Path("/dev").glob("nvidia*")):
        binds.append(Bind(dev, dev, writable=True, device=True))
    if Path("/sys").is_dir():
        binds.append(Bind(Path("/sys"), Path("/sys")))  # read-only: the driver libraries read PCI topology there
    return binds, None


def _real_python(exe: Path) -> Path:
    """The interpreter itself behind ``exe`` (a pyenv shim, a venv's link), so that only its own prefix is
    bound into the sandbox."""
    with contextlib.suppress(OSError, subprocess.SubprocessError, ValueError):
        proc = subprocess.run(
            [str(exe), "-I", "-c", "import sys; print(sys.executable)"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        real = Path(proc.stdout.strip())
        if real.is_absolute() and real.is_file():
            return real
    return exe.absolute()


def _dies_with_us(prefix: list[str]) -> list[str]:
    """``prefix`` run so that it gets SIGKILL when lockbuild dies (``setpriv --pdeathsig``): the tracer would
    otherwise outlive a killed run, and with it the sandbox, whose ``--die-with-parent`` watches the tracer."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL", *prefix] if setpriv else prefix


def _result(out: bytes, nonce: str) -> dict[str, Any] | None:
    """The inner run's result line (the last one carrying this run's nonce), or None."""
    mark = f"{inner.RESULT} {nonce} ".encode()
    for line in reversed(out.splitlines()):
        if line.startswith(mark):
            with contextlib.suppress(ValueError):
                got = json.loads(line[len(mark) :])
                if isinstance(got, dict) and isinstance(got.get("steps"), list):
                    return got
    return None


def self_test(
    bundle: Path | str, options: SelfTestOptions, progress: Progress | None = None, *, store: Path | None = None
) -> Report:
    """Any source, named as every command names it (``site.sources.named_source``): a ``.lbz``, a part
    list, a delta (completed by ``store``), or ENGINE/VERSION-VARIANT in ``store``.

    Signatures first (the opener install uses), then the platform (:class:`PlatformError`, exit 6, never
    a pass), then the install and every command in one sandbox (own user, PID and network namespaces; the
    system, bundle, trust copy, interpreter and lockbuild read-only; the empty test root writable at
    ``/selftest/``) under ``strace -f``, which runs outside and logs into ``WORK/evidence``, out of the
    sandbox's reach. The work directory lies under ``$TMPDIR/lockbuild-selftest-<uid>/run-<pid>-*``:
    removed at the end, a killed run's swept by the next."""
    with named_source(bundle, store=store) as source:
        return _self_test(source, options, progress or Progress.quiet(), store)


def _place_model(options: SelfTestOptions, models: Path) -> Path:
    """``--model``: the model bundle through the one trust decision, placed as ``install --models`` places
    it (by lockbuild's own code, outside the sandbox); the engine sees it read-only."""
    from lockbuild.hubcache.placing import place_model

    with named_source(str(options.model)) as source:
        place_model(
            open_source(source, load_trust_store(trust_dir(options.trust_dir)), threshold=options.threshold), models
        )
    return models


def _source_binds(source: Source, store: Path | None) -> tuple[list[Bind], str, str | None]:
    """What the sandbox needs of the source, and how the run inside names it: (binds, argument, store)."""
    if isinstance(source, BundleFile | PartsFile):
        path = source.path if isinstance(source, BundleFile) else source.joined
        sig = source.signatures if isinstance(source, BundleFile) else source.signature_file
        binds = [Bind(path.absolute(), BOX / "bundle" / path.name)]
        if sig.exists():
            binds.append(Bind(sig.absolute(), signature_path(BOX / "bundle" / path.name)))
        return binds, str(BOX / "bundle" / path.name), None
    if store is None and not isinstance(source, DeltaFile):
        raise InstallError(
            f"{source.label}: expected a store (--store DIR) to test a build it holds, found none",
            tip="Name the store with --store DIR.",
        )
    binds = [Bind(store.absolute(), BOX / "store")] if store is not None else []
    inner_store = str(BOX / "store") if store is not None else None
    if isinstance(source, DeltaFile):
        sig = signature_path(source.delta)
        binds += [Bind(source.delta.absolute(), BOX / "bundle" / source.delta.name)]
        if sig.exists():
            binds.append(Bind(sig.absolute(), BOX / "bundle" / sig.name))
        return binds, str(BOX / "bundle" / source.delta.name), inner_store
    return binds, source.expect_ref or "", inner_store


def _self_test(source: Source, options: SelfTestOptions, p: Progress, store: Path | None) -> Report:
    p.phase(f"checking the signatures of {Path(source.label).name}")
    trusted = open_source(source, load_trust_store(trust_dir(options.trust_dir)), threshold=options.threshold)
    m = trusted.manifest
    t = m.install
    build = f"{m.version}-{m.variant}"
    reasons = platform_problems(m, options.python)
    if reasons:
        raise PlatformError(
            f"this machine cannot run {m.bundle_name}: " + "; ".join(reasons) + "; the self-test proves nothing here.",
            tip=f"Run `lockbuild test` on a machine of the bundle's platform ({m.platform}, Python {m.python}).",
        )
    node_python = None if t.interpreter is not None else _real_python(find_python(m.python, options.python))
    unchecked: str | None = None
    tracer = shutil.which("strace") if options.tracer else None
    if not options.tracer:
        unchecked = "--no-strace: no tracer ran"
    elif tracer is None:
        unchecked = NO_TRACER
    else:
        why = trace.unusable(tracer)
        if why:
            unchecked, tracer = f"strace cannot trace here ({why})", None
    gpu_binds: list[Bind] = []
    gpu_reason: str | None = "GPU steps not run (lockbuild test --gpu runs them on a machine with a GPU)"
    if options.gpu:
        gpu_binds, gpu_reason = _gpu_binds(options.environ)
    binds, pythonpath = _code_binds(node_python)
    source_binds, argument, inner_store = _source_binds(source, store)
    with workdir.workdir(options.base) as work:
        box, evidence = work / "box", work / "evidence"
        box.mkdir(mode=0o700)
        evidence.mkdir(mode=0o700)
        (box / "root").mkdir(mode=0o755)
        copy_trust(trust_dir(options.trust_dir), box / "trust")
        binds += [Bind(box / "root", BOX / "root", writable=True), Bind(box / "trust", BOX / "trust"), *source_binds]
        binds += gpu_binds
        models = _place_model(options, box / "models") if options.model is not None else None
        if models is not None:
            binds.append(Bind(models, BOX / "models"))  # read-only: what the engine finds offline
            t = with_models_env(m, BOX / "models").install
        home, tmp = "/home/sandbox", "/tmp"  # noqa: S108 - the sandbox's own tmpfs
        environ = {k: options.environ[k] for k in PASSED + GPU_PASSED if k in options.environ}
        environ.update(HOME=home, TMPDIR=tmp)
        nonce = secrets.token_hex(16)
        cfg = {
            "nonce": nonce,
            "bundle": argument,
            "store": inner_store,
            "trust": str(BOX / "trust"),
            "threshold": options.threshold,
            "python": str(node_python) if node_python else None,
            "root": str(BOX / "root"),
            "timeout": options.timeout,
            "environ": environ,
            "gpu": gpu_reason,
            "smoke": list(t.smoke),
            "gpu_smoke": list(t.gpu_smoke),
            "verify": list(t.verify),
            "gpu_probe": t.gpu_probe,
            "env": [list(x) for x in t.env],
            "models": str(BOX / "models") if models is not None else None,
        }
        path = "/usr/bin:/bin" + (f":{GPU_BIN}" if gpu_binds else "")
        spec = Spec(
            binds=tuple(binds),
            cwd=BOX,
            env={
                **environ,
                "PATH": path,
                "PYTHONPATH": ":".join(pythonpath),
                "PYTHONNOUSERSITE": "1",
                "PYTHONDONTWRITEBYTECODE": "1",
            },
        )
        p.phase(f"installing and running {m.engine} {build} in the sandbox" + (", traced" if tracer else ""))
        reader = trace.Reader(evidence / "strace.fifo", tracer) if tracer else None
        if reader is not None:
            reader.start()
        prefix = _dies_with_us(trace.command(reader.tracer, reader.fifo)) if reader else []
        try:
            proc = sandboxed(
                spec,
                [sys.executable, "-P", "-m", "lockbuild.selftest.inner"],
                timeout=options.timeout * 3 + 600,
                stdin=json.dumps(cfg).encode(),
                prefix=prefix,
                seccomp=seccomp.program(),
            )
        except SandboxTimeout:
            raise LockbuildError(f"the self-test of {m.bundle_name} did not finish in time; it was stopped.") from None
        finally:
            log = reader.finish() if reader is not None else None
        out = (proc.stdout or b"")[-MAX_OUTPUT:] + (proc.stderr or b"")[-MAX_OUTPUT:]
        result = _result(proc.stdout or b"", nonce)
        if reader is not None:
            if reader.error:
                unchecked = reader.error
            elif log is not None and not log.canary:
                unchecked = "the tracer did not see inside the sandbox (no canary in its log)"
    problems = []
    if result is None:  # the run inside the sandbox broke (or was killed): never a pass
        problems.append(
            f"the run inside the sandbox ended without a result (exit {proc.returncode}):\n"
            + out.decode("utf-8", "replace")[-1500:]
        )
        result = {"steps": []}
    elif result.get("error"):
        problems.append(f"the run inside the sandbox failed: {result['error']}")
    elif result.get("dumpable"):
        problems.append("the run inside the sandbox could not protect itself from the engine (PR_SET_DUMPABLE)")
    if log is not None and log.seccomp:  # it could have hidden any call from the tracer: never a pass
        call, pid = log.seccomp[0]
        problems.append(f"{SECCOMP_PROBLEM} ({call} in pid {pid}; a filter can keep system calls from the tracer)")
    steps = tuple(Step(str(s["name"]), s["status"], str(s["detail"])) for s in result["steps"])
    env_dir = f"{BOX / 'root' / m.engine / build}/"  # gone after the test: frames name files as <env>/...
    attempts = []
    if log is not None:
        for a in log.attempts:
            a.frames = tuple(f.replace(env_dir, "<env>/") for f in a.frames)
        notes = [
            dataclasses.replace(n, frames=tuple(f.replace(env_dir, "<env>/") for f in n.frames)) for n in log.notes
        ]
        attempts = judge(notes, log.attempts, t.allow_network)
    return Report(
        bundle=Path(source.label).name,
        engine=m.engine,
        build=build,
        namespace="bubblewrap: new user, PID and network namespaces; loopback only",
        tracer=trace.describe(tracer) if unchecked is None and tracer else f"none ({unchecked})",
        steps=steps,
        attempts=tuple(attempts),
        allow_network=t.allow_network,
        env=t.env,
        problems=tuple(problems),
        unchecked=unchecked,
        first_use=tuple(u.line() for u in bundle_first_use(m) if not u.carried),
    )
