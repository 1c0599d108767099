"""The self-bundle's bootstrap installs the lock with ``--require-hashes``: an extraction whose lock has a
line without its hash (the member list edited to match, as someone who can write the extraction would)
is refused by the bundled uv, and nothing is installed."""

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


@pytest.fixture(scope="module")
def bundle(index: tuple[FakeServer, str], keys: Keys, tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("bootstrap-hashes")
    code, stdout, stderr = build(index, tmp, keys, recipe_text(index[1]), "a")
    assert code == 0, stderr
    return Path(json.loads(stdout)["bundles"][0]["bundle"])


def test_the_bootstrap_refuses_a_lock_line_without_its_hash(bundle: Path, tmp_path: Path) -> None:
    extracted = extract(bundle, tmp_path / "x")
    lock = extracted / "lock" / "requirements.txt"
    text = lock.read_text()
    unhashed, n = re.subn(r"(tomlkit==\S+)((?:\s*\\\n)?\s*--hash=sha256:[0-9a-f]{64})+", r"\1", text)
    assert n == 1, text
    lock.write_text(unhashed)
    sums = extracted / "SHA256SUMS"
    digest = hashlib.sha256(unhashed.encode()).hexdigest()
    sums.write_text("".join((f"{digest}  lock/requirements.txt" if line.endswith(" lock/requirements.txt") else line)
                            + "\n" for line in sums.read_text().splitlines()))
    parent = tmp_path / "opt"
    parent.mkdir()
    run = bootstrap(extracted, parent / "lockbuild", tmp_path / "home")
    assert run.returncode == 1, run.stderr
    assert "uv could not install the bundle's lock; nothing was installed" in run.stderr
    assert "hash" in run.stderr and "tomlkit" in run.stderr
    assert list(parent.iterdir()) == [] and tree(tmp_path / "home") == ["tmp"]
