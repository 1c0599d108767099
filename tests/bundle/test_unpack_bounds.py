"""The bounds a bundle's reader applies on its own, whoever calls it: a manifest over ``max_manifest``
bytes and one whose members add up past ``max_bundle`` are refused by ``parse_manifest`` (a store, a
delta and a registry hand it bytes that no tar header bounded), and a zstd stream is refused as soon as
it decompresses past ``max_bundle`` plus the tar's own overhead, however small the file."""

from __future__ import annotations

import io

import pytest
import zstandard
from hostile import good_members, manifest

from lockbuild.bundle.manifestparse import parse_manifest
from lockbuild.bundle.zstdframe import decompressed
from lockbuild.errors import IntegrityError
from lockbuild.limits import Limits


def test_a_manifest_over_max_manifest_is_refused() -> None:
    raw = manifest(good_members()).to_toml()
    assert parse_manifest(raw, Limits(max_manifest=len(raw))).members
    with pytest.raises(IntegrityError, match=rf"the manifest is {len(raw)} bytes; expected at most {len(raw) - 1}\."):
        parse_manifest(raw, Limits(max_manifest=len(raw) - 1))


def test_a_manifest_whose_members_add_up_past_max_bundle_is_refused() -> None:
    m = manifest(good_members())
    total = sum(x.size for x in m.members)
    assert parse_manifest(m.to_toml(), Limits(max_bundle=total)).members
    with pytest.raises(IntegrityError, match=rf"the bundle unpacks to {total} bytes; expected at most {total - 1}\."):
        parse_manifest(m.to_toml(), Limits(max_bundle=total - 1))


def test_a_stream_that_decompresses_past_its_bound_is_refused_as_it_is_produced() -> None:
    zc = zstandard.ZstdCompressor(level=1, write_checksum=True, write_content_size=False)
    small = zc.compress(bytes((64 << 20) + (1 << 20)))  # 65 MiB of zeros
    assert len(small) < 1 << 16
    within = decompressed(io.BytesIO(small), Limits(max_bundle=1 << 20))
    assert len(within.read((64 << 20) + (1 << 20))) == (64 << 20) + (1 << 20)  # max_bundle + 64 MiB: the tar's room
    over = decompressed(io.BytesIO(small), Limits(max_bundle=(1 << 20) - 1))
    with pytest.raises(IntegrityError, match=rf"decompresses to more than {(64 << 20) + (1 << 20) - 1} bytes"):
        while over.read(1 << 20):
            pass
