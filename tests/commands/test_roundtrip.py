"""Recipe to a working console script: build, verify, install offline, list, remove."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from click.testing import CliRunner

from lockbuild.cli import main


def run(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return r.exit_code, r.stdout, r.stderr


def test_build_then_install_offline(env, keys, toy_recipe, tmp_path: Path) -> None:
    out = tmp_path / "dist"
    code, stdout, stderr = run("build", str(toy_recipe), "--key", str(keys.secret), "--out", str(out), "--json")
    assert code == 0, stderr
    built = json.loads(stdout)["bundles"][0]
    bundle = Path(built["bundle"])
    assert bundle.name == "toyengine-1.0-cpu-x86_64-manylinux_2_28.lbz"
    assert sorted(p.name for p in out.iterdir()) == [bundle.name, bundle.name + ".minisig"]

    code, stdout, stderr = run("verify", str(bundle), "--trust", str(keys.trust))
    assert code == 0, stderr

    root = tmp_path / "engines"
    code, stdout, stderr = run("install", str(bundle), "--root", str(root), "--trust", str(keys.trust), "--json")
    assert code == 0, stderr
    env_dir = root / "toyengine" / "1.0-cpu"
    marker = json.loads((env_dir / "lockbuild.json").read_text())
    assert marker["bundle_sha256"] == built["sha256"]
    assert marker["exclude_newer"] == "2025-01-06T00:00:00Z"
    got = subprocess.run([str(env_dir / "bin" / "toyengine"), "--version"], capture_output=True, text=True)
    assert got.stdout.strip() == "toyengine 1.0"
    assert not [p for p in (root / "toyengine").iterdir() if p.name.endswith(".partial")]
    lock = (env_dir / "lockbuild" / "lock" / "requirements.txt").read_text()
    assert "toydep==1.0" in lock

    # the console script still works after the environment is moved (relocatable)
    moved = tmp_path / "moved"
    shutil.copytree(env_dir, moved, symlinks=True)
    got = subprocess.run([str(moved / "bin" / "toyengine"), "--version"], capture_output=True, text=True)
    assert got.stdout.strip() == "toyengine 1.0"

    code, stdout, _ = run("install", str(bundle), "--root", str(root), "--trust", str(keys.trust))
    assert code == 0 and "already installed" in stdout

    code, stdout, _ = run("list", "--root", str(root), "--json")
    assert [e["engine"] for e in json.loads(stdout)["installed"]] == ["toyengine"]
    code, stdout, _ = run("remove", "toyengine", "1.0-cpu", "--root", str(root))
    assert code == 0 and not env_dir.exists()
