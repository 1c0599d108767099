"""``lockbuild image``: the install, built for PREFIX, packed into one reproducible squashfs file.

The install is ``install``'s own (``Installer.build_env``), run in the prefix view; then deterministic
bytecode, normalised modes and ``mksquashfs`` with fixed times, owners and settings. ``FILE.sqfs`` is
renamed into place after its record, so it is whole or absent; the work directory is removed whatever happens."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lockbuild import __version__, fsio
from lockbuild.bundle.manifest import Manifest
from lockbuild.digest import record_line
from lockbuild.errors import InstallError, LockbuildError
from lockbuild.fsio import create_new, remove_tree, temp_beside
from lockbuild.image import bytecode, view
from lockbuild.image.record import SUFFIX, TOOLS_TIP, ImageRecord, record_path
from lockbuild.install.installer import Installer, InstallOptions
from lockbuild.install.moduledir import ModuleTarget, Pending
from lockbuild.install.modulefile import spec_of
from lockbuild.install.node import Node, detect
from lockbuild.install.pythons import PYTHONS, check_usable_by_others, place_interpreter
from lockbuild.install.stage import View
from lockbuild.install.tools import find_python
from lockbuild.progress import Progress, written_of
from lockbuild.trust import TrustedBundle, digest_signed_file, load_trust_store, open_source, trust_dir
from lockbuild.trust.source import Source

COMPRESSION = ("-comp", "zstd", "-Xcompression-level", "15", "-b", "1M")
PACK_TIMEOUT = 7200


@dataclass(frozen=True)
class ImageResult:
    image: Path
    record: ImageRecord
    engine: str
    version: str
    variant: str
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return {
            "image": str(self.image),
            "record": str(record_path(self.image)),
            "engine": self.engine,
            "version": self.version,
            "variant": self.variant,
            "seconds": round(self.seconds, 3),
            **self.record.to_json(),
        }


def mksquashfs() -> str:
    found = shutil.which("mksquashfs")
    if found is None:
        raise LockbuildError("expected mksquashfs on PATH to pack the image; found none.", tip=TOOLS_TIP)
    return found


def check_out(out: Path) -> Path:
    out = out.absolute()
    if not out.name.endswith(SUFFIX) or out.name.startswith(".") or len(out.name) <= len(SUFFIX):
        raise LockbuildError(
            f"--out must name a FILE.sqfs; found {out.name!r}.", tip="Pass --out /path/to/ENGINE-VERSION.sqfs."
        )
    if not out.parent.is_dir():
        raise LockbuildError(f"no folder {out.parent} to write {out.name} into.", tip="Make the folder first.")
    return out


def make_image(
    source: Source,
    options: InstallOptions,
    prefix: Path,
    out: Path,
    *,
    progress: Progress | None = None,
    node: Node | None = None,
    modules: ModuleTarget | None = None,
) -> ImageResult:
    """Check, install for ``prefix`` and pack the bundle ``source`` names into ``out`` (with its record);
    with ``modules``, the module file for ``prefix`` is renamed into place once the image is."""
    started = time.monotonic()
    p = progress or Progress.quiet()
    out, tool = check_out(out), mksquashfs()
    view.check_prefix(prefix, [out.parent])
    p.phase(f"checking the signatures of {Path(source.label).name}")
    trusted = open_source(source, load_trust_store(trust_dir(options.trust_dir)), threshold=options.threshold)
    node = node or detect(environ=options.environ)
    m = trusted.manifest
    pending = None
    if modules is not None:  # DIR/ENGINE checked by --root's rule before any work
        spec = spec_of(m, trusted.sha256, trusted.signer_ids, str(prefix), "image")
        pending = Pending(modules, modules.engine_dir(m.engine), spec)
    python = find_python(m.python, options.python) if options.python or not m.install.interpreter else None
    if python is not None:
        # outside the image, every user of every node that mounts it runs it: it must be everyone's to run
        check_usable_by_others(
            python,
            origin="--python" if options.python else "the node",
            want=m.python,
            used_by=f"the image (mounted at {prefix})",
        )
        view.check_prefix(prefix, [python])
    with _work(out) as work:
        home, tmp = work / "home", work / "tmp"
        home.mkdir(mode=0o700)
        tmp.mkdir(mode=0o700)
        staged = work / "root"
        staged.mkdir(mode=0o755)
        run = view.runner(staged, prefix)
        # HOME and TMPDIR of the engine's code are the work directory's: what it writes there stays out of the image
        opts = dataclasses.replace(options, environ={**options.environ, "HOME": str(home), "TMPDIR": str(tmp)})
        unpacked = work / "bundle"
        installer = Installer(opts, progress=p, node=node)
        installer.check_fit(m, node, work)
        the_view = View(at=prefix, run=run, existing=python is None, fixed=m.as_of)
        interpreter = [str(python)] if python is not None else []
        partial = work / "image.sqfs"  # mksquashfs writes by path: into this run's own 0700 directory, renamed out

        def pack() -> None:
            p.phase("compiling the bytecode (checked-hash)")
            bytecode.compile_tree(prefix, run, home)
            _settle_cache_info(staged, m.serial)
            _normalise(staged)
            p.phase(f"packing {out.name} with mksquashfs", detail=written_of(partial, _tree_bytes(staged)))
            _pack(tool, staged, partial, m.serial)

        def place(m: Manifest, unpacked: Path) -> contextlib.AbstractContextManager[Path]:
            return _inside(m, unpacked, staged, prefix, interpreter)

        try:
            installer.build_env(trusted, python, node, staged, unpacked, then=pack, view=the_view, place_python=place)
            record = _record(trusted, partial, prefix, _interpreter(staged, interpreter[0]))
            if pending is not None:
                pending.write()
            _place_atomically(partial, out, record)
            if pending is not None:
                pending.commit(node, options.gpu_check)
        finally:
            remove_tree(partial)
            if pending is not None:
                pending.discard()
    p.finish()
    return ImageResult(out, record, m.engine, m.version, m.variant, time.monotonic() - started)


def _tree_bytes(top: Path) -> int:
    """The bytes of the regular files under ``top`` (links not followed): what mksquashfs compresses."""
    total = 0
    for dirpath, _dirs, files in os.walk(top):
        for name in files:
            st = (Path(dirpath) / name).lstat()
            total += st.st_size if stat.S_ISREG(st.st_mode) else 0
    return total


@contextlib.contextmanager
def _work(out: Path) -> Iterator[Path]:
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".work", dir=out.parent))
    try:
        yield work
    finally:
        remove_tree(work)


@contextlib.contextmanager
def _inside(m: Manifest, unpacked: Path, staged: Path, prefix: Path, chosen: list[str]) -> Iterator[Path]:
    """The bundle's interpreter, unpacked and checked as install places it, inside the image
    (``PREFIX/.python/<sha256>/``): the image needs nothing outside its mount but the C library."""
    member = next(x for x in m.members if x.path == m.install.interpreter)
    pydir = staged / PYTHONS
    pydir.mkdir(mode=0o755)
    exe = place_interpreter(pydir, unpacked / member.path, member.sha256, m.python)
    seen = prefix / exe.relative_to(staged)
    chosen.append(str(seen))
    yield seen


def _settle_cache_info(tree: Path, epoch: int) -> None:
    """uv writes ``uv_cache.json`` into each installed package's dist-info with the time it saw the wheel
    (its ctime, which nothing can set): that time becomes the cut-off, and the package's RECORD line for
    the file is made to match, so the same bundle gives the same bytes and RECORD stays true."""
    for info in sorted(tree.glob("lib/python*/site-packages/*.dist-info/uv_cache.json")):
        if info.is_symlink() or not info.is_file():
            continue
        data = json.loads(fsio.read_regular(info, what="uv's cache record", max_size=MAX_SMALL))
        if not isinstance(data, dict) or "timestamp" not in data:
            continue
        data["timestamp"] = {"secs_since_epoch": epoch, "nanos_since_epoch": 0}
        raw = json.dumps(data, separators=(",", ":")).encode()
        _rewrite(info, raw)
        record = info.parent / "RECORD"
        if record.is_symlink() or not record.is_file():
            continue
        name = f"{info.parent.name}/{info.name}"
        text = fsio.read_regular(record, what="a RECORD", max_size=MAX_SMALL).decode("utf-8")
        fixed = [
            record_line(name, raw) + "\n" if line.split(",", 1)[0] == name else line
            for line in text.splitlines(keepends=True)
        ]
        _rewrite(record, "".join(fixed).encode())


MAX_SMALL = 16 << 20  # a RECORD or uv_cache.json: far below this


def _rewrite(path: Path, data: bytes) -> None:
    """``path``'s new contents as a new file renamed over it: never written through a link, and never into
    an inode shared by a hard link (uv links installed files from its cache)."""
    temp = path.with_name(f".{path.name}.lockbuild-new")
    with fsio.create_new(temp, mode=0o644) as f:
        f.write(data)
    temp.replace(path)


def _interpreter(staged: Path, chosen: str) -> str:
    """The interpreter the environment runs, as uv linked it (the real file, not a shim on PATH)."""
    link = staged / "bin" / "python"
    target = link.readlink() if link.is_symlink() else None
    return str(target) if target is not None and target.is_absolute() else chosen


def _normalise(tree: Path) -> None:
    """Modes as a fresh install with umask 022 gives them: directories 0755, files 0755 where anyone may
    run them, else 0644 (links keep theirs); no set-id bits, whatever the engine's archives carried."""
    for top, dirs, files in os.walk(tree):
        for name in (*dirs, *files):
            path = Path(top) / name
            st = path.lstat()
            if stat.S_ISLNK(st.st_mode):
                continue
            wanted = 0o755 if stat.S_ISDIR(st.st_mode) or st.st_mode & 0o111 else 0o644
            if stat.S_IMODE(st.st_mode) != wanted:
                path.chmod(wanted)
    tree.chmod(0o755)


def _pack(tool: str, tree: Path, partial: Path, epoch: int) -> None:
    create_new(partial, mode=0o644).close()  # ours, made O_EXCL: mksquashfs -noappend writes it
    argv = [
        tool,
        str(tree),
        str(partial),
        "-noappend",
        "-no-progress",
        "-quiet",
        "-reproducible",
        "-all-root",
        "-no-xattrs",
        *COMPRESSION,
        "-mkfs-time",
        str(epoch),
        "-all-time",
        str(epoch),
    ]
    env = {"PATH": os.defpath, "LANG": "C.UTF-8"}  # no SOURCE_DATE_EPOCH: the times are given
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=PACK_TIMEOUT, env=env, check=False, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        raise InstallError(f"mksquashfs did not finish within {PACK_TIMEOUT} s.") from None
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip()[-600:]
        raise InstallError(
            f"mksquashfs failed (exit {proc.returncode}): {tail}",
            tip="Check the free space beside --out, and that squashfs-tools supports zstd.",
        )


def _record(trusted: TrustedBundle, partial: Path, prefix: Path, interpreter: str) -> ImageRecord:
    digests = digest_signed_file(partial, prehash=False, what="image")
    return ImageRecord(
        digests.whole,
        digests.size,
        trusted.sha256,
        trusted.statement.manifest_sha256,
        trusted.signer_ids,
        str(prefix),
        interpreter,
        __version__,
    )


def _place_atomically(partial: Path, out: Path, record: ImageRecord) -> None:
    """The record first, then the image: a FILE.sqfs is always whole and has its record beside it."""
    rec = record_path(out)
    rec_partial = temp_beside(rec)
    try:
        with create_new(rec_partial, mode=0o644) as f:
            f.write(record.to_bytes())
            f.flush()
            os.fsync(f.fileno())
        rec_partial.replace(rec)
        partial.replace(out)
    finally:
        remove_tree(rec_partial)
