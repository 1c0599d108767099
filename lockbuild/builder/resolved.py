"""The resolved recipe the builder records: the recipe text with only one build, its as-of filled in."""

from __future__ import annotations

import datetime as dt

import tomlkit

from lockbuild.recipe import Build, Recipe


def resolved_recipe(recipe: Recipe, build: Build, as_of: dt.datetime, self_wheel: str | None = None) -> str:
    """``recipe`` with only ``build`` in it and its ``as-of`` filled in (comments kept); for lockbuild's
    own wheel (``wheel = { self = true }``), its sha256 too."""
    doc = tomlkit.parse(recipe.text)
    builds = doc["builds"]
    keep = builds[build.position]
    keep["as-of"] = as_of.astimezone(dt.UTC)
    if self_wheel is not None:
        pin = tomlkit.inline_table()
        pin.update({"self": True, "sha256": self_wheel})
        keep["wheel"] = pin
    if isinstance(builds, tomlkit.items.AoT):
        new = tomlkit.aot()
        new.append(keep)
        doc["builds"] = new
    else:  # builds = [ { ... }, ... ], an inline array of tables
        for i in range(len(builds) - 1, -1, -1):
            if i != build.position:
                del builds[i]
    return tomlkit.dumps(doc)
