"""The one sandbox for other people's code on the builder: bubblewrap.

Build backends, the engine and the recipe's commands under ``build --self-test`` all run through
:func:`run` (namespaces and binds: :func:`argv`). Where bubblewrap is missing or cannot create its
namespaces, every caller gets a :class:`SandboxError` with a tip: nothing runs unsandboxed instead."""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from lockbuild.errors import LockbuildError

# The system's programs and libraries: bound read-only where they are directories, recreated as the same
# symlinks where they are links (merged /usr).
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# The only files of /etc a program sees: users and groups (for getpwuid), name service switch, time zone,
# alternatives (Debian's /usr/bin links point there), the loader's cache, and CA certificates.
ETC_FILES = (
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/localtime",
    "/etc/alternatives",
    "/etc/ld.so.cache",
)
# With the network kept (Spec(network=True)), name resolution needs these two as well.
ETC_NETWORK = ("/etc/resolv.conf", "/etc/hosts")
BWRAP_PATH = "/usr/bin:/bin"  # bwrap's own environment: enough to find the prefix program, nothing else
INSTALL_TIP = "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap)"


class SandboxError(LockbuildError):
    """The sandbox cannot start here, or what ran in it did not finish."""

    default_tip = "Check that bubblewrap (bwrap) is installed and that user namespaces are allowed here."


class SandboxTimeout(SandboxError):
    """The command ran past its deadline; everything in the sandbox was killed."""


@dataclass(frozen=True)
class Bind:
    """A host path made visible in the sandbox at ``target``: read-only unless ``writable``."""

    source: Path
    target: Path
    writable: bool = False
    device: bool = False  # a device node (a GPU's /dev/nvidia*): bound with --dev-bind, usable as such


@dataclass(frozen=True)
class Spec:
    """What the sandbox holds besides the system: extra binds, the whole environment, where it starts."""

    binds: tuple[Bind, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    network: bool = False  # False: a new network namespace with only its own loopback
    home: Path = Path("/home/sandbox")


def bwrap_path() -> Path:
    """Where bubblewrap is, or a SandboxError saying how to install it."""
    found = shutil.which("bwrap")
    if found is None:
        raise SandboxError(
            "expected bubblewrap (bwrap) on PATH to run other people's code (build backends, the engine's "
            "self-test) in a sandbox; found none, and lockbuild never runs that code unsandboxed.",
            tip=INSTALL_TIP,
        )
    return Path(found)


def _check_path(p: Path, what: str) -> str:
    s = str(p)
    if not p.is_absolute() or "\0" in s:
        raise SandboxError(f"a sandbox {what} must be an absolute path; found {s!r}.")
    return s


def _system_args() -> list[str]:
    out: list[str] = []
    for d in SYSTEM_DIRS:
        p = Path(d)
        if p.is_symlink():
            out += ["--symlink", str(p.readlink()), d]
        elif p.is_dir():
            out += ["--ro-bind", d, d]
    return out


def argv(spec: Spec, command: Sequence[str], *, seccomp_fd: int | None = None) -> list[str]:
    """The full bwrap command line that runs ``command`` as ``spec`` says (bwrap found on PATH); with
    ``seccomp_fd``, bwrap reads a seccomp filter program from that descriptor and installs it in the sandbox.

    New user, mount, PID, IPC, UTS, cgroup and network namespaces (``--unshare-all`` and ``--unshare-user``,
    as root too; the network kept only for ``Spec(network=True)``), no capabilities, no nested user
    namespaces, a new ``/proc``, a minimal ``/dev``, a tmpfs ``/tmp`` and ``HOME``, a read-only view of the
    system's programs and libraries and a few ``/etc`` files: no ``/run``, host ``/tmp``, home or sockets.
    The command's environment is exactly ``Spec.env`` (``--clearenv`` and one ``--setenv`` each)."""
    if not command:
        raise SandboxError("expected a command to run in the sandbox; found an empty one.")
    out = [str(bwrap_path()), "--unshare-all", "--unshare-user", "--disable-userns"]
    if spec.network:
        out.append("--share-net")
    out += ["--die-with-parent", "--new-session", "--cap-drop", "ALL", "--hostname", "sandbox"]
    out += _system_args()
    for name in (*ETC_FILES, *(ETC_NETWORK if spec.network else ())):
        out += ["--ro-bind-try", name, name]
    home = _check_path(spec.home, "HOME")
    out += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", home]  # noqa: S108 - the sandbox's own
    for b in spec.binds:
        src, dst = _check_path(b.source, "bind source"), _check_path(b.target, "bind target")
        if not b.source.exists():
            raise SandboxError(f"expected {src} to exist, to bind it into the sandbox; found nothing there.")
        out += ["--dev-bind" if b.device else "--bind" if b.writable else "--ro-bind", src, dst]
    out += ["--remount-ro", "/"]  # bwrap's own root tmpfs: nothing new outside /tmp, HOME and the binds
    out.append("--clearenv")
    env = dict(spec.env)
    env.setdefault("HOME", home)
    for k, v in env.items():
        if not k or "=" in k or "\0" in k or "\0" in v:
            raise SandboxError(f"a sandbox environment variable must be NAME=value; found {k!r}.")
        out += ["--setenv", k, v]
    out += ["--chdir", _check_path(spec.cwd, "working directory") if spec.cwd is not None else home]
    if seccomp_fd is not None:
        out += ["--seccomp", str(seccomp_fd)]
    out += ["--", *command]
    return out


def run(
    spec: Spec,
    command: Sequence[str],
    *,
    timeout: float,
    stdin: bytes | None = None,
    capture: bool = True,
    prefix: Sequence[str] = (),
    seccomp: bytes | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """Run ``command`` in the sandbox and wait for it (and everything it started) to end.

    ``prefix`` goes before bwrap (a tracer such as ``strace -f -o FILE``), so it runs outside. Raises
    SandboxTimeout after ``timeout`` seconds, with bwrap's process group killed, and SandboxError when
    the sandbox cannot start; a command's own failure is its return code. ``seccomp``: a classic BPF program
    (``struct sock_filter`` bytes) that bwrap installs for everything in the sandbox.

    When the command exits, the PID namespace's init dies, so the kernel kills whatever it left behind (a
    double-forked daemon included); ``--die-with-parent`` does the same if lockbuild dies. bwrap starts
    with ``PATH`` alone, so nothing of lockbuild's environment is in the sandbox's ``/proc/1/environ``."""
    check_available()
    fd = _program_fd(seccomp)
    try:
        full = [*prefix, *argv(spec, command, seccomp_fd=fd)]
    except BaseException:
        _close(fd)
        raise
    pipe = subprocess.PIPE if capture else None
    try:
        proc = subprocess.Popen(
            full,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=pipe,
            stderr=pipe,
            env={"PATH": BWRAP_PATH},
            cwd="/",
            start_new_session=True,
            pass_fds=() if fd is None else (fd,),
        )
    except OSError as exc:
        raise SandboxError(f"cannot start {full[0]}: {exc.strerror}", tip=INSTALL_TIP) from None
    finally:
        _close(fd)  # the child holds its own copy
    try:
        out, err = proc.communicate(stdin, timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        raise SandboxTimeout(
            f"{command[0]} in the sandbox did not finish within {timeout:g} s; it and everything it started "
            "were killed."
        ) from None
    except BaseException:
        _kill_group(proc)
        raise
    return subprocess.CompletedProcess(full, proc.returncode, out, err)


def _program_fd(program: bytes | None) -> int | None:
    """A pipe's read end holding ``program`` (written whole, the write end closed), or None."""
    if program is None:
        return None
    if not program or len(program) % 8 or len(program) > 4096 * 8:
        raise SandboxError(
            f"expected a seccomp program of 1 to 4096 instructions (8 bytes each); found {len(program)} bytes."
        )
    r, w = os.pipe()
    try:
        view = memoryview(program)
        while view:  # far below a pipe's buffer: the writes never block
            view = view[os.write(w, view) :]
    finally:
        os.close(w)
    return r


def _close(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()


@functools.cache
def _probe() -> tuple[int, str]:
    probe = argv(Spec(), ["true"])
    try:
        proc = subprocess.run(probe, capture_output=True, env={"PATH": BWRAP_PATH}, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return -1, str(exc)
    return proc.returncode, proc.stderr.decode("utf-8", "replace").strip()


def check_available() -> None:
    """Return if bubblewrap can create its namespaces here; else a SandboxError with a tip (no fallback)."""
    path = bwrap_path()
    rc, err = _probe()
    if rc == 0:
        return
    last = err.splitlines()[-1][:300] if err else "no output"
    raise SandboxError(
        f"expected bubblewrap ({path}) to start a sandbox with new user, PID and network namespaces; it "
        f"failed here ({last}), and lockbuild never runs other people's code unsandboxed.",
        tip="allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1; on Ubuntu 24.04 "
        "also kernel.apparmor_restrict_unprivileged_userns=0), or in a container run it with a seccomp "
        "profile that permits unshare/clone with CLONE_NEWUSER",
    )
