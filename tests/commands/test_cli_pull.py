"""A failed ``pull`` leaves no trace in a store it created (an unknown tag, a registry that is not there),
and never touches a store that was there before."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import make_keys
from registrykit import RealRegistry, binary
from sitekit import cli, make_bundle


def test_a_pull_from_no_registry_leaves_no_new_store(tmp_path: Path) -> None:
    keys = make_keys(tmp_path / "keys")
    store = tmp_path / "new" / "store"
    r = cli("pull", "oci://127.0.0.1:9/site/toyengine:1.0-cpu", "--plain-http", "--store", store, "--trust", keys.trust)
    assert r.exit_code != 0 and r.stderr.startswith("ERROR "), r.output
    assert not (tmp_path / "new").exists()


@pytest.fixture(scope="module")
def reg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealRegistry]:
    if binary() is None:
        pytest.skip("docker-registry (CNCF distribution) is not installed")
    r = RealRegistry(tmp_path_factory.mktemp("registry"))
    yield r
    r.close()


def test_a_pull_of_an_unknown_tag_leaves_no_new_store_and_an_old_one_as_it_was(
    reg: RealRegistry, tmp_path: Path
) -> None:
    keys = make_keys(tmp_path / "keys")
    bundle = make_bundle(tmp_path / "b", [keys.secret], version="1.0")
    target = reg.ref("site/toyengine", "1.0-cpu")
    assert cli("push", bundle, target, "--trust", keys.trust).exit_code == 0
    unknown = reg.ref("site/toyengine", "9.9-nope")
    store = tmp_path / "store"
    r = cli("pull", unknown, "--store", store, "--trust", keys.trust)
    assert r.exit_code != 0 and r.stderr.startswith("ERROR "), r.output
    assert not store.exists()
    assert cli("pull", target, "--store", store, "--trust", keys.trust).exit_code == 0
    before = sorted(str(p.relative_to(store)) for p in store.rglob("*"))
    r = cli("pull", unknown, "--store", store, "--trust", keys.trust)
    assert r.exit_code != 0
    assert sorted(str(p.relative_to(store)) for p in store.rglob("*")) == before  # the old store is untouched


def test_push_says_it_checks_then_uploads_not_unpacking(reg: RealRegistry, tmp_path: Path) -> None:
    keys = make_keys(tmp_path / "keys")
    bundle = make_bundle(tmp_path / "b", [keys.secret], version="2.0")
    store = tmp_path / "store"
    assert cli("import", bundle, "--trust", keys.trust, "--store", store).exit_code == 0
    r = cli("push", "toyengine/2.0-cpu", "--store", store, reg.ref("site/toyengine", "2.0-cpu"), "--trust", keys.trust)
    assert r.exit_code == 0, r.output
    assert "lockbuild: checking: " in r.stderr and "lockbuild: uploading: " in r.stderr, r.stderr
    assert "unpacking" not in r.stderr
