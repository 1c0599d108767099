"""``lockbuild test``: install a signed bundle into a throw-away root inside a new network namespace, run its
verify command, GPU probe and smoke command, and report every network attempt.

The signatures are checked here first (the same opener as install); then whether this machine can run the
bundle at all (architecture, C library, Python): if not, :class:`PlatformError` (exit 6), never a pass.
The work directory lies under ``$TMPDIR/lockbuild-selftest-<uid>/run-<pid>-*``: removed at the end, and a
run killed on the way is swept by the next one.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import json
import os
import signal
import stat
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lockbuild
from lockbuild.errors import InstallError, LockbuildError, PlatformError
from lockbuild.install.fit import Facts, Needs, unmet
from lockbuild.install.node import detect
from lockbuild.install.runenv import PASSED
from lockbuild.install.tools import find_python
from lockbuild.progress import Progress
from lockbuild.selftest import audit, sandbox, trace
from lockbuild.selftest.defaults import TIMEOUT
from lockbuild.selftest.report import Report, Step, judge
from lockbuild.trust import load_store, open_bundle, trust_dir

PR_SET_PDEATHSIG = 1
NO_TRACER = "not available (install strace to catch native attempts)"


@dataclass(frozen=True)
class SelfTestOptions:
    trust_dir: Path | None = None
    threshold: int | None = None
    python: Path | None = None
    timeout: float = TIMEOUT
    tracer: bool = True  # trace native calls with strace where it is installed
    environ: Mapping[str, str] = field(default_factory=dict)  # the CLI's; the test run gets an allow-list of it
    base: Path | None = None  # where lockbuild-selftest-<uid> lives (default: the temp directory)
    user_namespace: bool | None = None  # unshare -rn (True) or -n (False); default: -rn unless root


def _die_with_parent() -> None:  # pragma: no cover (runs in the child)
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


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


def copy_trust(src: Path, dest: Path, most: int = 1 << 20) -> None:
    """The trust directory's regular files into ``dest`` (0700, this user's): inside an unprivileged user
    namespace a root-owned /etc/lockbuild/keys shows as owned by nobody, which the installer rightly refuses.
    The outer run has already checked the signatures against ``src`` itself."""
    dest.mkdir(mode=0o700)
    for entry in sorted(src.iterdir()):
        st = entry.lstat()
        if not stat.S_ISREG(st.st_mode) or st.st_size > most:
            continue
        fd = os.open(entry, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
        with os.fdopen(fd, "rb") as f:
            data = f.read(most + 1)
        out = os.open(dest / entry.name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(out, "wb") as f:
            f.write(data)


def self_test(bundle: Path, options: SelfTestOptions, progress: Progress | None = None) -> Report:
    p = progress or Progress.quiet()
    p.phase(f"checking the signatures of {bundle.name}")
    trusted = open_bundle(bundle, load_store(trust_dir(options.trust_dir)), threshold=options.threshold)
    m = trusted.manifest
    t = m.install
    build = f"{m.version}-{m.variant}"
    reasons = platform_problems(m, options.python)
    if reasons:
        raise PlatformError(
            f"this machine cannot run {m.bundle_name}: " + "; ".join(reasons) + "; the self-test proves nothing here.",
            tip=f"Run `lockbuild test` on a machine of the bundle's platform ({m.platform}, Python {m.python}).",
        )
    ns = sandbox.namespace(options.user_namespace)
    tracer = trace.strace() if options.tracer else None
    with sandbox.workdir(options.base) as work:
        for d in ("root", "home", "tmp"):
            (work / d).mkdir(mode=0o755 if d == "root" else 0o700)
        copy_trust(trust_dir(options.trust_dir), work / "trust")
        environ = {k: options.environ[k] for k in PASSED if k in options.environ}
        environ.update(HOME=str(work / "home"), TMPDIR=str(work / "tmp"))
        cfg = {
            "bundle": str(bundle.absolute()), "trust": str(work / "trust"),
            "threshold": options.threshold, "python": str(options.python.absolute()) if options.python else None,
            "root": str(work / "root"), "audit": str(work / "audit.jsonl"), "result": str(work / "result.json"),
            "strace": tracer, "trace_out": str(work / "strace.txt"), "timeout": options.timeout,
            "environ": environ, "smoke": list(t.smoke), "verify": list(t.verify), "gpu_probe": t.gpu_probe,
            "env": [list(x) for x in t.env],
        }  # fmt: skip
        (work / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
        p.phase(f"installing and running {m.engine} {build} in a new network namespace ({' '.join(ns)})")
        child_env = {**environ, "PATH": options.environ.get("PATH", "/usr/bin:/bin"),
                     "PYTHONPATH": str(Path(lockbuild.__file__).parent.parent), "PYTHONNOUSERSITE": "1"}  # fmt: skip
        argv = [*ns, sys.executable, "-m", "lockbuild.selftest.inner", str(work / "config.json")]
        with subprocess.Popen(argv, env=child_env, cwd=work, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, start_new_session=True,
                              preexec_fn=_die_with_parent) as proc:  # fmt: skip
            try:
                out, _ = proc.communicate(timeout=options.timeout * 3 + 600)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(OSError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
                raise LockbuildError(f"the self-test of {m.bundle_name} did not finish in time; it was stopped.") \
                    from None  # fmt: skip
        try:
            result = json.loads((work / "result.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            raise LockbuildError(
                f"the self-test run inside the namespace ended without a result (exit {proc.returncode}):\n"
                + (out or b"").decode("utf-8", "replace")[-1500:],
            ) from None
        traced = []
        if tracer:
            with contextlib.suppress(FileNotFoundError):
                traced = trace.parse((work / "strace.txt").read_text(encoding="utf-8", errors="replace"))
        env_dir = f"{work / 'root' / m.engine / build}/"  # gone after the test: frames name files as <env>/...
        seen = [dataclasses.replace(x, frames=tuple(f.replace(env_dir, "<env>/") for f in x.frames))
                for x in audit.read_seen(work / "audit.jsonl")]  # fmt: skip
        attempts = judge(seen, traced, t.allow_network)
    steps = tuple(Step(s["name"], s["status"], s["detail"]) for s in result["steps"])
    problems = []
    if proc.returncode != 0 or not steps:  # the run inside the namespace broke: never a pass
        problems.append(f"the run inside the namespace ended with exit {proc.returncode}:\n"
                        + (out or b"").decode("utf-8", "replace")[-1500:])  # fmt: skip
    return Report(
        bundle=bundle.name, engine=m.engine, build=build,
        namespace=" ".join([Path(ns[0]).name, *ns[1:]])
        + f"; loopback {result.get('loopback', 'down')}, no other interface",
        tracer=result.get("tracer") or ("strace" if tracer else NO_TRACER),
        steps=steps, attempts=tuple(attempts), allow_network=t.allow_network, env=t.env, problems=tuple(problems),
    )  # fmt: skip
