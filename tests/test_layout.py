"""The installer wing, which runs on air-gapped nodes, has no network client in it."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import lockbuild

PACKAGE = Path(lockbuild.__file__).parent
NETWORK = ("httpx", "lockbuild.builder", "urllib.request", "http.client", "socket", "requests")


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_installer_modules_import_no_network_code() -> None:
    for path in sorted((PACKAGE / "install").glob("*.py")):
        bad = {n for n in _imports(path) if n.startswith(NETWORK)}
        assert not bad, f"{path.name} imports {bad}"


def test_install_and_verify_load_no_network_module() -> None:
    code = (
        "import sys\n"
        "import lockbuild.install.installer, lockbuild.install.doctor, lockbuild.trust, lockbuild.bundle.read\n"
        "from lockbuild.cli import main\n"
        "from click.testing import CliRunner\n"
        "CliRunner().invoke(main, ['install', '--help'])\n"
        "CliRunner().invoke(main, ['verify', '--help'])\n"
        f"print(sorted(m for m in sys.modules if m.startswith({NETWORK!r})))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


BUILDER_ONLY = ("lockbuild.recipe", "lockbuild.builder", "tomlkit")


def _lockbuild_imports(module: str) -> set[str]:
    """The lockbuild modules ``module`` imports anywhere in its text (function-level imports included)."""
    rel = module.removeprefix("lockbuild").lstrip(".").replace(".", "/")
    path = PACKAGE / f"{rel}.py" if (PACKAGE / f"{rel}.py").exists() else PACKAGE / rel / "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return {n for n in found if n.startswith(BUILDER_ONLY) or _is_module(n)}


def _is_module(name: str) -> bool:
    if not name.startswith("lockbuild"):
        return False
    rel = name.removeprefix("lockbuild").lstrip(".").replace(".", "/")
    return (PACKAGE / f"{rel}.py").exists() or (PACKAGE / rel / "__init__.py").exists()


def test_the_node_never_imports_the_recipe_or_the_builder() -> None:
    """install/ acts on the signed manifest only: neither it nor anything it imports, transitively and
    including imports inside functions, reaches the recipe parser or the builder."""
    start = {f"lockbuild.install.{p.stem}" for p in (PACKAGE / "install").glob("*.py") if p.stem != "__init__"}
    seen: dict[str, str] = {m: m for m in start}
    todo = sorted(start)
    while todo:
        module = todo.pop()
        for name in _lockbuild_imports(module):
            assert not name.startswith(BUILDER_ONLY), f"{seen[module]} reaches {name} (through {module})"
            if name not in seen and _is_module(name):
                seen[name] = seen[module]
                todo.append(name)
    assert "lockbuild.install.installer" in seen and "lockbuild.bundle.manifest" in seen


def test_the_cli_loads_the_self_tests_machinery_only_for_lockbuild_test() -> None:
    """Every command starts by importing lockbuild.cli: the self-test's modules (namespaces, tracing, the
    audit hook) load when `lockbuild test` runs, not with `lock` or `install` (start-up time counts)."""
    code = "import sys, lockbuild.cli; print(sorted(m for m in sys.modules if m.startswith('lockbuild.selftest')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['lockbuild.selftest', 'lockbuild.selftest.cli', 'lockbuild.selftest.defaults']"
