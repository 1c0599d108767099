"""CLI conventions: help with examples, errors without tracebacks, --json, exit codes, doctor."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import PLATFORM, PY, TOY_RECIPE, Keys

from lockbuild.bundle.instructions import GpuNeeds
from lockbuild.cli import main
from lockbuild.install.node import Gpu, Node
from lockbuild.install.nodecheck import Facts, Needs, unmet
from lockbuild.minisign import read_public_key

COMMANDS = ["lock", "fetch", "build", "sign", "keygen", "verify", "inspect", "install", "list", "remove", "doctor"]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help_with_an_example(command: str) -> None:
    r = CliRunner().invoke(main, [command, "--help"])
    assert r.exit_code == 0
    assert "Example: lockbuild " + command in r.stdout


def test_errors_print_without_traceback_and_with_one_under_verbose(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    missing.write_text("[engine]\nname = 1\n")
    r = CliRunner().invoke(main, ["lock", str(missing), "--out", str(tmp_path / "out")])
    assert r.exit_code == 2  # a recipe key with a problem: a usage error
    assert r.stderr.startswith("ERROR ")
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "out").exists()
    r = CliRunner().invoke(main, ["--verbose", "lock", str(missing), "--out", str(tmp_path / "out")])
    assert r.exit_code == 2 and "Traceback" in r.stderr
    r = CliRunner().invoke(main, ["lock", str(missing), "--out", str(tmp_path / "out"), "-v"])
    assert r.exit_code == 2 and "Traceback" in r.stderr


def test_json_errors_are_machine_readable(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("not toml [")
    r = CliRunner().invoke(main, ["lock", str(bad), "--out", str(tmp_path), "--json"])
    assert r.exit_code == 2  # a recipe problem, like a usage error
    err = json.loads(r.stdout)["error"]
    assert err["type"] == "RecipeError" and "not valid TOML" in err["message"]


def test_usage_errors_exit_2() -> None:
    assert CliRunner().invoke(main, ["install"]).exit_code == 2
    assert CliRunner().invoke(main, ["no-such-command"]).exit_code == 2


def test_inspect_shows_the_bundle(env, keys: Keys, toy_recipe: Path, tmp_path: Path) -> None:
    r = CliRunner().invoke(main, ["build", str(toy_recipe), "--key", str(keys.secret), "--out", str(tmp_path / "d")])
    assert r.exit_code == 0, r.stderr
    bundle = next((tmp_path / "d").glob("*.lbz"))
    r = CliRunner().invoke(main, ["inspect", str(bundle), "--json"])
    data = json.loads(r.stdout)
    assert (data["engine"], data["version"], data["variant"]) == ("toyengine", "1.0", "cpu")
    assert data["as_of"] == "2025-01-06T00:00:00Z"
    paths = [f["path"] for f in data["files"]]
    assert paths[:2] == ["recipe.toml", "lock/requirements.txt"]
    assert "wheels/toyengine-1.0-py3-none-any.whl" in paths and any(p.startswith("tools/uv-") for p in paths)
    assert [s["key_id"] for s in data["signatures"]] == [read_public_key(keys.public).key_id_hex]
    text = CliRunner().invoke(main, ["inspect", str(bundle)]).stdout
    assert "toyengine 1.0 (cpu)" in text and "wheels/toydep-1.0-py3-none-any.whl" in text
    # what the node will do comes from the signed manifest's [install] table
    assert data["install"]["verify"] == ["toyengine", "--version"] and data["install"]["binary"] == "toyengine"
    assert "install: binary bin/toyengine; verify: toyengine --version; GPU probe: torch" in text


def node(**kw: object) -> Node:
    base: dict[str, object] = {
        "machine": "x86_64",
        "libc": "glibc",
        "libc_version": (2, 36),
        "driver": "580.65",
        "gpus": (Gpu("H200", (9, 0)),),
    }
    base.update(kw)
    return Node(**base)  # type: ignore[arg-type]


def test_doctor_says_why_a_build_does_not_fit() -> None:
    needs = Needs(PY, PLATFORM, GpuNeeds((8, 0), "580"), 10 << 30)

    def fit(n: Node | None = None, pythons: frozenset[str] = frozenset({PY}), free: int = 100 << 30) -> tuple[str, ...]:
        return unmet(needs, Facts(n or node(), pythons, free))

    assert fit() == ()
    assert fit(node(machine="aarch64")) == (f"built for x86_64 ({PLATFORM}), the node is aarch64",)
    assert "needs driver 580+" in fit(node(driver="535.1"))[0]
    assert "compute capability 8.0+" in fit(node(gpus=(Gpu("T4", (7, 5)),)))[0]
    assert "no driver" in fit(node(driver=None, gpus=()))[0]
    assert f"needs Python {PY}" in fit(pythons=frozenset())[0]
    assert "needs 10.0 GiB free" in fit(free=1 << 30)[0]


def test_doctor_reports_the_node(tmp_path: Path, keys: Keys, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho '580.65.06, 9.0, NVIDIA H200'\n")
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    cat = tmp_path / "cat"
    cat.mkdir()
    (cat / "toy.toml").write_text(TOY_RECIPE.replace(PLATFORM, "aarch64-manylinux_2_28"))
    (keys.trust / "revoked.txt").write_text("")
    r = CliRunner().invoke(
        main,
        ["doctor", "--root", str(tmp_path / "engines"), "--catalogue", str(cat), "--trust", str(keys.trust), "--json"],
    )
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["node"]["nvidia_driver"] == "580.65.06"
    assert data["node"]["gpus"] == [{"name": "NVIDIA H200", "capability": "9.0"}]
    assert data["trust"]["ok"] and len(data["trust"]["keys"]) == 1
    assert data["catalogue"][0]["fits"] is False
    assert "built for aarch64" in data["catalogue"][0]["reasons"][0]
    (keys.trust / "revoked.txt").unlink()


def test_command_output_escapes_terminal_sequences(tmp_path: Path) -> None:
    """Text a command prints (here, a directory name it echoes) reaches the terminal escaped."""
    root = tmp_path / "engines\x1b]0;owned\x07\x1b[2J"
    root.mkdir()
    r = CliRunner().invoke(main, ["list", "--root", str(root)])
    assert r.exit_code == 0, r.stderr
    assert "\x1b" not in r.stdout and "\x07" not in r.stdout
    assert "engines\\x1b]0;owned\\x07\\x1b[2J" in r.stdout


def _doctor(root: Path, keys: Keys, *extra: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, ["doctor", "--root", str(root), "--trust", str(keys.trust), *extra])
    return r.exit_code, r.stdout, r.stderr


def test_doctor_without_a_catalogue_reports_no_problem(
    tmp_path: Path, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a node (no ./bundles, no --catalogue) the catalogue is not checked, and doctor says so."""
    monkeypatch.chdir(tmp_path)
    code, out, err = _doctor(tmp_path / "engines", keys)
    assert code == 0, err
    assert "PROBLEM" not in out.replace(f"trust       {keys.trust}: PROBLEM", "")
    assert f"catalogue   not checked: no --catalogue, and no ./bundles in {tmp_path}" in out
    code, out, _ = _doctor(tmp_path / "engines", keys, "--json")
    data = json.loads(out)
    assert data["catalogue_problems"] == [] and data["catalogue_dir"] == {"path": None, "from": "none"}


def test_doctor_uses_the_default_catalogue_when_it_exists_and_says_so(
    tmp_path: Path, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bundles").mkdir()
    (tmp_path / "bundles" / "toy.toml").write_text(TOY_RECIPE)
    code, out, err = _doctor(tmp_path / "engines", keys)
    assert code == 0, err
    assert f"catalogue   {tmp_path / 'bundles'} (the default, ./bundles)" in out
    assert "catalogue   toyengine 1.0-cpu:" in out


def test_doctor_reports_a_missing_catalogue_it_was_given(tmp_path: Path, keys: Keys) -> None:
    code, out, err = _doctor(tmp_path / "engines", keys, "--catalogue", str(tmp_path / "absent"))
    assert code == 0, err
    assert f"catalogue   PROBLEM: no catalogue directory {tmp_path / 'absent'}" in out
    assert f"catalogue   {tmp_path / 'absent'} (--catalogue)" in out
