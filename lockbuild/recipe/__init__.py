"""Recipes: one TOML file per engine, parsed and validated once into frozen dataclasses.

Every problem in a recipe is collected and reported together, each naming the file, the key, what was
expected and what was found; unknown keys get a "did you mean". What only the builder needs (the resolved
recipe, the engine's source requirements) lives in ``lockbuild.builder``."""

from lockbuild.recipe.fields import MAX_LIST, MAX_STRING
from lockbuild.recipe.model import (
    Assets,
    Build,
    Engine,
    ExtraFileSpec,
    GpuRequirement,
    Interpreter,
    Recipe,
    ReleaseWheel,
    SecondIndex,
    SelfWheel,
    SourceArchive,
    UrlWheel,
)
from lockbuild.recipe.parse import MAX_RECIPE_BYTES, load_recipe, parse_recipe

__all__ = [
    "MAX_LIST",
    "MAX_RECIPE_BYTES",
    "MAX_STRING",
    "Assets",
    "Build",
    "Engine",
    "ExtraFileSpec",
    "GpuRequirement",
    "Interpreter",
    "Recipe",
    "ReleaseWheel",
    "SecondIndex",
    "SelfWheel",
    "SourceArchive",
    "UrlWheel",
    "load_recipe",
    "parse_recipe",
]
