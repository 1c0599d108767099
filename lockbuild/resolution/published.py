"""The lock checks a recipe's extra file against the sha256 its package publishes for it in its own source
(tiktoken names the expected digest of each encoding in tiktoken_ext/openai_public.py; firstuse.py says
which packages do and where)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import BinaryIO
from urllib.parse import urlsplit

from lockbuild import wheelfile
from lockbuild.bundle.firstuse import KNOWN, published_digests
from lockbuild.errors import RecipeError
from lockbuild.limits import MiB
from lockbuild.lock import LockedFile
from lockbuild.recipe import Build, Recipe

MAX_SOURCE = MiB  # the published file read from the wheel, at most


def check_published(
    recipe: Recipe, build: Build, files: Sequence[LockedFile], open_file: Callable[[LockedFile], BinaryIO]
) -> None:
    """RecipeError when an extra file's sha256 is not the one a locked package publishes for that file."""
    if not build.extra_files:
        return
    for known in (k for k in KNOWN if k.digests_in):
        wheel = next((f for f in files if f.name == known.package and f.filename.endswith(".whl")), None)
        if wheel is None:
            continue
        with open_file(wheel) as raw, wheelfile.opened(raw, wheel.filename, error=RecipeError) as z:
            try:
                info = z.getinfo(known.digests_in)
            except KeyError:
                continue  # this release keeps them elsewhere: nothing to check against
            if info.file_size > MAX_SOURCE:
                continue
            digests = published_digests(z.read(info).decode("utf-8", "replace"))
        for i, x in enumerate(build.extra_files):
            name = urlsplit(x.url).path.rsplit("/", 1)[-1]
            expected = digests.get(name)
            if expected is not None and expected != x.sha256:
                raise RecipeError(
                    f"{recipe.path}: builds[{build.position}].extra-files[{i}] ({name}) has sha256 {x.sha256}, but "
                    f"{known.package} {wheel.version} publishes {expected} for {name} in {known.digests_in}; "
                    "expected the two to agree.",
                    tip=f"Take the sha256 {known.package} publishes (and check the URL): the engine would refuse "
                    "a file of another digest at first use.",
                )
