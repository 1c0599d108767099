"""Structural rules for text from outside: what reaches a terminal is filtered, what a node tool prints is
read bounded.

A string from a file name, a bundle, an image, a registry or nvidia-smi may hold an escape sequence or a
line feed. Every line the CLI writes goes through ``lockbuild.text.for_terminal`` (or is JSON, or a
constant), so a new ``click.echo`` of a raw string fails here, whatever path it is on (stderr under
``--json`` included). The progress reporter writes to its stream itself, and filters every text it is
given where it is given (``lockbuild/progress.py``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import lockbuild

PACKAGE = Path(lockbuild.__file__).parent
FILTERS = {"for_terminal", "dumps"}  # the terminal filter; JSON (json.dumps escapes every control character)
NODE_TOOL_READERS = (
    "install/node.py",
    "install/survey.py",
    "choice/choose.py",
    "install/nodecheck.py",
    "choice/candidates.py",
    "choice/ranking.py",
    "image/record.py",
    "image/judge.py",
)


def _name(f: ast.expr) -> str:
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def _clean(node: ast.expr) -> bool:
    """Text that is a constant, filtered, or put together from such pieces only."""
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.Call):
        return _name(node.func) in FILTERS
    if isinstance(node, ast.JoinedStr):
        return all(_clean(v.value) if isinstance(v, ast.FormattedValue) else _clean(v) for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _clean(node.left) and _clean(node.right)
    return False


def _raw_echoes(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and _name(node.func) in ("echo", "secho"):
            args = [*node.args[:1], *(k.value for k in node.keywords if k.arg == "message")]
            found += [f"line {node.lineno}: {ast.unparse(a)[:80]}" for a in args if not _clean(a)]
    return found


def test_every_line_the_cli_writes_passes_the_terminal_filter() -> None:
    offenders = {p.relative_to(PACKAGE).as_posix(): _raw_echoes(p) for p in sorted(PACKAGE.rglob("*.py"))}
    assert {k: v for k, v in offenders.items() if v} == {}, "wrap the text in lockbuild.text.for_terminal"


def test_the_rule_sees_a_raw_echo() -> None:
    """The check itself: an echo of a raw string (or of a join of them) is caught, a filtered one is not."""

    def check(src: str) -> bool:
        call = ast.parse(src).body[0].value  # type: ignore[attr-defined]
        return _clean(call.args[0])

    assert not check('click.echo("\\n".join(got.lines()), err=True)')
    assert not check('click.echo("ERROR " + err.message, err=True)')
    assert not check('click.echo(f"TIP {tip}")')
    assert check('click.echo(for_terminal("\\n".join(got.lines())), err=True)')
    assert check('click.echo(f"ERROR {for_terminal(m)}")') and check("click.echo(json.dumps(d))")


def test_node_tools_output_is_read_through_the_bounded_reader() -> None:
    """nvidia-smi and unsquashfs print what the node parses: read by lockbuild.proc.child.run_bounded (bounded,
    the child killed past the bound), never by subprocess in these modules."""
    for rel in NODE_TOOL_READERS:
        tree = ast.parse((PACKAGE / rel).read_text())
        uses = [
            n.lineno
            for n in ast.walk(tree)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "subprocess"
        ]
        imports = [
            n.lineno
            for n in ast.walk(tree)
            if isinstance(n, (ast.Import, ast.ImportFrom))
            and "subprocess"
            in ((n.module or "") if isinstance(n, ast.ImportFrom) else "") + " ".join(a.name for a in n.names)
        ]
        assert not uses and not imports, f"{rel} runs a tool with subprocess (lines {uses + imports})"


def test_the_choice_reads_nothing_of_a_bundle_before_the_trust_decision() -> None:
    """The choosing forms take a candidate's facts from its opening only: choice/choose.py reads no bundle
    head, manifest or tar of its own (a planted file's claims would count otherwise)."""
    tree = ast.parse((PACKAGE / "choice/choose.py").read_text())
    modules = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert not {m for m in modules if m.startswith("lockbuild.bundle")}, modules
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | {
        n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)
    }
    assert not names & {"read_head", "parse_manifest", "manifest_bytes", "members"}, names
