"""Module files on disk (``--modulefiles DIR``): ``DIR/ENGINE/VERSION-VARIANT[.lua]`` and the engine's default,
written with the install's swap and removed with ``remove``.

``DIR`` follows ``--root``'s rule. Every file is created ``O_EXCL|O_NOFOLLOW`` by descriptor, made ``0644``,
synced and renamed into place; the default names the build the node's own choice takes (:func:`default_of`)."""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from lockbuild.bundle.instructions import GpuNeeds
from lockbuild.choice.candidates import Option
from lockbuild.choice.ranking import choose, newest_first
from lockbuild.errors import InstallError, LockbuildError
from lockbuild.fsio import (
    create_new,
    fsync_dir,
    list_dir,
    lstat_at,
    opened_dir,
    read_regular,
    remove_at,
    rename_at,
    sweep_beside,
    temp_beside,
)
from lockbuild.install.marker import read_marker
from lockbuild.install.modulefile import (
    LUA_DEFAULT,
    TCL_DEFAULT,
    Format,
    ModuleRecord,
    ModuleSpec,
    build_of,
    default_text,
    file_name,
    format_of,
    read_record,
    render,
)
from lockbuild.install.node import Node
from lockbuild.install.nodecheck import Facts, GpuCheck, Needs
from lockbuild.install.places import prepare
from lockbuild.limits import MiB
from lockbuild.settings import modulefiles_dir

MODE = 0o644  # readable by every user who runs `module load`, writable by the owner only


@dataclass(frozen=True)
class ModuleTarget:
    """``--modulefiles DIR`` and ``--modulefiles-format``."""

    dir: Path
    fmt: Format = "lua"

    def engine_dir(self, engine: str) -> Path:
        """``DIR/ENGINE``, made if absent and checked by ``--root``'s rule."""
        return prepare(self.dir.absolute(), engine, what="--modulefiles")


def _temp_name(final: str) -> str:
    return temp_beside(Path(final)).name  # hidden, unguessable; what a killed run leaves is swept next time


def _new_file(dfd: int, name: str, data: bytes) -> None:
    with create_new(name, dir_fd=dfd, mode=MODE) as f:
        os.fchmod(f.fileno(), MODE)
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


@dataclass
class Pending:
    """A module file written under a temporary name in ``DIR/ENGINE``, waiting for the swap."""

    target: ModuleTarget
    engine_dir: Path
    spec: ModuleSpec
    temp: str = ""

    def write(self) -> None:
        sweep_beside(self.engine_dir / self.final)
        with opened_dir(self.engine_dir) as dfd:
            name = _temp_name(self.final)
            _new_file(dfd, name, render(self.spec, self.target.fmt).encode())
            self.temp = name

    @property
    def final(self) -> str:
        return file_name(self.spec.record.build_id, self.target.fmt)

    def commit(self, node: Node, gpu_check: GpuCheck) -> None:
        """The rename into place, then the default moved to the node's choice."""
        with opened_dir(self.engine_dir) as dfd:
            rename_at(dfd, self.temp, dfd, self.final)
            self.temp = ""
            fsync_dir(dfd)
        set_default(self.target.fmt, self.engine_dir, self.spec.record.engine, node, gpu_check)

    def discard(self) -> None:
        if self.temp:
            with contextlib.suppress(OSError), opened_dir(self.engine_dir) as dfd:
                remove_at(dfd, self.temp)
            self.temp = ""


def _records(fmt: Format, engine_dir: Path, engine: str, dfd: int) -> list[ModuleRecord]:
    """The builds whose module files (ours, this format) are here; an install's only while it is installed."""
    found = []
    for name in list_dir(dfd):
        build = build_of(name, fmt)
        if build is None:
            continue
        try:
            raw = read_regular(name, what="module file", max_size=MiB, dir_fd=dfd)
        except (OSError, LockbuildError):
            continue
        r = read_record(raw.decode("utf-8", "replace"))
        if r is None or r.engine != engine or r.build_id != build:
            continue
        if r.kind == "install" and read_marker(Path(r.prefix)) is None:
            continue
        found.append(r)
    return found


def default_of(records: Sequence[ModuleRecord], node: Node, gpu_check: GpuCheck) -> ModuleRecord | None:
    """The build ``lockbuild install ENGINE`` would take among ``records`` (the node's own rule); where none
    fits this node's GPUs: the newest version, then the newest signed build, then the variant's name."""
    if not records:
        return None
    ordered = sorted(records, key=lambda r: r.variant)
    options = [
        Option(
            r.engine,
            r.version,
            r.variant,
            Needs(r.python, r.platform, None if r.gpu is None else GpuNeeds(*r.gpu), 0),
            newness=(r.serial, r.built),
        )
        for r in ordered
    ]
    facts = Facts(node, frozenset(r.python for r in records), 0)
    engine = records[0].engine
    choice = choose(engine, None, options, facts, gpu_check=gpu_check)
    if choice.chosen is None:  # no GPU facts that any build fits: the GPU rules aside
        choice = choose(engine, None, options, facts, allow_cpu=True, gpu_check="skip")
    if choice.chosen is not None:
        won = choice.chosen
        return next(r for r in ordered if (r.version, r.variant) == (won.version, won.variant))
    rank = {v: i for i, v in enumerate(newest_first({r.version for r in records}))}
    return min(ordered, key=lambda r: (rank[r.version], -r.serial, -r.built))  # built elsewhere: no fit known


def set_default(fmt: Format, engine_dir: Path, engine: str, node: Node, gpu_check: GpuCheck) -> str | None:
    """Point the engine's default at the node's choice (removed where no build is left); returns it."""
    with opened_dir(engine_dir) as dfd:
        chosen = default_of(_records(fmt, engine_dir, engine, dfd), node, gpu_check)
        name = LUA_DEFAULT if fmt == "lua" else TCL_DEFAULT
        if chosen is None:
            with contextlib.suppress(FileNotFoundError):
                remove_at(dfd, name)
            fsync_dir(dfd)
            return None
        temp = _temp_name(name)
        try:
            if fmt == "lua":
                os.symlink(file_name(chosen.build_id, fmt), temp, dir_fd=dfd)
            else:
                _new_file(dfd, temp, default_text(chosen.build_id).encode())
            rename_at(dfd, temp, dfd, name)
        except BaseException:
            with contextlib.suppress(OSError):
                remove_at(dfd, temp)
            raise
        fsync_dir(dfd)
        return chosen.build_id


def remove_module(target: ModuleTarget, engine: str, build_id: str, node: Node, gpu_check: GpuCheck) -> bool:
    """Delete ``DIR/ENGINE/VERSION-VARIANT[.lua]`` (when lockbuild wrote it) and move the default. False
    when there was no such file."""
    engine_dir = target.engine_dir(engine)
    name = file_name(build_id, target.fmt)
    with opened_dir(engine_dir) as dfd:
        st = lstat_at(name, dfd)
        if st is not None:
            if not stat.S_ISREG(st.st_mode):
                raise InstallError(
                    f"refused to remove {engine_dir / name}: it is not a regular file.",
                    tip="Remove it yourself; lockbuild writes module files only as regular files.",
                )
            remove_at(dfd, name)
            fsync_dir(dfd)
    set_default(target.fmt, engine_dir, engine, node, gpu_check)
    return st is not None


def module_target(given: Path | None, fmt: str, environ: Mapping[str, str]) -> ModuleTarget | None:
    """``--modulefiles DIR`` (else ``LOCKBUILD_MODULEFILES``) and ``--modulefiles-format``; None: no files."""
    found = modulefiles_dir(given, environ)
    return None if found is None else ModuleTarget(found, format_of(fmt))
