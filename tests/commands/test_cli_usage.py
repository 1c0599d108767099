"""Usage errors speak the same language as every other error: JSON under --json, click's text otherwise."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from lockbuild.cli import main


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["install", "--json"], "Missing argument 'BUNDLE"),
        (["nosuch-command", "--json"], "No such command 'nosuch-command'."),
        (["verify", "--json", "--threshold", "many", "x.lbz"], "'many' is not a valid integer"),
    ],
)
def test_usage_error_under_json_is_a_json_object(argv: list[str], message: str) -> None:
    result = CliRunner().invoke(main, argv)
    assert result.exit_code == 2
    data = json.loads(result.stdout)
    assert data["ok"] is False
    assert data["error"]["type"] == "UsageError"
    assert message in data["error"]["message"]
    assert data["error"]["exit_code"] == 2
    assert "--help" in data["error"]["tip"]


def test_usage_error_without_json_is_plain_text() -> None:
    result = CliRunner().invoke(main, ["install"])
    assert result.exit_code == 2
    assert "Missing argument 'BUNDLE" in result.stderr
    assert result.stdout == ""


def test_help_and_version_still_exit_zero() -> None:
    assert CliRunner().invoke(main, ["--version"]).exit_code == 0
    assert CliRunner().invoke(main, ["install", "--help"]).exit_code == 0


def test_every_node_command_takes_the_root_from_lockbuild_root(tmp_path: Path) -> None:
    root = tmp_path / "engines"
    root.mkdir(mode=0o755)
    result = CliRunner().invoke(main, ["list", "--json"], env={"LOCKBUILD_ROOT": str(root)})
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["root"] == str(root)
    for command in ("install", "list", "remove", "doctor"):
        text = CliRunner().invoke(main, [command, "--help"], terminal_width=200).stdout
        assert "LOCKBUILD_ROOT" in text and "[default: /opt/engines]" in text, command


def test_examples_in_help_are_never_broken_across_lines() -> None:
    text = CliRunner().invoke(main, ["sign", "--help"], terminal_width=60).stdout
    example = next(line for line in text.splitlines() if "Example:" in line)
    assert example.strip().endswith("--key second.key")
    assert "x86_64-manylinux_2_28.lbz --key" in example


@pytest.mark.parametrize("where", ["first", "last"])
def test_quiet_leaves_stderr_empty_on_success_warnings_included(
    where: str, env: object, toy_recipe: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """-q: only the result; the same run without it prints progress and an INSECURE warning on stderr."""
    monkeypatch.setenv("LOCKBUILD_GITHUB_API", "http://github.invalid/api")  # plain http, not loopback: a warning
    argv = ["lock", str(toy_recipe), "--out", str(tmp_path / "locks"), "--allow-insecure-http"]
    loud = CliRunner().invoke(main, argv)
    assert loud.exit_code == 0 and "warning: INSECURE: LOCKBUILD_GITHUB_API" in loud.stderr, loud.output
    quiet = CliRunner().invoke(main, ["-q", *argv] if where == "first" else [*argv, "--quiet"])
    assert quiet.exit_code == 0, quiet.output
    assert quiet.stderr == ""
    assert quiet.stdout.startswith("locked toyengine 1.0-cpu")


def test_quiet_still_shows_errors(tmp_path: Path) -> None:
    r = CliRunner().invoke(main, ["-q", "verify", str(tmp_path / "absent.lbz"), "--trust", str(tmp_path)])
    assert r.exit_code != 0 and r.stderr.startswith("ERROR "), r.output
