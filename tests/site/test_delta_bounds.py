"""A delta's ``delta.toml`` and ``bundle.toml`` are bounded before a byte of them is read into memory:
a delta whose head or manifest claims more than its bound is refused by name and size, not read."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest
import zstandard
from conftest import Keys, make_keys
from sitekit import cli, make_bundle

from lockbuild.bundle.write import BLOCK, RECORD, compressor, tar_header
from lockbuild.errors import IntegrityError
from lockbuild.limits import Limits
from lockbuild.site.delta import MAX_HEAD
from lockbuild.site.sources import DeltaFile


@pytest.fixture(scope="module")
def signer(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    return make_keys(tmp_path_factory.mktemp("bounds-keys"))


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory, signer: Keys) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("bounds-bundles")
    return {v: make_bundle(out, [signer.secret], version=v) for v in ("1.0", "1.1")}


def _delta(bundles: dict[str, Path], out: Path, trust: Path) -> Path:
    r = cli("delta", bundles["1.1"], "--base", bundles["1.0"], "--out", out, "--trust", trust)
    assert r.exit_code == 0, r.output
    return out / (bundles["1.1"].name.removesuffix(".lbz") + ".delta.lbz")


def _members(delta: Path) -> list[tuple[str, bytes]]:
    raw = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(delta.read_bytes())).read()
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        return [(m.name, tar.extractfile(m).read()) for m in tar.getmembers()]  # type: ignore[union-attr]


def _rewrite(delta: Path, members: list[tuple[str, bytes]]) -> None:
    """The delta again, written as `lockbuild delta` writes it, with these members."""
    body = bytearray()
    for name, data in members:
        body += tar_header(name, len(data), 0) + data + bytes(-len(data) % BLOCK)
    body += bytes(2 * BLOCK)
    body += bytes(-len(body) % RECORD)
    delta.write_bytes(compressor(1).compress(bytes(body)))


def test_a_delta_head_over_its_bound_is_refused_before_it_is_read(
    tmp_path: Path, bundles: dict[str, Path], signer: Keys
) -> None:
    delta = _delta(bundles, tmp_path / "deltas", signer.trust)
    members = _members(delta)
    assert members[0][0] == "delta.toml"
    padded = members[0][1] + b"# " + b"x" * MAX_HEAD + b"\n"  # still valid TOML, only too large
    _rewrite(delta, [("delta.toml", padded), *members[1:]])
    store = tmp_path / "store"
    assert cli("import", bundles["1.0"], "--trust", signer.trust, "--store", store).exit_code == 0
    r = cli("import", delta, "--trust", signer.trust, "--store", store)
    assert r.exit_code == 4, r.output
    assert f"the delta's delta.toml is {len(padded)} bytes; expected at most {MAX_HEAD}" in r.output
    assert [p.name for p in (store / "builds" / "toyengine").iterdir()] == ["1.0-cpu"]


def test_a_delta_manifest_over_its_bound_is_refused_before_it_is_read(
    tmp_path: Path, bundles: dict[str, Path], signer: Keys
) -> None:
    delta = _delta(bundles, tmp_path / "deltas", signer.trust)
    manifest = dict(_members(delta))["bundle.toml"]
    bound = Limits(max_manifest=len(manifest) - 1)
    with pytest.raises(
        IntegrityError,
        match=rf"bundle\.toml is {len(manifest)} bytes; expected at most "
        rf"{len(manifest) - 1}",
    ):
        DeltaFile(delta, None).manifest_bytes(bound)
    assert DeltaFile(delta, None).manifest_bytes(Limits(max_manifest=len(manifest))) == manifest
