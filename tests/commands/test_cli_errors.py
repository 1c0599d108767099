"""The CLI's last resort: an unexpected exception is one ERROR line, or one JSON object under --json,
with exit 1, and a traceback only with --verbose."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from lockbuild.cli import main


def _boom(*_a: object, **_k: object) -> None:
    raise ValueError("an unexpected state")


@pytest.fixture
def broken(monkeypatch: pytest.MonkeyPatch) -> None:
    import lockbuild.trust as trust

    monkeypatch.setattr(trust, "load_trust_store", _boom)  # any command that opens a trust store meets a defect


def test_an_unexpected_exception_under_json_is_a_json_object(broken: None, tmp_path: Path) -> None:
    bundle = tmp_path / "x-1-cpu-x86_64-manylinux_2_28.lbz"
    bundle.write_bytes(b"x")
    r = CliRunner().invoke(main, ["verify", str(bundle), "--trust", str(tmp_path), "--json"])
    assert r.exit_code == 1, (r.stdout, r.stderr)
    doc = json.loads(r.stdout)
    assert doc["ok"] is False and doc["kind"] == "internal" and doc["error"]["kind"] == "internal"
    assert "an unexpected state" in doc["error"]["message"]
    assert "Traceback" not in r.stdout + r.stderr


def test_the_traceback_shows_only_with_verbose(broken: None, tmp_path: Path) -> None:
    bundle = tmp_path / "x-1-cpu-x86_64-manylinux_2_28.lbz"
    bundle.write_bytes(b"x")
    r = CliRunner().invoke(main, ["verify", str(bundle), "--trust", str(tmp_path)])
    assert r.exit_code == 1 and "ERROR internal error: ValueError" in r.stderr and "Traceback" not in r.stderr
    r = CliRunner().invoke(main, ["verify", str(bundle), "--trust", str(tmp_path), "--verbose"])
    assert r.exit_code == 1 and "Traceback" in r.stderr
