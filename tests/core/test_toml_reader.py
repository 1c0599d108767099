"""One strict TOML reader (lockbuild/documents.py::loads_toml) for every TOML file lockbuild reads, and one
Problems with two modes: every problem collected (a recipe), or the first raised."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import lockbuild
from lockbuild.documents import Problems, TomlRefusal, loads_toml
from lockbuild.errors import IntegrityError, PolicyError, RecipeError, ResolveError
from lockbuild.lock import parse_pylock
from lockbuild.site.delta import parse_head
from lockbuild.site.partlist import parse_part_list
from lockbuild.target import Target
from lockbuild.trust.truststore import parse_policy

PACKAGE = Path(lockbuild.__file__).parent
READER = "documents.py"
# Modules that import tomlkit to rewrite a recipe keeping its comments; each rewrites text the recipe
# parser has already read strictly (recipe/parse.py, through the reader), and none decides on a value.
TOMLKIT_REWRITERS = {
    "recipe/edit.py": "writes new [[builds]] into a recipe's text",
    "builder/gpufit.py": "writes the measured fit into the resolved recipe",
    "builder/plan.py": "writes the resolved pins into the resolved recipe",
    "builder/update.py": "writes a locked build's table as TOML",
}
DEEP = b"a = " + b"[" * 5_000 + b"]" * 5_000 + b"\n"


def _toml_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names = [node.value] if node.value in ("tomllib", "tomlkit", "tomli", "toml") else []
        found.update(n.split(".")[0] for n in names if n.split(".")[0] in ("tomllib", "tomlkit", "tomli", "toml"))
    return found


def _offenders() -> dict[str, set[str]]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        names = _toml_imports(path)
        if rel == READER:
            continue
        if rel in TOMLKIT_REWRITERS:
            names -= {"tomlkit"}
        if names:
            out[rel] = names
    return out


def test_only_the_reader_parses_toml() -> None:
    """Every TOML document is read by loads_toml (bounded, UTF-8, no key twice, no traceback when nested
    too deeply); a module importing a TOML parser itself bypasses that. Deferred imports count."""
    assert "tomllib" in _toml_imports(PACKAGE / READER)
    assert _offenders() == {}, "read TOML through lockbuild.documents.loads_toml"
    unneeded = sorted(rel for rel in TOMLKIT_REWRITERS if "tomlkit" not in _toml_imports(PACKAGE / rel))
    assert unneeded == [], f"the allow-list names modules that no longer import tomlkit: {unneeded}"


def test_the_structural_test_sees_a_planted_parser(tmp_path: Path) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text("def f(t):\n    import tomllib\n    return tomllib.loads(t)\n")
    assert _toml_imports(planted) == {"tomllib"}
    planted.write_text("import importlib\nP = importlib.import_module('tomlkit')\n")
    assert _toml_imports(planted) == {"tomlkit"}


def _refuse(why: TomlRefusal) -> ResolveError:
    return ResolveError(f"{why.kind}: {why.detail}")


@pytest.mark.parametrize(
    ("raw", "kind", "words"),
    [
        (b"a = 1\na = 2\n", "syntax", "Cannot overwrite a value"),
        (b"[t]\nx = 1\n[t]\ny = 2\n", "syntax", "Cannot declare"),
        (b"a = '\xff'\n", "encoding", "can't decode"),
        (b"a = [\n", "syntax", "Invalid value"),
        (DEEP, "depth", "recursion"),
        (b"a = '" + b"x" * 100 + b"'\n", "size", "107 bytes, expected at most 50"),
    ],
    ids=["duplicate-key", "duplicate-table", "not-utf8", "not-toml", "too-deep", "too-large"],
)
def test_the_reader_refuses_every_kind_of_bad_document(raw: bytes, kind: str, words: str) -> None:
    bound = 50 if kind == "size" else len(raw)
    with pytest.raises(ResolveError, match=f"^{kind}: .*{words}"):
        loads_toml(raw, max_bytes=bound, refuse=_refuse)
    assert loads_toml(b"a = 1\n", max_bytes=6, refuse=_refuse) == {"a": 1}


def test_every_reader_refuses_a_document_nested_too_deeply_without_a_traceback() -> None:
    """A delta's head, a part list and uv's pylock once let RecursionError escape as a traceback; every
    reader now refuses it with its own message."""
    with pytest.raises(IntegrityError, match=r"^the delta's delta.toml is not valid TOML: maximum recursion"):
        parse_head(DEEP)
    with pytest.raises(IntegrityError, match=r"^list is not a valid part list: maximum recursion"):
        parse_part_list(DEEP, "list")
    with pytest.raises(ResolveError, match=r"^uv wrote a pylock.toml lockbuild cannot read: maximum recursion"):
        parse_pylock(DEEP.decode(), Target.of("3.11", "x86_64-manylinux_2_28"))
    with pytest.raises(PolicyError, match="nested too deeply; the trust store fails closed"):
        parse_policy(DEEP.decode())


def test_every_reader_refuses_a_key_given_twice() -> None:
    """Two readers that kept the first and the last value would disagree about a document."""
    with pytest.raises(IntegrityError, match="not valid TOML: Cannot overwrite a value"):
        parse_head(b"format = 1\nformat = 1\n")
    with pytest.raises(PolicyError, match=r"not valid TOML .*Cannot overwrite a value"):
        parse_policy("threshold = 1\nthreshold = 2\n")
    with pytest.raises(RecipeError, match="not valid TOML: Cannot overwrite a value"):
        from lockbuild.recipe import parse_recipe

        parse_recipe("[engine]\nname = 'a'\nname = 'b'\n", "r.toml")


def _error(items: tuple[str, ...]) -> RecipeError:
    return RecipeError(f"{len(items)}: " + " | ".join(items), problems=items)


def test_problems_collects_every_problem_then_raises_once() -> None:
    p = Problems("r.toml", error=_error)
    p.add("a", "bad")
    p.add("b", "worse")
    with pytest.raises(RecipeError) as got:
        p.raise_if_any()
    assert str(got.value).startswith("2: a: bad | b: worse") and got.value.problems == ("a: bad", "b: worse")
    Problems("r.toml", error=_error).raise_if_any()  # none: nothing raised


def test_problems_in_first_mode_raises_at_the_first() -> None:
    p = Problems("r.toml", error=_error, first=True)
    with pytest.raises(RecipeError, match=r"^1: a: bad"):
        p.add("a", "bad")


def test_a_policy_is_refused_at_its_first_problem() -> None:
    """The trust store fails closed at the first problem (Problems' first mode): the message says that one."""
    with pytest.raises(PolicyError) as got:
        parse_policy("thresold = 2\nthreshold = 0\nnot-after = 2026-01-01\n", source="trust/policy.toml")
    assert got.value.message == (
        "trust/policy.toml: unknown keys ['thresold']; expected only threshold, not-before, not-after."
        " 'thresold': did you mean 'threshold'?"
    )
    with pytest.raises(PolicyError) as got:
        parse_policy("threshold = 0\nnot-after = 2026-01-01\n", source="p.toml")
    assert got.value.message == "p.toml: threshold must be a whole number of at least 1, found the number 0."


LONG_INTEGER = b"format = " + b"1" * 5000 + b"\n"  # more digits than Python converts to an int
DOTTED = b"format = 1\n[" + b".".join([b"a"] * 3000) + b"]\nb = 1\n"  # nests without recursing in the parser


@pytest.mark.parametrize("doc", [LONG_INTEGER, DOTTED], ids=["long-integer", "dotted-headers"])
def test_every_reader_refuses_a_long_integer_or_a_deep_dotted_table_with_its_own_error(doc: bytes) -> None:
    """An integer of 5,000 digits (a ValueError inside tomllib) and tables nested 3,000 deep by dotted
    headers (no recursion in the parser, a RecursionError in whatever prints them later) are refused by
    the reader itself, each with its reader's own error, never an internal error."""
    from lockbuild.bundle.manifestparse import parse_manifest
    from lockbuild.recipe import parse_recipe

    with pytest.raises(IntegrityError, match=r"^the delta's delta.toml is not valid TOML"):
        parse_head(doc)
    with pytest.raises(IntegrityError, match=r"^list is not a valid part list"):
        parse_part_list(doc, "list")
    with pytest.raises(ResolveError, match=r"^uv wrote a pylock.toml lockbuild cannot read"):
        parse_pylock(doc.decode(), Target.of("3.11", "x86_64-manylinux_2_28"))
    with pytest.raises(PolicyError):
        parse_policy(doc.decode())
    with pytest.raises(RecipeError):
        parse_recipe(doc.decode(), "r.toml")
    with pytest.raises(IntegrityError):
        parse_manifest(doc)


def test_the_depth_bound_counts_tables_and_arrays_without_recursion() -> None:
    def refuse(r: TomlRefusal) -> RecipeError:
        return RecipeError(f"{r.kind}: {r.detail}")

    ok = b"[" + b".".join([b"a"] * 31) + b"]\nb = 1\n"  # 31 tables below the document: 32 levels in all
    assert loads_toml(ok, max_bytes=1 << 20, refuse=refuse)
    with pytest.raises(RecipeError, match=r"^depth: tables or arrays nested 33 deep, expected 32"):
        loads_toml(b"[" + b".".join([b"a"] * 32) + b"]\nb = 1\n", max_bytes=1 << 20, refuse=refuse)
    with pytest.raises(RecipeError, match=r"^depth: "):
        loads_toml(b"x = " + b"[" * 40 + b"]" * 40 + b"\n", max_bytes=1 << 20, refuse=refuse)
