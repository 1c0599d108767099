"""aarch64 nodes (GH200): a node picks the build for its own architecture, and refuses the other one
naming both (the machine and GPU facts faked, as for the GPU)."""

from __future__ import annotations

import platform
from pathlib import Path

import pytest
from conftest import Keys
from test_choose import CU13, fake_gpu, run, signed


@pytest.mark.parametrize(("machine", "chosen"), [("aarch64", "1.0-cu130-aarch64"), ("x86_64", "1.0-cu130")])
def test_the_node_takes_the_build_of_its_architecture_and_refuses_the_other(
    machine: str, chosen: str, keys: Keys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dist = tmp_path / "dist"
    signed(dist, keys, "cu130", CU13)
    signed(dist, keys, "cu130-aarch64", CU13, platform="aarch64-manylinux_2_28")
    fake_gpu(tmp_path / "bin", monkeypatch, "580.65.06, 9.0, NVIDIA GH200 480GB")
    monkeypatch.setattr(platform, "machine", lambda: machine)
    code, data, err = run("doctor", "--root", tmp_path / "e", "--trust", keys.trust, "--catalogue", dist)
    assert code == 0, err
    fits = {e["build"]: e for e in data["catalogue"]}  # type: ignore[attr-defined, index]
    assert data["node"]["machine"] == machine  # type: ignore[index]
    assert [b for b, e in fits.items() if e["fits"]] == [chosen]
    other = "x86_64" if machine == "aarch64" else "aarch64"
    (refused,) = [e for e in fits.values() if not e["fits"]]
    platform_of = "x86_64-manylinux_2_28" if other == "x86_64" else "aarch64-manylinux_2_28"
    assert f"built for {other} ({platform_of}), the node is {machine}" in refused["reasons"]
