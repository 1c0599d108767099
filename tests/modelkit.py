"""Model bundles for the tests, made from the tiny generated model (tests/hubkit.py) without a Hub: the
files hashed here as the Hub states them (git blob sha1; sha256 for LFS files), then the builder's own
assembly (builder/modelbuild.py), writer and signer."""

from __future__ import annotations

import datetime as dt
import hashlib
from pathlib import Path

from hubkit import REPO, tiny_model
from servers import LFS_SUFFIXES

from lockbuild.builder.modelbuild import assemble_model, choose
from lockbuild.builder.pack import Packed, sign, write
from lockbuild.fetch.hub import HubFile
from lockbuild.minisign import read_secret_key
from lockbuild.recipe.modelrecipe import ModelRecipe, parse_model_recipe

COMMIT = "0123456789abcdef0123456789abcdef01234567"
COMMITTED = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)  # the commit's date, as the fake Hub states it by default
LFS = LFS_SUFFIXES  # as the fake Hub (and a repo's .gitattributes) has it


def recipe_text(*, repo: str = REPO, commit: str = COMMIT, extra: str = "") -> str:
    return f'[model]\nname = "tiny-llama"\nrepo = "{repo}"\nrevision = "{commit}"\n{extra}'


def hub_files(files: dict[str, bytes]) -> list[HubFile]:
    out = []
    for path, data in sorted(files.items()):
        blob = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        sha = hashlib.sha256(data).hexdigest() if path.endswith(LFS) else None
        out.append(HubFile(path, len(data), blob, sha))
    return out


def model_bundle(
    tmp: Path,
    secret: Path,
    *,
    recipe: ModelRecipe | None = None,
    files: dict[str, bytes] | None = None,
    out: Path | None = None,
    committed: dt.datetime = COMMITTED,
) -> Packed:
    """A signed bundle of the tiny model (the default selection: no pickle, original/ included)."""
    files = files if files is not None else tiny_model()
    recipe = recipe or parse_model_recipe(recipe_text(extra='exclude = ["original/*"]\n'), "tiny.toml")
    src = tmp / "hub-files"
    fetched = {}
    for path, data in files.items():
        p = src / path
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        fetched[path] = p
    chosen = choose(recipe, hub_files(files))
    manifest, entries = assemble_model(recipe, recipe.revision, chosen.files, fetched, committed=committed)
    written = write(manifest, entries, out or tmp / "out")
    return sign(written, key=read_secret_key(secret, lambda: ""))
