"""The uv binary is found once, before any thread starts.

Finding uv reads ``sysconfig.get_config_vars()``, whose first initialisation is not thread-safe on Python
3.11. A lock with an explicit ``as-of`` reaches uv on the main thread while the uv-wheel look-up runs on a
background thread, so a fresh process crashed (``TypeError: can only concatenate str (not "NoneType") to
str`` in ``uv/_find_uv.py``) 4 runs in 5 before the fix. The in-process tests never saw it: sysconfig was
long initialised there. So these run ``lockbuild`` as fresh processes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import threading
from pathlib import Path

import pytest
from conftest import TOY_RECIPE, Keys
from servers import FakeServer

from lockbuild.proc import uvtool

LOCKBUILD = str(Path(sys.executable).parent / "lockbuild")
RUNS = 5


def _environ(server: FakeServer, cache: Path) -> dict[str, str]:
    return dict(
        os.environ,
        LOCKBUILD_INDEX_URL=server.index_url(),
        LOCKBUILD_GITHUB_API=server.github_api,
        LOCKBUILD_GITHUB_DOWNLOAD=server.github_download,
        LOCKBUILD_CACHE_DIR=str(cache),
    )


def test_lock_and_build_of_an_as_of_recipe_in_fresh_processes(env: FakeServer, tmp_path: Path, keys: Keys) -> None:
    recipe = tmp_path / "toyengine.toml"
    recipe.write_text(TOY_RECIPE + "as-of = 2025-01-06T00:00:00Z\n")
    for i in range(RUNS):  # one after another: each a fresh interpreter, sysconfig not yet read
        argv = [LOCKBUILD, "lock", str(recipe), "--out", str(tmp_path / f"locks{i}"), "--fresh-lock"]
        if i == 0:
            argv = [LOCKBUILD, "build", str(recipe), "--key", str(keys.secret), "--out", str(tmp_path / "dist")]
        proc = subprocess.run(
            argv, env=_environ(env, tmp_path / "cache"), capture_output=True, text=True, timeout=240, check=False
        )
        assert "TypeError" not in proc.stderr, f"run {i}: {proc.stderr}"
        assert proc.returncode == 0, f"run {i}: {proc.stdout}{proc.stderr}"
    assert list((tmp_path / "dist").glob("*.lbz"))
    for i in range(1, RUNS):
        assert (tmp_path / f"locks{i}" / "1.0-cpu" / "requirements.txt").is_file()


def test_uv_binary_is_found_once_under_a_lock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Many threads asking at once, with sysconfig's table not yet filled: one look-up, one answer."""
    found = uvtool.uv_binary()
    monkeypatch.setattr(uvtool, "_FOUND", None)
    monkeypatch.setattr(sysconfig, "_CONFIG_VARS", None)
    calls = []
    real = __import__("uv").find_uv_bin

    def counted() -> str:
        calls.append(threading.current_thread().name)
        return str(real())

    monkeypatch.setattr("uv.find_uv_bin", counted)
    gate = threading.Barrier(8)
    got: list[str] = []

    def ask() -> None:
        gate.wait()
        got.append(uvtool.uv_binary())

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == [found] * 8
    assert len(calls) == 1
    assert uvtool.uv_binary() == found and len(calls) == 1
