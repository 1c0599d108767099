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
