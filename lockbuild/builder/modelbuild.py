"""``lockbuild build MODEL.toml``: a Hugging Face revision as a signed model bundle.

The Hub client lists the commit's files, the recipe's selection picks them, the shared fetcher downloads
them against their stated hashes; here the manifest is made and the bundle written. Same recipe, same
bytes: members in path order, every time the commit's date as the Hub states it (also the serial)."""

from __future__ import annotations

import datetime as dt
import hashlib
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import zstandard

from lockbuild import __version__
from lockbuild.builder.pack import UnsignedBundle, write
from lockbuild.bundle.manifest import Manifest, Member, member_order
from lockbuild.bundle.modelformat import CODE, UNSAFE
from lockbuild.bundle.modelinfo import (
    MODEL_DIR,
    MODEL_FORMAT,
    MODEL_INSTALL,
    MODEL_KIND,
    MODEL_PLATFORM,
    MODEL_PYTHON,
    MODEL_VARIANT,
    NO_LOCK,
    ModelFile,
    ModelTable,
)
from lockbuild.bundle.write import Entry
from lockbuild.digest import pump, reading_into
from lockbuild.errors import IntegrityError, RecipeError, RemoteError
from lockbuild.fetch.cache import Cache
from lockbuild.fetch.fetcher import Fetcher
from lockbuild.fetch.http import make_client
from lockbuild.fetch.hub import HubFile, HubRevision, check_sizes, download_files, list_revision, wanted
from lockbuild.fsio import open_regular
from lockbuild.progress import Progress
from lockbuild.recipe.modelrecipe import ModelRecipe
from lockbuild.recipe.selection import Selection, select
from lockbuild.settings import Settings

MAX_MODEL_FILES = 10_000


@dataclass(frozen=True)
class ModelChoice:
    """The files a build takes, and what the user must be told about the choice."""

    files: tuple[HubFile, ...]
    selection: Selection

    @property
    def warnings(self) -> tuple[str, ...]:
        out = [
            f"{p} is a {UNSAFE} (loading it may run code); it is taken because the recipe names it"
            for p in self.selection.pickles
        ]
        out += [f"{p} is {CODE}: an engine told to trust remote code would run it" for p in self.selection.code]
        left = self.selection.left_out_pickles
        if left:
            out.append(
                f"left out {', '.join(left[:5])}{' …' if len(left) > 5 else ''}: "
                f"{'each is' if len(left) > 1 else 'it is'} "
                f"a {UNSAFE}, taken only when a pattern names it (its path, or a pattern ending in its suffix, "
                "such as *.bin)"
            )
        return tuple(out)


def choose(recipe: ModelRecipe, files: Sequence[HubFile]) -> ModelChoice:
    """The recipe's selection over the revision's files (pure); none at all is a recipe problem."""
    by_path = {f.path: f for f in files}
    selection = select(sorted(by_path), recipe.include, recipe.exclude)
    if not selection.taken:
        err = RecipeError(
            f"{recipe.path}: model.include selects none of the {len(by_path)} files of {recipe.repo} at "
            f"{recipe.revision}; expected at least one.",
            tip="List the revision's files on the Hub and adjust include and exclude.",
        )
        err.exit_code = 2
        raise err
    if len(selection.taken) > MAX_MODEL_FILES:
        raise RemoteError(
            f"{recipe.repo} at {recipe.revision}: the selection has {len(selection.taken)} files; "
            f"at most {MAX_MODEL_FILES} go in a bundle.",
            tip="Narrow model.include.",
        )
    return ModelChoice(tuple(by_path[p] for p in selection.taken), selection)


def file_sha256(path: Path, size: int) -> str:
    """The sha256 of a verified local file of ``size`` bytes (a small file's: the Hub states only its git sha1)."""
    f, _ = open_regular(path, what="downloaded file", max_size=size)
    with f:
        h = hashlib.sha256()
        if pump(reading_into(f), h.update, limit=size) != size:
            raise IntegrityError(f"{path} is not {size} bytes; it changed since it was verified.")
    return h.hexdigest()


def assemble_model(
    recipe: ModelRecipe,
    commit: str,
    files: Sequence[HubFile],
    fetched: Mapping[str, Path],
    *,
    committed: dt.datetime,
) -> tuple[Manifest, list[Entry]]:
    """The manifest and ordered entries of a model bundle; ``fetched`` maps each repo path to its verified
    file, ``committed`` is the commit's date (whole seconds, UTC): the bundle's time and serial."""
    if commit != recipe.revision:
        raise RemoteError(f"the Hub answered commit {commit} for {recipe.repo}; the recipe names {recipe.revision}.")
    text = recipe.text.encode()
    recipe_member = Member("recipe.toml", len(text), hashlib.sha256(text).hexdigest(), "recipe")
    entries: list[Entry] = [Entry(recipe_member, text)]
    model_files: list[ModelFile] = []
    for f in files:
        sha = f.sha256 if f.sha256 is not None else file_sha256(fetched[f.path], f.size)
        member = Member(MODEL_DIR + f.path, f.size, sha, MODEL_KIND)
        entries.append(Entry(member, fetched[f.path]))
        model_files.append(ModelFile(member.path, f.path, f.size, sha, f.blob_id, f.sha256 is not None))
    entries.sort(key=lambda e: member_order(e.member.path))
    model_files.sort(key=lambda m: member_order(m.member))
    manifest = Manifest(
        engine=recipe.name,
        version=commit,
        variant=MODEL_VARIANT,
        python=MODEL_PYTHON,
        platform=MODEL_PLATFORM,
        as_of=committed,
        serial=int(committed.timestamp()),
        recipe_sha256=recipe_member.sha256,
        lockbuild_version=__version__,
        uv_version="none",
        lock_format=NO_LOCK,
        members=tuple(e.member for e in entries),
        install=MODEL_INSTALL,
        format=MODEL_FORMAT,
        zstd_version=".".join(map(str, zstandard.ZSTD_VERSION)),
        model=ModelTable(recipe.repo, commit, tuple(model_files)),
    )
    return manifest, entries


@dataclass(frozen=True)
class ModelWritten:
    """A model bundle written under a temporary name (builder/pack.py's ``UnsignedBundle``), with what was chosen."""

    written: UnsignedBundle
    revision: HubRevision
    choice: ModelChoice


def build_model(
    recipe: ModelRecipe, settings: Settings, out: Path, *, jobs: int, threads: int | None, progress: Progress
) -> ModelWritten:
    """List the revision, choose its files, download them verified through the shared fetcher and cache,
    and write the bundle (unsigned: the caller signs it in the signing process)."""
    cache = Cache(settings.cache_dir)
    cache.check_owner()
    cache.sweep()
    with make_client(settings=settings) as api, make_client(connections=jobs, settings=settings) as downloads:
        downloads.follow_redirects = True  # to the CDN; the token stays on the Hub's origin (Settings.auth_for)
        progress.phase(f"asking {settings.hf_endpoint} for {recipe.repo} at {recipe.revision}")
        revision = list_revision(api, settings.hf_endpoint, recipe.repo, recipe.revision)
        choice = choose(recipe, revision.files)
        check_sizes(  # before a byte is downloaded: the recipe's bound, and the cache's free space
            revision,
            choice.files,
            max_file=recipe.max_file_bytes,
            bound=f"max-file-gb = {recipe.max_file_gb:g}",
            free=shutil.disk_usage(cache.root).free,
            where=cache.root,
            cached=frozenset(
                f.path for f in choice.files if cache.path(wanted(settings.hf_endpoint, revision, f).sha256).is_file()
            ),
        )
        fetcher = Fetcher(cache, downloads, jobs=jobs, progress=progress)
        fetched = download_files(fetcher, settings.hf_endpoint, revision, choice.files)
    manifest, entries = assemble_model(recipe, revision.commit, choice.files, fetched, committed=revision.committed)
    return ModelWritten(write(manifest, entries, out, threads=threads, progress=progress), revision, choice)
