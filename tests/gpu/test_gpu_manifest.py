"""Manifest format 5 carries the measured fit per package; a node of this version reads formats 2-5, an
older one refuses format 5 saying a newer lockbuild made it; ``inspect`` shows the fit."""

from __future__ import annotations

import dataclasses

import pytest
from hostile import GOOD_FILES, INSTALL, manifest, member
from test_gpu_fit import VERSIONS, VLLM

import lockbuild.bundle.manifestparse as manifestparse
from lockbuild.bundle.instructions import FORMAT_5, GpuNeeds
from lockbuild.bundle.manifestparse import parse_manifest
from lockbuild.errors import IntegrityError
from lockbuild.gpu.fit import default_gate, measure

FIT = measure(VLLM, VERSIONS, (), default_gate("vllm"))


def measured_manifest(**gpu: object) -> bytes:
    needs = GpuNeeds((7, 5), "580.65.06", (12, 1), FIT, **gpu)  # type: ignore[arg-type]
    install = dataclasses.replace(INSTALL, gpu=needs)
    return manifest([member(p, d, k) for p, d, k in GOOD_FILES], install=install).to_toml()


def test_a_measured_fit_is_format_5_and_reads_back() -> None:
    raw = measured_manifest()
    assert raw.startswith(b"format = 5\n")
    assert b'[install.gpu.measured]\ncuda = "13.0"' in raw
    m = parse_manifest(raw)
    assert m.format == FORMAT_5 and m.install.gpu is not None and m.install.gpu.measured is not None
    assert m.install.gpu.measured.to_json() == FIT.to_json()
    # the variant properties name what the gated packages carry: no 11.0
    props = m.install.gpu.variant_properties()
    assert "nvidia :: sm_arch :: 121_real" in props and "nvidia :: sm_arch :: 110_real" not in props


def test_a_measured_fit_in_an_older_format_is_refused() -> None:
    raw = measured_manifest().replace(b"format = 5\n", b"format = 3\n", 1)
    with pytest.raises(IntegrityError, match=r"carries what format 5 adds \(install\.gpu\.measured"):
        parse_manifest(raw)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (b'sass = ["7.5", "8.0"', b'sass = ["8.0", "7.5"'),  # unsorted
        (b'package = "torch"', b'package = "Torch!"'),
        (b'cuda = "13.0"', b'cuda = "13"'),
    ],
)
def test_a_damaged_measured_fit_is_refused(old: bytes, new: bytes) -> None:
    raw = measured_manifest()
    assert old in raw
    with pytest.raises(IntegrityError, match=r"install\.gpu\.measured"):
        parse_manifest(raw.replace(old, new, 1))


def test_an_older_node_refuses_format_5_saying_a_newer_lockbuild_made_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(manifestparse, "READS", (2, 3, 4))  # what the lockbuild before this one reads
    with pytest.raises(
        IntegrityError, match=r"manifest is format 5 \(made by lockbuild 0\.1\.0\); this lockbuild"
    ) as e:
        parse_manifest(measured_manifest())
    assert "Upgrade lockbuild on this node to 0.1.0" in e.value.tip


def test_bundles_of_formats_2_and_3_keep_reading() -> None:
    plain = manifest([member(p, d, k) for p, d, k in GOOD_FILES])
    assert parse_manifest(plain.to_toml()).format == 2
    three = dataclasses.replace(plain, install=dataclasses.replace(INSTALL, gpu=GpuNeeds((8, 0), "570", (9, 0))))
    assert parse_manifest(three.to_toml()).format == 3
