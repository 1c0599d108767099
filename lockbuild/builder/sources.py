"""The engine's source archive, as the builder reads it: its top directory and its requirements file,
whose lines enter the lock only under the lock rules (no options, URLs, paths or ``name @ url``)."""

from __future__ import annotations

import re
import tarfile
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from packaging.utils import canonicalize_name

from lockbuild.errors import RecipeError
from lockbuild.limits import MiB
from lockbuild.recipe import Build
from lockbuild.recipe.checks import requirement
from lockbuild.recipe.fields import SHOWN, listing

MAX_REQUIREMENTS_FILE = MiB
_COMMENT = re.compile(r"(^|\s)#.*$")


def source_requirements(text: str, *, skip: tuple[str, ...], where: str) -> tuple[str, ...]:
    """The requirement lines of an engine's source requirements file.

    Options (``-r``, ``-e``, ``--index-url``...), URLs and ``name @ url`` are refused: they would fetch
    from elsewhere or install what the lock never saw. Lines naming an extra index's packages are skipped
    (the build names those itself).
    """
    out: list[str] = []
    problems: list[str] = []
    skipped = {canonicalize_name(s) for s in skip}
    for n, raw in enumerate(text.splitlines(), start=1):
        line = _COMMENT.sub("", raw).strip()
        if not line:
            continue
        shown = line[:SHOWN]
        if line.startswith("-"):
            problems.append(f"line {n}: options such as {line.split()[0][:SHOWN]!r} are not allowed: {shown!r}")
            continue
        if line.startswith((".", "/", "~")):
            problems.append(f"line {n}: paths are not allowed in requirements: {shown!r}")
            continue
        got = requirement(line)
        if isinstance(got, str):
            problems.append(f"line {n}: {got}: {shown!r}")
            continue
        if canonicalize_name(got.name) in skipped:
            continue
        out.append(line)
    if problems:
        shown = listing(problems)
        raise RecipeError(
            f"{where}: the engine's requirements file has lines lockbuild refuses:\n{shown}",
            problems=tuple(problems),
            tip="Only plain requirement lines can enter a lock; name anything else in the recipe.",
        )
    return tuple(out)


def read_source_requirements(archive: Path | BinaryIO, build: Build) -> tuple[str, ...]:
    """Check the source archive's top directory and read its requirements file under the lock rules.

    ``archive`` is best an open file, the one its digest was checked on (``fetch.open_verified``)."""
    src = build.source
    if src is None:
        raise RecipeError(f"{build.id}: expected a [builds.source] table to read requirements from, found none")
    where = f"{src.url} ({build.id})"
    wanted = f"{src.top}/{src.requirements}" if src.requirements else None
    saw_top = False
    text: str | None = None
    try:
        where_from = {"name": archive} if isinstance(archive, Path) else {"fileobj": archive}
        with tarfile.open(mode="r:*", **where_from) as tf:
            for member in tf:
                name = str(PurePosixPath(member.name))
                if name == src.top or name.startswith(src.top + "/"):
                    saw_top = True
                if wanted is not None and name == wanted:
                    if not member.isfile() or member.size > MAX_REQUIREMENTS_FILE:
                        raise RecipeError(f"{where}: {wanted} is not a regular file of at most 1 MiB.")
                    f = tf.extractfile(member)
                    if f is None:
                        raise RecipeError(f"{where}: {wanted} cannot be read from the archive.")
                    text = f.read().decode("utf-8", errors="strict")
    except (tarfile.TarError, OSError, UnicodeDecodeError) as exc:
        raise RecipeError(f"{where}: cannot read the source archive as a tar: {exc}") from None
    if not saw_top:
        raise RecipeError(
            f"{where}: expected a top directory {src.top!r} in the source archive, found none.",
            tip="Set source.top to the archive's top directory.",
        )
    if wanted is None:
        return ()
    if text is None:
        raise RecipeError(f"{where}: the source archive has no {wanted}.", tip="Check source.requirements.")
    skip = tuple(name for ix in build.extra_indexes for name in ix.packages)  # each extra index's own
    return source_requirements(text, skip=skip, where=where)
