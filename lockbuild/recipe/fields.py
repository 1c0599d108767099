"""Reading a recipe's TOML tables with typed getters that collect every problem, then raise once (the
strict reader and its two modes are ``lockbuild.documents``'s)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from lockbuild.documents import Problems, TomlRefusal, loads_toml
from lockbuild.errors import RecipeError
from lockbuild.fsio import read_regular
from lockbuild.text import closest

MAX_STRING = 4096
MAX_LIST = 1000
SHOWN = 80

T = TypeVar("T")


def recipe_problems(path: str) -> Problems:
    """A recipe's problems, collected: every one listed in one RecipeError."""

    def error(items: tuple[str, ...]) -> RecipeError:
        n = len(items)
        return RecipeError(
            f"{path}: {n} problem{'s' if n > 1 else ''} in the recipe:\n{listing(list(items))}",
            problems=items,
            tip="Fix each key listed; docs/release-engineers.md describes every recipe key.",
        )

    return Problems(path, error=error)


def listing(items: list[str], most: int = 50) -> str:
    lines = [f"  - {x}" for x in items[:most]]
    if len(items) > most:
        lines.append(f"  ... and {len(items) - most} more")
    return "\n".join(lines)


def describe(value: object) -> str:
    kind = {
        str: "a string",
        int: "an integer",
        float: "a number",
        bool: "a boolean",
        list: "a list",
        dict: "a table",
    }.get(type(value), type(value).__name__)
    shown = repr(value)
    if len(shown) > 40:
        shown = shown[:37] + "..."
    return f"{kind} ({shown})" if not isinstance(value, dict | list) else kind


class Table:
    """A TOML table being read: typed getters that record problems instead of raising."""

    def __init__(self, data: Mapping[str, Any], where: str, problems: Problems, known: tuple[str, ...]) -> None:
        self.data = data
        self.where = where
        self.p = problems
        self.meant: set[str] = set()  # keys a misspelling stands for: one problem each, not a second "missing"
        for key in data:
            if key not in known:
                close = closest(key, known)
                hint = f"; did you mean {close!r}?" if close else f"; known keys: {', '.join(known)}"
                self.p.add(self.key(key), f"unknown key{hint}")
                if close is not None:
                    self.meant.add(close)

    def key(self, name: str) -> str:
        shown = name if len(name) <= SHOWN else name[: SHOWN - 3] + "..."
        return f"{self.where}.{shown}" if self.where else shown

    def get(self, name: str, kind: type[T], expected: str, *, required: bool = True) -> T | None:
        if name not in self.data:
            if required and name not in self.meant:
                self.p.add(self.key(name), f"missing; expected {expected}")
            return None
        value = self.data[name]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            self.p.add(self.key(name), f"expected {expected}, found {describe(value)}")
            return None
        if isinstance(value, str) and len(value) > MAX_STRING:
            self.p.add(self.key(name), f"expected at most {MAX_STRING} characters, found {len(value)}")
            return None
        return value

    def string(
        self,
        name: str,
        expected: str = "a string",
        *,
        required: bool = True,
        check: Callable[[str], bool] | None = None,
    ) -> str | None:
        value = self.get(name, str, expected, required=required)
        if value is not None and check is not None and not check(value):
            self.p.add(self.key(name), f"expected {expected}, found {value[:80]!r}")
            return None
        return value

    def strings(self, name: str, expected: str, *, required: bool = True) -> tuple[str, ...] | None:
        value = self.get(name, list, expected, required=required)
        if value is None:
            return None
        if len(value) > MAX_LIST:
            self.p.add(self.key(name), f"expected at most {MAX_LIST} items, found {len(value)}")
            return None
        bad = [i for i, v in enumerate(value) if not isinstance(v, str) or len(v) > MAX_STRING]
        if bad:
            self.p.add(self.key(name), f"expected {expected}, but item {bad[0]} is {describe(value[bad[0]])}")
            return None
        return tuple(value)

    def table(self, name: str) -> Mapping[str, Any] | None:
        return self.get(name, dict, "a table", required=False)


def read_recipe_text(path: Path, max_size: int) -> str:
    """A recipe file's text: a regular file read by descriptor and bounded (a FIFO or a device is refused,
    never waited on), decoded as UTF-8; each failure a RecipeError."""
    try:
        raw = read_regular(path, what="recipe", max_size=max_size, error=RecipeError)
    except FileNotFoundError:
        raise RecipeError(f"cannot read recipe {path}: No such file or directory", tip="Check the path.") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise RecipeError(f"{path}: expected UTF-8 text, found undecodable bytes") from None


def load_toml(text: str, path: str, max_bytes: int, what: str = "a recipe") -> dict[str, Any]:
    """``text`` as TOML, at most ``max_bytes`` long; each failure a RecipeError naming ``path``."""

    def refuse(why: TomlRefusal) -> RecipeError:
        if why.kind == "size":
            return RecipeError(f"{path}: expected {what} of at most {max_bytes} bytes, found {why.size}")
        if why.kind == "depth":
            return RecipeError(f"{path}: not valid TOML: nested too deeply")
        return RecipeError(f"{path}: not valid TOML: {why.detail}", tip="Check the line and column named.")

    return loads_toml(text, max_bytes=max_bytes, refuse=refuse)
