"""The self-bundle's bootstrap installs the lock with ``--require-hashes``: an extraction whose lock has
lines without their hashes (the member list edited to match, as someone who can write the extraction
would) is refused by the bundled uv, and nothing is installed.

The self-bundle carries the committed ``bootstrap.sh``; the test runs this tree's template, filled in
with the bundle's own values, so that it judges the script as it is edited here."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
from conftest import Keys
from servers import FakeServer
from test_selfbundle import bootstrap, build, extract, recipe_text, tree
from test_selfbundle import index as index  # the fixture: a local index with lockbuild's dependencies

import lockbuild
from lockbuild.bundle.bootstrap import SCRIPT, SUMS, script

TEMPLATE = Path(lockbuild.__file__).parent / "bundle" / SCRIPT


@pytest.fixture(scope="module")
def bundle(index: tuple[FakeServer, str], keys: Keys, tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("bootstrap-hashes")
    code, stdout, stderr = build(index, tmp, keys, recipe_text(index[1]), "a")
    assert code == 0, stderr
    return Path(json.loads(stdout)["bundles"][0]["bundle"])


def _value(text: str, name: str) -> str:
    found = re.search(rf"^{name}='([^']*)'$", text, re.MULTILINE)
    assert found is not None, name
    return found.group(1)


def _rewrite(extracted: Path, path: str, data: bytes) -> None:
    """Write the member PATH, and its line in SHA256SUMS to match."""
    (extracted / path).write_bytes(data)
    digest = hashlib.sha256(data).hexdigest()
    sums = extracted / SUMS
    sums.write_text(
        "".join(
            (f"{digest}  {path}" if line.endswith(f"  {path}") else line) + "\n"
            for line in sums.read_text().splitlines()
        )
    )


def _this_trees_bootstrap(extracted: Path) -> None:
    shipped = (extracted / SCRIPT).read_text()
    ours = script(
        TEMPLATE.read_bytes(),
        version=_value(shipped, "LOCKBUILD_VERSION"),
        python=_value(shipped, "PYTHON_VERSION"),
        interpreter=_value(shipped, "INTERPRETER") or None,
        uv_wheel=_value(shipped, "UV_WHEEL"),
        bundle=_value(shipped, "BUNDLE"),
    )
    _rewrite(extracted, SCRIPT, ours)


def _unhash(extracted: Path, only: str | None) -> None:
    """Drop the hashes of one package, or of every package, from the lock."""
    lock = extracted / "lock" / "requirements.txt"
    text = lock.read_text()
    name = re.escape(only) if only is not None else r"[A-Za-z0-9_.-]+"
    unhashed, n = re.subn(
        rf"(^{name}==\S+)((?:\s*\\\n)?\s*--hash=sha256:[0-9a-f]{{64}})+", r"\1", text, flags=re.MULTILINE
    )
    assert (n == 1) if only else (n > 1 and "--hash=" not in unhashed), text
    _rewrite(extracted, "lock/requirements.txt", unhashed.encode())


def test_this_trees_bootstrap_installs_the_self_bundle(bundle: Path, tmp_path: Path) -> None:
    extracted = extract(bundle, tmp_path / "x")
    _this_trees_bootstrap(extracted)
    parent = tmp_path / "opt"
    parent.mkdir()
    run = bootstrap(extracted, parent / "lockbuild", tmp_path / "home")
    assert run.returncode == 0, run.stderr
    assert sorted(p.name for p in parent.iterdir()) == ["lockbuild"]


@pytest.mark.parametrize("only", ["tomlkit", None], ids=["one-line", "every-line"])
def test_the_bootstrap_refuses_a_lock_without_its_hashes(bundle: Path, tmp_path: Path, only: str | None) -> None:
    extracted = extract(bundle, tmp_path / "x")
    _this_trees_bootstrap(extracted)
    _unhash(extracted, only)
    parent = tmp_path / "opt"
    parent.mkdir()
    run = bootstrap(extracted, parent / "lockbuild", tmp_path / "home")
    assert run.returncode == 1, run.stderr
    assert "uv could not install the bundle's lock; nothing was installed" in run.stderr
    assert "hash" in run.stderr, run.stderr
    assert list(parent.iterdir()) == [] and tree(tmp_path / "home") == ["tmp"]
