"""Every test the threat model names exists, so the document cannot drift from the suite."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import REPO_ROOT

ROOT = REPO_ROOT


TEST_FILE = r"(?<![\w/.-])((?:tests/)?(?:[a-z_]+/)?test_[a-z0-9_]+\.py)"
NAMED = re.compile(rf"{TEST_FILE}(?:::(test_[a-z0-9_]+))?|(?<![\w.])::(test_[a-z0-9_]+)")


def named_tests(text: str) -> list[tuple[str, str]]:
    """Each test file a text names (``tests/gpu/test_gpu_fit.py``), with the test named after ``::`` if any;
    a bare ``::test_name`` is in the file named last before it on its line."""
    refs = []
    for line in text.splitlines():
        last = ""
        for m in NAMED.finditer(line):
            if m[1]:
                last = m[1]
                refs.append((last, m[2] or ""))
            elif last:
                refs.append((last, m[3]))
    return refs


def ref_problems(refs: list[tuple[str, str]], root: Path) -> list[str]:
    problems = []
    for file, name in refs:
        path = root / file
        if not re.fullmatch(r"tests/[a-z_]+/test_[a-z0-9_]+\.py", file):
            where = [str(q.relative_to(root)) for q in sorted((root / "tests").glob(f"*/{Path(file).name}"))]
            problems.append(f"{file}: name a test by its path, tests/<package>/test_x.py ({', '.join(where) or '?'})")
        elif not path.is_file():
            problems.append(f"{file}: no such file")
        elif name and not re.search(rf"^\s*(?:async )?def {name}\(", path.read_text(), re.M):
            problems.append(f"{file}::{name}: no such test")
    return problems


def test_threat_model_names_only_tests_that_exist() -> None:
    refs = named_tests((ROOT / "docs" / "threat-model.md").read_text())
    assert len(refs) >= 60
    assert ref_problems(refs, ROOT) == []


def test_every_test_the_docs_and_the_code_name_exists() -> None:
    """The guides, the READMEs, the code's comments and the scripts name tests by path, as the threat model does."""
    texts = [ROOT / "README.md", ROOT / "pyproject.toml", ROOT / ".ci" / "run", *sorted((ROOT / "docs").glob("*.md"))]
    texts += [*sorted((ROOT / "bench").glob("*.py")), ROOT / "bench" / "README.md"]
    texts += sorted((ROOT / "lockbuild").rglob("*.py")) + sorted((ROOT / "lockbuild").rglob("*.sh"))
    texts += sorted(p for p in (ROOT / "scripts").iterdir() if p.is_file())
    problems = [
        f"{path.relative_to(ROOT)}: {p}" for path in texts for p in ref_problems(named_tests(path.read_text()), ROOT)
    ]
    assert problems == []


@pytest.mark.parametrize(
    ("line", "said"),
    [
        pytest.param(
            "`test_trust.py::test_expired_signature`",
            "by its path, tests/<package>/test_x.py (tests/trust/test_trust.py)",
            id="bare",
        ),
        pytest.param("`tests/test_trust.py::test_expired_signature`", "name a test by its path", id="root"),
        pytest.param("`tests/gpu/test_trust.py::test_expired_signature`", "no such file", id="file"),
        pytest.param("`tests/trust/test_trust.py::test_no_such_thing`", "no such test", id="test"),
        pytest.param(
            "`tests/trust/test_trust.py::test_expired_signature`, `::test_no_such`", "no such test", id="then"
        ),
    ],
)
def test_a_stale_test_reference_is_found(line: str, said: str) -> None:
    good = "`tests/trust/test_trust.py::test_expired_signature`, `::test_node_clock_before_the_bundle_time`"
    assert ref_problems(named_tests(good), ROOT) == []
    problems = ref_problems(named_tests(line), ROOT)
    assert len(problems) == 1 and said in problems[0], problems


def test_readme_links_the_docs() -> None:
    readme = (ROOT / "README.md").read_text()
    for page in (
        "docs/threat-model.md",
        "docs/bundle-format.md",
        "docs/release-engineers.md",
        "docs/site-administrators.md",
    ):
        assert page in readme
        assert (ROOT / page).exists(), page


def _section(text: str, heading: str) -> str:
    return text.split(f"\n{heading}\n", 1)[1].split("\n## ", 1)[0]


def _blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", text, re.M | re.S)


def test_the_readme_is_a_front_page() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) < 200
    setup = _blocks(_section(readme, "## Set up (a fresh Debian machine)"), "sh")
    commands = [line.split("#")[0].strip() for block in setup for line in block.splitlines() if line.strip()]
    assert commands == ["./scripts/demo", "./scripts/test"]  # exactly two set-up commands
    assert "\n## Models\n" in readme and "about 10 minutes" in readme
    for guide in ("release-engineers", "site-administrators", "architecture", "bundle-format", "threat-model"):
        assert f"](docs/{guide}.md)" in readme, guide
    for line in readme.splitlines():  # the store's index is another page's: mentioned only beside its link
        if "store index" in line:
            assert "docs/site-administrators.md" in line or "docs/site-administrators.md" in readme.split(line)[1][:200]


def test_every_lockbuild_command_in_the_readme_parses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each ``lockbuild ...`` line of the README's shell blocks, parsed by click as the shell hands it over
    (the command's body replaced by one that records it): no stale option, no missing argument."""
    import shlex

    import click

    from lockbuild.cli import main

    mp = pytest.MonkeyPatch()
    called: list[str] = []

    def walk(group: click.Group) -> list[click.Command]:
        out: list[click.Command] = []
        for c in group.commands.values():
            out.append(c)
            if isinstance(c, click.Group):
                out += walk(c)
        return out

    try:
        for each in walk(main):
            mp.setattr(each, "callback", lambda each=each, **kw: called.append(str(each.name)))
        readme = (ROOT / "README.md").read_text()
        lines = [x for b in _blocks(readme, "sh") for x in b.splitlines() if x.startswith("lockbuild ")]
        assert len(lines) >= 15
        monkeypatch.chdir(tmp_path)
        for line in lines:
            argv = shlex.split(line, comments=True)
            for arg in argv[1:]:  # the files a line names (a parameter may demand that they exist)
                if not arg.startswith(("-", "/", "~")) and "://" not in arg and arg.endswith((".lbz", ".key", ".toml")):
                    (tmp_path / arg).parent.mkdir(parents=True, exist_ok=True)
                    (tmp_path / arg).touch()
            before = len(called)
            main.main(argv[1:], prog_name="lockbuild", standalone_mode=False)
            assert len(called) > before, line
    finally:
        mp.undo()


def _shape(line: str) -> str:
    """A progress or result line's first two words, before any engine name: what a real run must say alike
    (its indent kept: a result's detail line)."""
    head = re.split(r"onnxruntime|toyengine", line, maxsplit=1)[0]
    return line[: len(line) - len(line.lstrip())] + " ".join(head.split()[:2])


@pytest.fixture
def bundles_for_docs(env: object, keys: object, toy_recipe: Path, tmp_path: Path) -> Path:
    import json

    from click.testing import CliRunner

    from lockbuild.cli import main

    toy_recipe.write_text(toy_recipe.read_text().replace('gpu-probe = "torch"', 'gpu-probe = "none"'))  # a CPU build
    r = CliRunner().invoke(
        main,
        [
            "build",
            str(toy_recipe),
            "--key",
            str(keys.secret),  # type: ignore[attr-defined]
            "--out",
            str(tmp_path / "dist"),
            "--json",
        ],
    )
    assert r.exit_code == 0, r.stderr
    return Path(json.loads(r.stdout)["bundles"][0]["bundle"])


def test_the_install_example_is_what_an_install_prints(bundles_for_docs: Path, tmp_path: Path, keys: object) -> None:
    from click.testing import CliRunner

    from lockbuild.cli import main

    guide = (ROOT / "docs" / "site-administrators.md").read_text()
    block = _section(guide, "## Installing").split("```text\n", 1)[1].split("```", 1)[0]
    r = CliRunner().invoke(
        main, ["install", str(bundles_for_docs), "--root", str(tmp_path / "engines"), "--trust", str(keys.trust)]
    )  # type: ignore[attr-defined]
    assert r.exit_code == 0, r.output
    real = [_shape(x) for x in (r.stderr + r.stdout).splitlines()]
    assert [_shape(x) for x in block.splitlines()] == real, (block, r.stderr + r.stdout)


def test_no_issue_numbers_in_code_docs_or_tests() -> None:
    """Code, comments and docs speak of the project to its users: what a thing is, never a tracker's number."""
    found = []
    for top in ("lockbuild", "docs", "bench", "tests", "scripts", "bundles"):
        for path in sorted((ROOT / top).rglob("*")):
            skip = {"__pycache__", "work", "results"} & set(path.relative_to(ROOT).parts)  # bench's scratch and data
            if path.is_file() and path.suffix in (".py", ".md", ".sh", ".toml", "") and not skip:
                text = path.read_text(errors="replace")
                found += [f"{path.relative_to(ROOT)}: {m[0]}" for m in re.finditer(r"[Ii]ssues? [0-9][0-9.]*", text)]
    readme = (ROOT / "README.md").read_text()
    found += [f"README.md: {m[0]}" for m in re.finditer(r"[Ii]ssues? [0-9][0-9.]*", readme)]
    assert found == []


def _defined(path: Path) -> set[str]:
    """Top-level names of a module, and Class.member for every member of its classes."""
    import ast

    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        if isinstance(node, ast.ClassDef):
            for sub in node.body:
                if isinstance(sub, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    names.add(f"{node.name}.{sub.name}")
                elif isinstance(sub, ast.AnnAssign) and isinstance(sub.target, ast.Name):
                    names.add(f"{node.name}.{sub.target.id}")
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def test_every_file_and_function_the_docs_name_exists() -> None:
    """The map a newcomer reads first names ``dir/module.py::function``: each must be there."""
    missing = []
    for doc in sorted((ROOT / "docs").glob("*.md")):
        for rel, name in re.findall(r"`([a-z_/]+\.py)::([A-Za-z_][A-Za-z0-9_.]*)", doc.read_text()):
            if rel.startswith("test"):
                continue
            path = ROOT / "lockbuild" / rel
            if not path.is_file():
                missing.append(f"{doc.name}: {rel} (no such module)")
            elif name not in _defined(path):
                missing.append(f"{doc.name}: {rel}::{name}")
    assert missing == []
