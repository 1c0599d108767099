"""The model recipe: a ``[model]`` table naming a Hugging Face repository at one commit.

Parsed as strictly as an engine recipe; a branch or tag name where a commit belongs is refused (a name
moves; a commit does not). The selection of files is ``recipe/selection.py``'s."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lockbuild.bundle.modelinfo import COMMIT, repo_id
from lockbuild.documents import Problems
from lockbuild.errors import RecipeError
from lockbuild.fsio import read_regular
from lockbuild.limits import MiB
from lockbuild.recipe.checks import plain_name
from lockbuild.recipe.fields import SHOWN, Table, describe, load_toml, read_recipe_text, recipe_problems
from lockbuild.recipe.selection import DEFAULT_INCLUDE, MAX_PATTERNS, pattern_problem

MAX_MODEL_RECIPE_BYTES = 64 << 10
_MODEL_KEYS = ("name", "repo", "revision", "include", "exclude", "max-file-gb")
DEFAULT_MAX_FILE_GB = 100
GB = 10**9  # max-file-gb counts decimal gigabytes, as the Hub shows sizes


@dataclass(frozen=True)
class ModelRecipe:
    """A model recipe, validated: the bundle's name, the Hub repo and commit, the selection patterns."""

    path: str
    name: str
    repo: str
    revision: str
    include: tuple[str, ...]
    exclude: tuple[str, ...]
    text: str  # the recipe as written (its sha256 is the manifest's recipe-sha256)
    max_file_gb: float = DEFAULT_MAX_FILE_GB  # the largest file the Hub may state, in GB (10**9 bytes)

    @property
    def max_file_bytes(self) -> int:
        return int(self.max_file_gb * GB)

    @property
    def org(self) -> str:
        return self.repo.split("/", 1)[0]


def is_model_recipe(text: str) -> bool:
    """Whether a recipe's text has a ``[model]`` table (read before the strict parse picks its parser)."""
    try:
        data = load_toml(text, "<recipe>", MiB)
    except RecipeError:
        return False
    return "model" in data


def is_model_recipe_file(path: Path) -> bool:
    """Whether the recipe at ``path`` is a model recipe (False when it cannot be read: the engine recipe's
    reader then says why)."""
    try:
        raw = read_regular(path, what="recipe", max_size=MiB, error=RecipeError)
    except (OSError, RecipeError):
        return False
    try:
        return is_model_recipe(raw.decode("utf-8"))
    except UnicodeDecodeError:
        return False


def _patterns(t: Table, key: str, default: tuple[str, ...] | None) -> tuple[str, ...]:
    values = t.strings(key, 'a list of file patterns, e.g. ["*.safetensors", "config.json"]', required=False)
    if values is None:
        return default if default is not None and key not in t.data else ()
    if len(values) > MAX_PATTERNS:
        t.p.add(t.key(key), f"expected at most {MAX_PATTERNS} patterns, found {len(values)}")
        return ()
    for i, pattern in enumerate(values):
        why = pattern_problem(pattern)
        if why:
            t.p.add(t.key(key), f"pattern {i} {pattern[:SHOWN]!r}: {why}")
    if key == "include" and not values:
        t.p.add(t.key(key), "expected at least one pattern, found an empty list (leave the key out for the default)")
    return tuple(values)


def _max_file_gb(t: Table) -> float:
    """``max-file-gb``: a positive number of gigabytes (default 100), the largest file the Hub may state."""
    value = t.data.get("max-file-gb", DEFAULT_MAX_FILE_GB)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        t.p.add(
            t.key("max-file-gb"),
            f"expected a positive number of gigabytes (default {DEFAULT_MAX_FILE_GB}), found {describe(value)}",
        )
        return DEFAULT_MAX_FILE_GB
    return float(value)


def _model(
    data: Mapping[str, Any], p: Problems
) -> tuple[str, str, str, tuple[str, ...], tuple[str, ...], float] | None:
    t = Table(data, "model", p, _MODEL_KEYS)
    name = t.string("name", "a lower-case name of letters, digits, '.', '_' or '-'", check=plain_name)
    repo = t.string("repo", 'a Hugging Face repo id ORG/NAME, e.g. "Qwen/Qwen2.5-0.5B-Instruct"', check=repo_id)
    revision = t.get("revision", str, "the commit: 40 lower-case hex digits")
    if revision is not None and not COMMIT.fullmatch(revision):
        hint = (
            "a branch or tag name moves, so a bundle built from it is not reproducible; "
            "name the commit it points to now (the Hub shows it beside the file list)"
        )
        if re.fullmatch(r"[0-9A-Fa-f]{40}", revision):
            hint = "write the hex digits in lower case"
        p.add("model.revision", f"expected a commit (40 lower-case hex digits), found {revision[:SHOWN]!r}; {hint}")
        revision = None
    include = _patterns(t, "include", DEFAULT_INCLUDE)
    exclude = _patterns(t, "exclude", ())
    max_file_gb = _max_file_gb(t)
    if name is None or repo is None or revision is None:
        return None
    return name, repo, revision, include, exclude, max_file_gb


def parse_model_recipe(text: str, path: str = "<recipe>") -> ModelRecipe:
    """Parse and validate a model recipe; raise RecipeError (exit 2) listing every problem found."""
    data = load_toml(text, path, MAX_MODEL_RECIPE_BYTES, "a model recipe")
    p = recipe_problems(path)
    top = Table(data, "", p, ("model",))
    table = top.get("model", dict, "a [model] table")
    parsed = _model(table, p) if table is not None else None
    p.raise_if_any()
    if parsed is None:  # every None above recorded a problem, so raise_if_any raised
        raise RecipeError(f"{path}: the [model] table could not be read")
    name, repo, revision, include, exclude, max_file_gb = parsed
    return ModelRecipe(path, name, repo, revision, include, exclude, text, max_file_gb)


def load_model_recipe(path: Path) -> ModelRecipe:
    text = read_recipe_text(path, MAX_MODEL_RECIPE_BYTES)
    return parse_model_recipe(text, str(path))
