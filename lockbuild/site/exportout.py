"""Where ``store index`` may write: which --out it takes, how it recognises an index of its own, and what
a killed export left beside --out. --out follows the --root rule, is never the store or near it
(:func:`check_not_the_store`), and is replaced only when empty or marked as an earlier export
(:func:`is_marked`): anything else is refused, never emptied."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from lockbuild import fsio
from lockbuild.site.pyindex import ExportError

MARKER = ".lockbuild-index"
MARKER_TEXT = b"This directory is a package index written by `lockbuild store index`; each export replaces it whole.\n"
_TIP_OUT = "Give --out a new or empty directory outside the store (e.g. /srv/pypi beside the store /srv/lockbuild)."

Identity = tuple[int, int]  # (st_dev, st_ino)


def is_marked(dir_fd: int) -> bool:
    """Whether the directory opened as ``dir_fd`` holds the export's marker: a regular file, not a link,
    with exactly the text an export writes."""
    try:
        data = fsio.read_regular(
            MARKER, what="index marker", max_size=len(MARKER_TEXT), error=ExportError, dir_fd=dir_fd
        )
    except (OSError, ExportError):
        return False
    return data == MARKER_TEXT


def sweep_partials(out: Path) -> int:
    """Remove the staging directories killed exports to ``out`` left (``.OUT.<hex>.partial``, marked)."""
    return fsio.sweep_dirs_beside(out, is_marked)


def _ancestors_problem(out: Path) -> None:
    try:
        found = fsio.ancestor_problem(out)
    except OSError as exc:
        raise ExportError(f"cannot examine {exc.filename}, above --out {out}: {exc.strerror or exc}.") from None
    if found is not None:
        fix = (
            "Put --out under directories owned by root or by the user running lockbuild"
            if found.owner
            else "Put --out under directories only root (or the user running lockbuild) can write, or make the "
            f"shared one sticky (chmod +t {found.directory})"
        )
        raise ExportError(
            f"refused --out {out}: the directory {found.directory} above it {found.problem}, so another "
            "user could swap --out for a tree of theirs while lockbuild works in it.",
            tip=f"{fix}; see docs/site-administrators.md.",
        )


def _nearest(out: Path) -> tuple[Path, int]:
    """The nearest directory of ``out`` and those above it that exists, opened (following links: as it
    resolves)."""
    for d in (out, *out.parents):
        try:
            return d, fsio.open_dir(d, follow=True)
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError as exc:
            raise ExportError(f"cannot examine {d}, at or above --out {out}: {exc.strerror or exc}.") from None
    raise ExportError(f"cannot examine / above --out {out}.")  # pragma: no cover - / always exists


def check_not_the_store(out: Path, store_root: Path, store_fd: int) -> None:
    """Refuse an --out that is the store, holds it, or lies inside it: by path as named and as resolved, and
    by (device, inode) of the opened directories and every directory above them."""
    named, store_named = Path(os.path.abspath(out)), Path(os.path.abspath(store_root))  # noqa: PTH100
    real, store_real = Path(os.path.realpath(named)), Path(os.path.realpath(store_named))
    where = ""
    for o, s in ((named, store_named), (real, store_real)):
        if o == s:
            where = "is the store"
        elif s in o.parents:
            where = "lies inside the store"
        elif o in s.parents:
            where = "holds the store"
        if where:
            break
    if not where:
        store_id = os.fstat(store_fd)
        store_ids = fsio.ancestry(store_fd)
        nearest, fd = _nearest(named)
        try:
            out_ids = fsio.ancestry(fd)
        finally:
            os.close(fd)
        if (store_id.st_dev, store_id.st_ino) in out_ids:
            where = "is the store" if out_ids[0] == store_ids[0] and nearest == named else "lies inside the store"
        elif nearest == named and out_ids[0] in store_ids:
            where = "holds the store"
    if where:
        raise ExportError(
            f"refused --out {out}: it {where} {store_root}; the index is made beside --out and then takes its "
            "place, so the store's files would be deleted or mixed with the index's.",
            tip=_TIP_OUT,
        )


def check_out(out: Path, store_root: Path, store_fd: int) -> Identity | None:
    """--out may be absent (None); if present it is a directory of this user's (or root's) that no one else
    can write, and so is every directory above it (the --root rule), or another user could swap the index;
    it is not the store (nor holds it, nor lies inside it); and it is empty or an earlier export. Returns
    the (device, inode) of the --out found, so that the swap can check it is still the one judged."""
    _ancestors_problem(out)
    check_not_the_store(out, store_root, store_fd)
    try:
        st = os.lstat(out)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ExportError(f"cannot examine --out {out}: {exc.strerror or exc}.") from None
    problem = (
        "is a symbolic link"
        if stat.S_ISLNK(st.st_mode)
        else "is not a directory"
        if not stat.S_ISDIR(st.st_mode)
        else fsio.owner_problem(st)
    )
    if problem:
        raise ExportError(
            f"refused --out {out}: it {problem}, so another user could change the index nodes install from.",
            tip="Give --out a directory of this user's that no one else can write (chmod go-w), or a new path.",
        )
    try:
        fd = fsio.open_dir(out)
    except OSError as exc:
        raise ExportError(f"cannot open --out {out}: {exc.strerror or exc}.") from None
    try:
        held = os.fstat(fd)
        entries = fsio.list_dir(fd)
        if entries and not is_marked(fd):
            shown = ", ".join(entries[:5]) + (", …" if len(entries) > 5 else "")
            raise ExportError(
                f"refused --out {out}: it holds {len(entries)} entr{'y' if len(entries) == 1 else 'ies'} ({shown}) "
                f"and no {MARKER} of an earlier export; lockbuild replaces only an empty directory or an index "
                "it wrote, so what is there was left as it was.",
                tip="Give --out a new or empty directory. An index an older lockbuild wrote has no marker: "
                "remove it yourself (rm -r OUT) once you are sure it holds nothing else.",
            )
    finally:
        os.close(fd)
    if (held.st_dev, held.st_ino) != (st.st_dev, st.st_ino):
        raise ExportError(f"refused --out {out}: it changed while it was examined.", tip=_TIP_OUT)
    return held.st_dev, held.st_ino
