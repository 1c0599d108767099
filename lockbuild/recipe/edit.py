"""Writing new builds into a recipe's text, keeping every comment and the order (tomlkit). Pure.

``recipe update`` decides what the builds are; this module derives a build's requirements and variant from
its template and appends the builds' tables to the text.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import tomlkit
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from lockbuild.documents import JSON
from lockbuild.errors import RecipeError
from lockbuild.recipe.model import Build

# Keys of a template that belong to its release and are not carried over (the new build gets its own).
_OWN_KEYS = ("version", "variant", "platform", "requirements", "as-of", "gpu", "pin-sha256", "wheel")


@dataclass(frozen=True)
class Pins:
    """A template's requirements for the new release: the primary ones, and the pins that follow it."""

    primary: tuple[str, ...]  # the engine's pin moved, other == pins dropped (the name kept, unpinned)
    second: tuple[tuple[str, str], ...]  # (canonical name, local label or "") of each extra-index == pin
    followers: tuple[str, ...]  # canonical names pinned to another package's version (firstuse.follows)


def _single_pin(req: Requirement) -> str | None:
    specs = list(req.specifier)
    return specs[0].version if len(specs) == 1 and specs[0].operator == "==" else None


def moved_requirements(template: Build, pypi: str, version: str, follows: Mapping[str, str]) -> Pins:
    """The template's requirements for release ``version`` of the engine ``pypi``."""
    engine = canonicalize_name(pypi)
    primary: list[str] = []
    second: list[tuple[str, str]] = []
    followers: list[str] = []
    for text in template.requirements:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            primary.append(text)
            continue
        name = canonicalize_name(req.name)
        extras = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
        marker = f"; {req.marker}" if req.marker else ""
        pinned = _single_pin(req)
        if name == engine:
            primary.append(f"{req.name}{extras}=={version}{marker}")
        elif name in follows and pinned is not None:
            followers.append(name)
        elif template.index_for(name) is not None and pinned is not None:
            second.append((name, pinned.partition("+")[2]))
        elif pinned is not None:
            primary.append(f"{req.name}{extras}{marker}")  # the old release's pin, left to the resolver
        else:
            primary.append(text)
    return Pins(tuple(primary), tuple(second), tuple(followers))


def cuda_level(packages: Sequence[tuple[str, str]]) -> str | None:
    """``cu130`` from the lock's CUDA runtime (nvidia-cuda-runtime 13.0.96, or nvidia-cuda-runtime-cu12)."""
    for name, version in packages:
        if canonicalize_name(name).startswith("nvidia-cuda-runtime"):
            try:
                major, minor = Version(version).release[:2]
            except (InvalidVersion, ValueError):
                continue
            return f"cu{major}{minor}"
    return None


def variant_name(template: Build, level: str | None, arch: str) -> str:
    """The new variant: the measured CUDA level in place of the template's (``cu128-flashinfer`` ->
    ``cu130-flashinfer``), and the architecture added when it is not the template's."""
    head, sep, suffix = template.variant.partition("-")
    suffix = "-".join(p for p in suffix.split("-") if p not in ("x86_64", "aarch64")) if sep else ""
    base = (level or head) + (f"-{suffix}" if suffix else "")
    return base if arch == template.target.parsed.arch else f"{base}-{arch}"


def build_table(
    template: Mapping[str, object],
    fields: Mapping[str, JSON],
) -> tomlkit.items.Table:
    """A [[builds]] table: the template's keys in its order, each key of ``fields`` in place of the template's
    (None: left out), the template's keys that belong to its release left out."""
    t = tomlkit.table()
    for key, value in template.items():
        if key in fields:
            if fields[key] is not None:  # None: the key is left out
                t.add(key, _item(fields[key]))
        elif key not in _OWN_KEYS:
            t.add(key, _item(value))
    for key, value in fields.items():
        if key not in template and value is not None:
            t.add(key, _item(value))
    return t


def _item(value: object) -> tomlkit.items.Item:
    if isinstance(value, Mapping):  # an inline table in the recipes' spelling, { key = value, ... }
        inner = ", ".join(f"{tomlkit.key(str(k)).as_string()} = {_item(v).as_string()}" for k, v in value.items())
        return tomlkit.parse(f"v = {{ {inner} }}")["v"]  # type: ignore[no-any-return]
    if isinstance(value, list | tuple) and any(isinstance(v, Mapping) for v in value):
        arr = tomlkit.array()
        arr.extend(_item(v) for v in value)
        return arr
    return tomlkit.item(value)


def with_builds(text: str, tables: Sequence[tuple[Sequence[str], tomlkit.items.Table]]) -> str:
    """The recipe's text with each (comment lines, table) appended to its [[builds]], the comment above the
    table's header after a blank line, everything else as it was."""
    doc = tomlkit.parse(text)
    builds = doc["builds"]
    if not isinstance(builds, tomlkit.items.AoT):
        raise RecipeError("expected [[builds]] tables in the recipe, found another form of builds.")
    for comment, t in tables:
        before = builds[-1]
        for _ in range(2):  # a blank line before the comment (a value parsed inline may lack its newline)
            if not before.as_string().endswith("\n\n"):
                before.add(tomlkit.nl())
        for line in comment:
            before.add(tomlkit.comment(line))
        builds.append(t)
    return tomlkit.dumps(doc)


def template_tables(text: str) -> list[dict[str, object]]:
    """Each [[builds]] table of the text, unwrapped, in order (the parsed Build's ``position`` indexes it)."""
    return [dict(t.unwrap()) for t in tomlkit.parse(text)["builds"]]


def diff(old: str, new: str, path: str) -> str:
    return "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{path}", f"b/{path}"))
