"""Habits the library keeps, pinned by scanning its source: checks that survive ``python -O``, types
that are not hidden, one read size, and modules small enough to hold in one's head."""

from __future__ import annotations

import ast
from pathlib import Path

import lockbuild

PACKAGE = Path(lockbuild.__file__).parent


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _rel(path: Path) -> str:
    return path.relative_to(PACKAGE).as_posix()


def test_no_assert_statement_in_the_library() -> None:
    """``python -O`` drops assert statements: a check the library relies on raises the family's error."""
    found = [
        f"{_rel(path)}:{node.lineno}"
        for path in _modules()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Assert)
    ]
    assert not found, f"assert statements in lockbuild/ (raise an error from lockbuild.errors instead): {found}"


def _names_any(tree: ast.AST) -> list[int]:
    return [
        node.lineno
        for node in ast.walk(tree)
        if (isinstance(node, ast.Name) and node.id == "Any") or (isinstance(node, ast.Attribute) and node.attr == "Any")
    ]


def test_the_commands_hide_no_type_behind_any() -> None:
    """The commands name the types they handle (JSON output is ``documents.JSON``); a str from click that
    must be a Literal is checked, not silenced with ``type: ignore``."""
    commands = [p for p in sorted((PACKAGE / "commands").glob("*.py")) if p.name != "clikit.py"]
    found = {_rel(p): lines for p in commands if (lines := _names_any(ast.parse(p.read_text())))}
    assert found == {}, "name the type (lockbuild.documents.JSON for JSON data)"
    ignored = [
        f"{_rel(p)}:{i}"
        for p in commands
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if "type: ignore" in line
    ]
    assert ignored == [], "check the value instead (e.g. install.nodecheck.gpu_check_of)"


def _is_one_mib(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.BinOp)
        and isinstance(node.op, ast.LShift)
        and isinstance(node.left, ast.Constant)
        and node.left.value == 1
        and isinstance(node.right, ast.Constant)
        and node.right.value == 20
    )


def test_one_read_size_and_one_mib() -> None:
    """Every copy and hash loop reads ``digest.CHUNK``, the only chunk constant; a MiB is written once
    (``limits.MiB``), so no loop reads a size of its own in a disguise like ``1 << 20``."""
    written: dict[str, list[int]] = {}
    chunks: dict[str, list[str]] = {}
    for path in _modules():
        tree = ast.parse(path.read_text())
        if lines := [n.lineno for n in ast.walk(tree) if _is_one_mib(n)]:
            written[_rel(path)] = lines
        names = [
            t.id
            for n in ast.walk(tree)
            if isinstance(n, ast.Assign | ast.AnnAssign)
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
            if isinstance(t, ast.Name) and t.id.lstrip("_").endswith("CHUNK")
        ]
        if names:
            chunks[_rel(path)] = names
    assert {k: len(v) for k, v in written.items()} == {"limits.py": 1}, (
        "write MiB (lockbuild.limits) for a size, digest.CHUNK for a read size"
    )
    assert chunks == {"digest.py": ["CHUNK"]}, "read digest.CHUNK; one chunk constant"


MAX_MODULES = 16  # a package's modules besides __init__.py: one room a newcomer can walk
MIN_LINES = 20  # a smaller module folds into its neighbour, unless it only re-exports
SOFT_MAX_LINES = 500  # a module over this needs its reason in LONG_MODULES
MAX_LINES = 800  # and none is over this
LONG_MODULES: dict[str, str] = {}


def _packages() -> dict[str, list[Path]]:
    found: dict[str, list[Path]] = {}
    for path in _modules():
        found.setdefault(_rel(path.parent) if path.parent != PACKAGE else ".", []).append(path)
    return found


def test_a_package_holds_at_most_sixteen_modules() -> None:
    """One folder per concept, small enough to walk: group a larger one into packages by what they are."""
    crowded = {
        pkg: n for pkg, paths in _packages().items() if (n := sum(p.name != "__init__.py" for p in paths)) > MAX_MODULES
    }
    assert crowded == {}, f"at most {MAX_MODULES} modules per package besides __init__.py"


def _only_reexports(tree: ast.Module) -> bool:
    return all(
        isinstance(node, (ast.Import, ast.ImportFrom))
        or (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))  # the docstring
        or (isinstance(node, ast.Assign) and [t.id for t in node.targets if isinstance(t, ast.Name)] == ["__all__"])
        for node in tree.body
    )


def test_module_sizes() -> None:
    """A room is worth a door: no module under 20 lines unless it only re-exports (``__init__.py`` and
    ``__main__.py`` excepted); one a newcomer reads whole: over 500 lines only with a reason, none over 800."""
    sizes = {_rel(p): (len(p.read_text().splitlines()), p) for p in _modules()}
    tiny = sorted(
        rel
        for rel, (n, p) in sizes.items()
        if n < MIN_LINES
        and p.name not in ("__init__.py", "__main__.py")
        and not _only_reexports(ast.parse(p.read_text()))
    )
    assert tiny == [], f"fold these into a neighbour (under {MIN_LINES} lines)"
    long = {rel: n for rel, (n, _) in sizes.items() if n > SOFT_MAX_LINES and rel not in LONG_MODULES}
    assert long == {}, f"over {SOFT_MAX_LINES} lines: split, or give the reason in LONG_MODULES"
    huge = {rel: n for rel, (n, _) in sizes.items() if n > MAX_LINES}
    assert huge == {}, f"no module over {MAX_LINES} lines"
    stale = [rel for rel in LONG_MODULES if sizes.get(rel, (0, None))[0] <= SOFT_MAX_LINES]
    assert stale == [], "under the bound now: remove them from LONG_MODULES"


MAX_DOCSTRING_LINES = 5  # a module docstring says what the module holds and its one rule; detail goes on the code
SHORTEN_LATER: frozenset[str] = frozenset()  # still longer, with its reason; the list only shrinks


def _docstring_lines(tree: ast.Module) -> int:
    text = ast.get_docstring(tree, clean=False)
    return len(text.strip().splitlines()) if text else 0


def test_module_docstrings_are_five_lines_or_fewer() -> None:
    """A module's docstring is its door sign: what it holds (one concept) and the one rule it enforces, in
    five lines at most; what a function or class does is that function's or class's docstring."""
    lines = {_rel(p): _docstring_lines(ast.parse(p.read_text())) for p in _modules()}
    long = sorted(rel for rel, n in lines.items() if n > MAX_DOCSTRING_LINES and rel not in SHORTEN_LATER)
    assert long == [], f"module docstrings over {MAX_DOCSTRING_LINES} lines: move the detail to the code it describes"
    done = sorted(rel for rel in SHORTEN_LATER if lines.get(rel, 0) <= MAX_DOCSTRING_LINES)
    assert done == [], "short (or gone) now: remove them from SHORTEN_LATER"
    assert _docstring_lines(ast.parse('"""One.\n\nTwo.\nThree.\nFour.\nFive."""')) == 6


def test_no_two_modules_share_a_file_name() -> None:
    """A name says which room: ``doctor.py`` twice is two answers to "where is the doctor?"."""
    seen: dict[str, list[str]] = {}
    for path in _modules():
        if path.name not in ("__init__.py", "__main__.py"):
            seen.setdefault(path.name, []).append(_rel(path))
    assert {n: rels for n, rels in seen.items() if len(rels) > 1} == {}


def test_no_two_classes_share_a_name() -> None:
    """A class name means one thing in the whole package (no two ``Decision``s)."""
    seen: dict[str, list[str]] = {}
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                seen.setdefault(node.name, []).append(_rel(path))
    assert {n: rels for n, rels in seen.items() if len(rels) > 1} == {}


# --- one read-hash loop ----------------------------------------------------------------------------

READ_HASH_PRIMITIVE = "digest.py"  # digest.pump, the one loop (and digest_exactly's threaded ring beside it)
# The download's loop is tuned on its own: free to hash in the loop itself (today its fetch/sink.py hashes).
READ_HASH_LOOP_ALLOWED = {"fetch/fetcher.py": "the transfer's own loop"}
HASH_MAKERS = {"sha1", "sha256", "sha512", "blake2b", "blake2s", "md5", "entry_hash", "git_blob_hash", "_new_hash"}
HASH_MAKERS |= {"BackgroundHash", "TwinHasher"}
HASH_TYPES = ("Hasher", "_Hash", "HASH", "BackgroundHash", "TwinHasher")
READS = {"read", "read1", "readinto", "take", "iter_raw", "iter_bytes"}


def _terminal(node: ast.AST) -> str:
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""


def _makes_hash(value: ast.AST) -> bool:
    return any(
        isinstance(n, ast.Call) and (ast.unparse(n.func).startswith("hashlib.") or _terminal(n.func) in HASH_MAKERS)
        for n in ast.walk(value)
    )


def _hash_names(tree: ast.AST) -> set[str]:
    """The names (a variable's, an attribute's) a module gives a hash object: assigned from hashlib or a
    maker of hashes, or annotated as one."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                    pairs = list(zip(target.elts, node.value.elts, strict=False))
                else:
                    pairs = [(target, node.value)]
                names.update(_terminal(t) for t, v in pairs if _makes_hash(v))
        elif isinstance(node, ast.AnnAssign | ast.arg):
            annotation = node.annotation
            if annotation is not None and any(t in ast.unparse(annotation) for t in HASH_TYPES):
                names.add(_terminal(node.target) if isinstance(node, ast.AnnAssign) else node.arg)
            if isinstance(node, ast.AnnAssign) and node.value is not None and _makes_hash(node.value):
                names.add(_terminal(node.target))
    names.discard("")
    return names


def _read_hash_loops(tree: ast.AST) -> list[int]:
    """The lines of loops that read (``.read``, ``.readinto``, a stream's ``take``, a response's chunks) and
    update a hash, directly or through a function of the same module that does (one named as a read is
    the read side: a stream that hashes what it hands on, like ``zstdframe.Hashing``, is read, not a loop)."""
    hashes = _hash_names(tree)

    def updates(node: ast.AST, through: set[str]) -> bool:
        for n in ast.walk(node):
            if isinstance(n, ast.Call):
                f = n.func
                if isinstance(f, ast.Attribute) and f.attr == "update" and _terminal(f.value) in hashes:
                    return True
                if _terminal(f) in through:
                    return True
        return False

    functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    hashing: set[str] = set()
    while True:  # the functions that update a hash, directly or through another one that does
        more = {f.name for f in functions if f.name not in hashing | READS and updates(f, hashing)}
        if not more:
            break
        hashing |= more
    loops = [n for n in ast.walk(tree) if isinstance(n, ast.For | ast.While | ast.AsyncFor)]
    return [
        loop.lineno
        for loop in loops
        if updates(loop, hashing)
        and any(isinstance(n, ast.Call) and _terminal(n.func) in READS for n in ast.walk(loop))
    ]


def test_one_read_hash_loop() -> None:
    """Reading a source while hashing it (and copying, bounding or counting it) is written once,
    ``digest.pump``, which sees a source longer than its bound instead of cutting it: a module that writes
    its own read-hash loop is a second copy of that rule, which drifts."""
    found = {
        _rel(p): lines
        for p in _modules()
        if _rel(p) != READ_HASH_PRIMITIVE and (lines := _read_hash_loops(ast.parse(p.read_text())))
    }
    assert {rel: lines for rel, lines in found.items() if rel not in READ_HASH_LOOP_ALLOWED} == {}, (
        "read and hash through lockbuild.digest.pump (or copy_with_hash)"
    )
    assert all((PACKAGE / rel).exists() for rel in READ_HASH_LOOP_ALLOWED), "the allowance names a module"
    by_hand = "h = hashlib.sha256()\nwhile chunk := src.read(CHUNK):\n    h.update(chunk)\n    dst.write(chunk)\n"
    through = "class T:\n    def write(self, b):\n        self.h.update(b)\n\ndef f(src, t: T):\n"
    through += "    t.h: Hasher = hashlib.sha256()\n    for chunk in iter(lambda: src.read(CHUNK), b''):\n        t.write(chunk)\n"
    assert _read_hash_loops(ast.parse(by_hand)) == [2] and _read_hash_loops(ast.parse(through)) == [7]
