"""The interpreter a bundle carries, placed once per root: ``<root>/.python/<sha256>/``.

A venv records its base interpreter by absolute path, so it may not live in the staging directory that is
renamed into place. Every engine whose bundle carries the same archive shares it; ``remove`` collects one
only when no environment and no install in flight uses it (:func:`bundled_python`, :func:`collect`)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

from lockbuild import interpreter
from lockbuild.digest import SHA256_HEX
from lockbuild.errors import InstallError
from lockbuild.install import archives
from lockbuild.install.marker import list_installed
from lockbuild.install.places import check_place, prepare
from lockbuild.install.swap import engine_lock, open_lock
from lockbuild.install.tools import python_version

PYTHONS = ".python"
_UNPACKING = ".unpacking-"
_SHA = SHA256_HEX  # one definition: lockbuild.digest


@contextlib.contextmanager
def bundled_python(root: Path, archive: Path, sha256: str, want: str, *, wait: float = 0.0) -> Iterator[Path]:
    """The executable of the bundle's interpreter under ``root``, placed if absent; it stays protected
    from ``remove``'s collection while the context is held (a shared lock on ``<sha256>.use``).

    It is unpacked (the safe extraction of assets) into a temporary directory under ``<root>/.python``,
    checked to be the bundle's Python X.Y and renamed to the archive's sha256, under
    ``<root>/.python/.lockbuild.lock``: a directory of that name is always complete."""
    if not _SHA.fullmatch(sha256):
        raise InstallError(f"internal: {sha256[:80]!r} is not a sha256.")
    pydir = prepare(root, PYTHONS)
    use = -1
    try:
        with engine_lock(pydir, wait=max(wait, 60.0)):
            use, _ = open_lock(pydir / f"{sha256}.use")
            fcntl.flock(use, fcntl.LOCK_SH)
            exe = place_interpreter(pydir, archive, sha256, want)
        yield exe
    finally:
        if use >= 0:
            os.close(use)


def place_interpreter(pydir: Path, archive: Path, sha256: str, want: str) -> Path:
    with os.scandir(pydir) as entries:
        stale = [e.path for e in entries if e.name.startswith(_UNPACKING)]
    for path in stale:  # left by a killed run (we hold the lock: nobody else is unpacking)
        shutil.rmtree(path, ignore_errors=True)
    dest = pydir / sha256
    exe = dest / interpreter.executable(want)
    if os.path.lexists(dest):
        check_place(dest, "the bundled interpreter")
        if _runs_as(exe, want):
            return exe
        _discard(dest)  # not the interpreter it should be (damaged by hand): unpacked again below
    tmp = Path(tempfile.mkdtemp(prefix=_UNPACKING, dir=pydir))
    try:
        archives.unpack_archive(archive, tmp, sibling_links=True)
        staged = tmp / interpreter.executable(want)
        st = os.lstat(staged) if os.path.lexists(staged) else None
        if st is None or not stat.S_ISREG(st.st_mode):
            raise InstallError(
                f"the bundle's interpreter {archive.name} has no file {interpreter.executable(want)}; "
                f"the bundle is built for Python {want}.",
                tip="Rebuild the bundle with an install_only archive of that Python, or pass --python.",
            )
        got = python_version(staged)
        if got != want:
            raise InstallError(
                f"the bundle's interpreter {archive.name} is Python {got}; the bundle is built for {want}.",
                tip="Rebuild the bundle with an interpreter of its Python, or pass --python.",
            )
        tmp.chmod(0o755)
        tmp.rename(dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return exe


def _runs_as(exe: Path, want: str) -> bool:
    try:
        return exe.is_file() and python_version(exe) == want
    except InstallError:
        return False


def _discard(path: Path) -> None:
    doomed = path.with_name(f"{_UNPACKING}{path.name}")
    path.rename(doomed)
    shutil.rmtree(doomed, ignore_errors=True)


def base_of(env_dir: Path) -> Path | None:
    """The ``home`` an environment's ``pyvenv.cfg`` names (its base interpreter's bin/), if any."""
    try:
        text = (env_dir / "pyvenv.cfg").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines()[:100]:
        key, sep, value = line.partition("=")
        if sep and key.strip() == "home":
            return Path(value.strip())
    return None


def shared_python(root: Path, env_dir: Path) -> str | None:
    """The sha256 of the ``<root>/.python/<sha256>`` interpreter an environment uses, if it uses one."""
    home = base_of(env_dir)
    if home is None:
        return None
    try:  # either side may be spelled through a symbolic link (a root under /opt -> /data/opt)
        rel = Path(os.path.realpath(home)).relative_to(os.path.realpath(root.absolute() / PYTHONS))
    except ValueError:
        return None
    return rel.parts[0] if rel.parts and _SHA.fullmatch(rel.parts[0]) else None


def collect(root: Path, *, wait: float = 0.0) -> list[str]:
    """Remove the interpreters under ``<root>/.python`` that no installed environment uses and no
    install in flight holds (no ``pyvenv.cfg`` names it, nobody holds its ``.use`` lock), under
    ``<root>/.python/.lockbuild.lock``; returns their sha256s."""
    root = root.absolute()
    pydir = root / PYTHONS
    if not os.path.lexists(pydir):
        return []
    pydir = prepare(root, PYTHONS)
    removed: list[str] = []
    with engine_lock(pydir, wait=max(wait, 60.0)):
        used = {shared_python(root, env) for env, _ in list_installed(root)}
        with os.scandir(pydir) as entries:
            present = sorted(e.name for e in entries if _SHA.fullmatch(e.name) and e.is_dir(follow_symlinks=False))
        for sha in present:
            if sha in used:
                continue
            fd, _ = open_lock(pydir / f"{sha}.use")
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # an install in flight is about to use it
                _discard(pydir / sha)
                (pydir / f"{sha}.use").unlink(missing_ok=True)
                removed.append(sha)
            finally:
                os.close(fd)
    return removed


def readable_by_others(directory: Path) -> bool:
    """Whether users other than the owner can reach ``directory``: it and every directory above it let
    others through (o+x). An environment there must then have an interpreter they can run too."""
    here = Path(os.path.realpath(directory))
    try:
        return all(d.stat().st_mode & stat.S_IXOTH for d in (here, *here.parents))
    except OSError:
        return False


def check_usable_by_others(exe: Path, *, origin: str, want: str, used_by: str) -> None:
    """Refuse an interpreter that other users cannot run, for an environment they can use (``used_by``
    says which): every directory above it, as named and as its links resolve, must let others through
    (o+x), the executable must be theirs to run (o+x), and its standard library theirs to read. A
    pyenv build under /root (0700) would otherwise leave them with ``bin/python: Permission denied``."""
    named = exe.absolute()
    real = Path(os.path.realpath(named))
    lib = real.parent.parent / "lib" / f"python{want}"
    checks: list[tuple[Path, int, str]] = [(d, stat.S_IXOTH, "enter") for d in named.parents]
    checks += [(d, stat.S_IXOTH, "enter") for d in real.parents]
    checks += [(real, stat.S_IXOTH, "run")]
    if lib.is_dir():
        checks.append((lib, stat.S_IROTH | stat.S_IXOTH, "read"))
    for path, bits, verb in checks:
        try:
            mode = path.stat().st_mode
        except OSError as exc:
            raise InstallError(f"cannot check the interpreter {exe}: {path}: {exc.strerror}.") from None
        if mode & bits != bits:
            raise InstallError(
                f"the interpreter {exe} (from {origin}) is not usable by everyone who can use {used_by}: other "
                f"users cannot {verb} {path} (mode {stat.S_IMODE(mode):04o}), so bin/python would fail for them "
                "with 'Permission denied'.",
                tip=f"Pass --python /usr/bin/python{want} (an interpreter everyone can run), or install a bundle "
                "that carries its own interpreter.",
            )
