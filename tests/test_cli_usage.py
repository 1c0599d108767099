"""Usage errors speak the same language as every other error: JSON under --json, click's text otherwise."""

from __future__ import annotations

import json

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
