"""`install ENGINE/VERSION-VARIANT --store DIR`: the installer's promises, from a site store."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import TOY_RECIPE, Keys, make_keys
from servers import FakeServer
from test_install import build, cli, toy_version

REF = "toyengine/1.0-cpu"


@pytest.fixture(scope="module")
def built(server: FakeServer, keys: Keys, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """Real bundles (uv, wheels) of the toy engine 1.0 as of day 6 and day 25, each imported into its own
    store, and of toyengine 1.1."""
    tmp = tmp_path_factory.mktemp("site-install")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LOCKBUILD_INDEX_URL", server.index_url())
        mp.setenv("LOCKBUILD_CACHE_DIR", str(tmp / "cache"))
        later = TOY_RECIPE + 'as-of = "2025-01-25T00:00:00Z"\n'
        # toyengine 1.1 (published day 30), as of day 31: a new version, sharing uv and toydep with 1.0
        newer = (
            TOY_RECIPE.replace('version = "1.0"', 'version = "1.1"').replace(
                'requirements = ["toyengine==1.0"]', 'requirements = ["toyengine==1.1"]'
            )
            + 'as-of = "2025-01-31T00:00:00Z"\n'
        )
        out = {
            "v1": build(TOY_RECIPE, tmp, keys, "v1"),
            "v2": build(later, tmp, keys, "v2"),
            "v11": build(newer, tmp, keys, "v11"),
        }
    for name in ("v1", "v2"):
        store = tmp / f"store-{name}"
        code, _, err = cli("import", str(out[name]), "--trust", str(keys.trust), "--store", str(store))
        assert code == 0, err
        out[f"store-{name}"] = store
    yield out


def _install(store: Path, root: Path, keys: Keys, *extra: str) -> tuple[int, dict[str, object], str]:
    code, out, err = cli(
        "install", REF, "--store", str(store), "--root", str(root), "--trust", str(keys.trust), "--json", *extra
    )
    try:
        data = json.loads(out)
    except ValueError:
        data = json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
    return code, data, err


def test_install_from_the_store_upgrade_noop_and_downgrade(built: dict[str, Path], keys: Keys, tmp_path: Path) -> None:
    root = tmp_path / "engines"
    code, result, err = _install(built["store-v1"], root, keys)
    assert code == 0 and result["status"] == "installed", err
    env = root / "toyengine" / "1.0-cpu"
    assert toy_version(env) == "1.0"
    out = subprocess.run([str(env / "bin" / "toyengine"), "--version"], capture_output=True, text=True)
    assert out.stdout.strip() == "toyengine 1.0"
    # the same record as installing the .lbz: a no-op either way
    code, again, _ = _install(built["store-v1"], root, keys)
    assert code == 0 and again["status"] == "unchanged"
    code, lbz, _ = cli("install", str(built["v1"]), "--root", str(root), "--trust", str(keys.trust), "--json")
    assert code == 0 and json.loads(lbz)["status"] == "unchanged"
    code, newer, _ = _install(built["store-v2"], root, keys)
    assert code == 0 and newer["status"] == "installed" and newer["bundle_sha256"] != result["bundle_sha256"]
    code, _, err = _install(built["store-v1"], root, keys)
    assert code == 1 and "holds a newer build" in err
    assert _install(built["store-v1"], root, keys, "--allow-downgrade")[0] == 0


def test_a_missing_or_damaged_blob_is_named_and_nothing_is_placed(
    built: dict[str, Path], keys: Keys, tmp_path: Path
) -> None:
    import shutil

    store = tmp_path / "store"
    shutil.copytree(built["store-v1"], store)
    manifest = (store / "builds" / "toyengine" / "1.0-cpu" / "bundle.toml").read_text()
    wheel = next(line.split('"')[1] for line in manifest.splitlines() if line.startswith('path = "wheels/toydep'))
    blobs = {p.name: p for p in (store / "blobs" / "sha256").iterdir()}
    from lockbuild.bundle.manifestparse import parse_manifest

    m = parse_manifest(manifest.encode()).member(wheel)
    blob = blobs[m.sha256]
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 1
    blob.chmod(0o644)
    blob.write_bytes(bytes(data))
    root = tmp_path / "engines"
    code, _, err = _install(store, root, keys)
    assert code == 4 and f"member '{wheel}' has sha256" in err and "lockbuild store verify" in err, err
    assert not (root / "toyengine" / "1.0-cpu").exists()
    blob.unlink()
    code, _, err = _install(store, root, keys)
    assert code == 4 and wheel in err and f"has no blob {m.sha256}" in err
    assert [p.name for p in (root / "toyengine").iterdir() if not p.name.startswith(".")] == []


def test_an_untrusted_store_build_is_refused_before_any_blob_is_read(
    built: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import lockbuild.site.storage

    def boom(*_a: object, **_k: object) -> None:
        raise AssertionError("a blob was read before the signature policy was met")

    monkeypatch.setattr(lockbuild.site.storage.Store, "open_blob", boom)
    stranger = make_keys(tmp_path / "stranger")
    code, _, err = _install(built["store-v1"], tmp_path / "engines", stranger)
    assert code == 3 and "signature policy not met" in err


def test_install_from_the_store_needs_no_network(built: dict[str, Path], keys: Keys, tmp_path: Path) -> None:
    if subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode != 0:
        pytest.skip("this machine does not allow a network namespace (unshare -n)")
    argv = [
        "unshare",
        "-n",
        sys.executable,
        "-m",
        "lockbuild",
        "install",
        REF,
        "--store",
        str(built["store-v1"]),
        "--root",
        str(tmp_path / "engines"),
        "--trust",
        str(keys.trust),
        "--json",
    ]
    proc = subprocess.run(argv, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["status"] == "installed"


def test_install_takes_a_part_list_and_names_a_damaged_part(built: dict[str, Path], keys: Keys, tmp_path: Path) -> None:
    code, out, err = cli("split", str(built["v1"]), "--size", "100K", "--out", str(tmp_path / "media"), "--json")
    assert code == 0, err
    parts = json.loads(out)["parts"]
    listing = tmp_path / "media" / f"{built['v1'].name}.parts.toml"
    root = tmp_path / "engines"
    victim = tmp_path / "media" / parts[-1]["name"]
    data = bytearray(victim.read_bytes())
    data[0] ^= 1
    victim.write_bytes(bytes(data))
    code, _, err = cli("install", str(listing), "--root", str(root), "--trust", str(keys.trust))
    assert code == 4 and f"the part {victim.name} is damaged" in err
    assert not (root / "toyengine" / "1.0-cpu").exists()
    data[0] ^= 1
    victim.write_bytes(bytes(data))
    code, out, err = cli("install", str(listing), "--root", str(root), "--trust", str(keys.trust), "--json")
    assert code == 0 and json.loads(out)["status"] == "installed", err


def test_a_full_bundle_then_a_delta_then_both_installed_offline(
    built: dict[str, Path], keys: Keys, tmp_path: Path
) -> None:
    """The issue's 'done when': import a full bundle, then a delta, and install both versions from the store
    with no network."""
    code, out, err = cli(
        "delta",
        str(built["v11"]),
        "--base",
        str(built["v1"]),
        "--out",
        str(tmp_path / "d"),
        "--trust",
        str(keys.trust),
        "--json",
    )
    assert code == 0, err
    delta = json.loads(out)
    assert delta["included"] < delta["members"]  # uv and toydep are not shipped again
    store = tmp_path / "store"
    for source in (built["v1"], Path(delta["delta"])):
        code, _, err = cli("import", str(source), "--trust", str(keys.trust), "--store", str(store))
        assert code == 0, err
    root = tmp_path / "engines"
    netns = subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode == 0
    for ref, want in (("toyengine/1.0-cpu", "toyengine 1.0"), ("toyengine/1.1-cpu", "toyengine 1.1")):
        argv = [
            sys.executable,
            "-m",
            "lockbuild",
            "install",
            ref,
            "--store",
            str(store),
            "--root",
            str(root),
            "--trust",
            str(keys.trust),
            "--json",
        ]
        proc = subprocess.run((["unshare", "-n"] if netns else []) + argv, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        env = root / "toyengine" / ref.split("/")[1]
        out = subprocess.run([str(env / "bin" / "toyengine"), "--version"], capture_output=True, text=True)
        assert out.stdout.strip() == want


def test_install_takes_a_delta_completed_by_the_store(built: dict[str, Path], keys: Keys, tmp_path: Path) -> None:
    """`install NAME.delta.lbz --store DIR`: the delta's members and the store's, one trust decision, one
    check of every member; without the store the members it leaves out are named, and nothing is placed."""
    code, out, err = cli(
        "delta",
        str(built["v11"]),
        "--base",
        str(built["v1"]),
        "--out",
        str(tmp_path / "d"),
        "--trust",
        str(keys.trust),
        "--json",
    )
    assert code == 0, err
    delta = json.loads(out)["delta"]
    root = tmp_path / "engines"
    code, _, err = cli("install", delta, "--root", str(root), "--trust", str(keys.trust))
    assert code == 4 and "needs" in err and "the store lacks" in err, err
    assert not (root / "toyengine" / "1.1-cpu").exists()
    code, out, err = cli(
        "install", delta, "--store", str(built["store-v1"]), "--root", str(root), "--trust", str(keys.trust), "--json"
    )
    assert code == 0, err
    env = root / "toyengine" / "1.1-cpu"
    out = subprocess.run([str(env / "bin" / "toyengine"), "--version"], capture_output=True, text=True)
    assert out.stdout.strip() == "toyengine 1.1"
