"""The blocks a store keeps for a build stay within the readers' bounds: ``merge_signatures`` never keeps
more than ``MAX_SIGNATURES`` blocks or ``max_signature_file`` bytes, however many accepted imports add
keys, and the store refuses to read a kept signature file over its bound."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from conftest import Keys, make_keys
from sitekit import cli, make_bundle

from lockbuild.errors import IntegrityError
from lockbuild.limits import Limits
from lockbuild.minisign import parse_signatures
from lockbuild.minisign.sigfile import MAX_SIGNATURES, Signature
from lockbuild.site.storage import SIGNATURE_FILE, Store
from lockbuild.site.storemodel import merge_signatures


@pytest.fixture(scope="module")
def signer(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    return make_keys(tmp_path_factory.mktemp("kept-keys"))


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory, signer: Keys) -> Path:
    return make_bundle(tmp_path_factory.mktemp("kept-bundle"), [signer.secret], version="1.0")


def _block(bundle: Path) -> Signature:
    return parse_signatures(Path(f"{bundle}.minisig").read_bytes())[0]


def _as_key(block: Signature, n: int) -> Signature:
    return dataclasses.replace(block, key_id=n.to_bytes(8, "little"))


def _text(blocks: list[Signature]) -> bytes:
    return "".join(b.to_text() for b in blocks).encode()


def test_merged_signatures_keep_at_most_the_readers_count(bundle: Path) -> None:
    block = _block(bundle)
    old = _text([_as_key(block, n) for n in range(1, MAX_SIGNATURES + 1)])
    merged = merge_signatures(old, _text([_as_key(block, 1000)]))
    kept = parse_signatures(merged)  # still readable
    assert len(kept) == MAX_SIGNATURES
    assert kept[0].key_id == (1000).to_bytes(8, "little")  # the newest block first


def test_merged_signatures_keep_at_most_the_readers_bytes(bundle: Path) -> None:
    block = _block(bundle)
    size = len(block.to_text().encode())
    limits = Limits(max_signature_file=2 * size + size // 2)
    merged = merge_signatures(_text([_as_key(block, 1), _as_key(block, 2)]), _text([_as_key(block, 3)]), limits)
    assert len(merged) <= limits.max_signature_file
    assert [b.key_id for b in parse_signatures(merged, max_bytes=limits.max_signature_file)] == [
        (3).to_bytes(8, "little"),
        (1).to_bytes(8, "little"),
    ]


def test_a_kept_signature_file_over_its_bound_is_refused_on_read(tmp_path: Path, bundle: Path, signer: Keys) -> None:
    store = tmp_path / "store"
    assert cli("import", bundle, "--trust", signer.trust, "--store", store).exit_code == 0
    kept = store / "builds" / "toyengine" / "1.0-cpu" / SIGNATURE_FILE
    size = kept.stat().st_size
    with Store(store, limits=Limits(max_signature_file=size)) as s:
        assert s.build_files("toyengine/1.0-cpu")[1] == kept.read_bytes()
    with (
        Store(store, limits=Limits(max_signature_file=size - 1)) as s,
        pytest.raises(IntegrityError, match=rf"refused: .*{SIGNATURE_FILE}.*{size - 1}"),
    ):
        s.build_files("toyengine/1.0-cpu")
