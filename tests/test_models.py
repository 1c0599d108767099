"""Model bundles on the node: install --models writes the Hugging Face cache layout that the real
huggingface_hub finds offline; every refusal, each failing with its check removed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner
from conftest import Keys
from hubkit import REPO, tiny_model
from modelkit import COMMIT, model_bundle

from lockbuild.cli import main

FOLDER = "models--" + REPO.replace("/", "--")


def cli(*args: str | Path) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, [str(a) for a in args])
    return r.exit_code, r.stdout, r.stderr


def hub_offline(models: Path, code: str) -> str:
    """Run ``code`` with the real huggingface_hub, offline, on the cache ``models``; its stdout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE"))}
    env.update(HF_HUB_OFFLINE="1", HF_HUB_CACHE=str(models), HF_HUB_DISABLE_TELEMETRY="1")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


def test_install_writes_the_hub_cache_layout_that_huggingface_hub_finds_offline(tmp_path: Path, keys: Keys) -> None:
    packed = model_bundle(tmp_path, keys.secret)
    models = tmp_path / "models"
    code, out, err = cli("install", packed.bundle, "--models", models, "--trust", keys.trust, "--json")
    assert code == 0, err
    got = json.loads(out)
    assert got["repo"] == REPO and got["commit"] == COMMIT
    repo = models / FOLDER
    files = tiny_model()
    taken = sorted(p for p in files if not p.endswith((".bin", ".pth")) and not p.startswith("original/")
                   and p not in ("README.md", ".gitattributes"))
    snap = repo / "snapshots" / COMMIT
    listed = sorted(str(p.relative_to(snap)) for p in snap.rglob("*") if p.is_symlink())
    assert listed == taken
    assert (repo / "refs" / "main").read_bytes() == COMMIT.encode()  # no newline
    for path in taken:
        link = snap / path
        target = os.readlink(link)
        assert target.startswith("../" * (2 + path.count("/")) + "blobs/")
        assert link.read_bytes() == files[path]
        assert not (link.resolve().stat().st_mode & 0o222)  # read-only
    code = f"""
from huggingface_hub import snapshot_download, hf_hub_download
import os
p = snapshot_download({REPO!r})
print(p)
print(hf_hub_download({REPO!r}, "config.json"))
print(sorted(os.listdir(p)))
"""
    lines = hub_offline(models, code).splitlines()
    assert lines[0] == str(snap)
    assert lines[1] == str(snap / "config.json")


def test_blobs_and_snapshot_are_what_snapshot_download_writes(tmp_path: Path, keys: Keys, hub: object) -> None:
    """The fake Hub serves the same files; the real client's own download is the reference layout."""
    from servers import FakeHub

    assert isinstance(hub, FakeHub)
    files = tiny_model()
    hub.add_repo(REPO, files, commit=COMMIT)
    ref = tmp_path / "ref"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE"))}
    env.update(HF_ENDPOINT=hub.endpoint, HF_HUB_CACHE=str(ref), HF_HUB_DISABLE_TELEMETRY="1")
    code = (f"from huggingface_hub import snapshot_download\n"
            f"snapshot_download({REPO!r}, revision={COMMIT!r}, allow_patterns={list(_taken(files))!r})\n")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    packed = model_bundle(tmp_path, keys.secret)
    models = tmp_path / "models"
    assert cli("install", packed.bundle, "--models", models, "--trust", keys.trust)[0] == 0

    def layout(root: Path) -> dict[str, str]:
        out = {}
        for sub in ("blobs", "snapshots"):
            for p in sorted((root / FOLDER / sub).rglob("*")):
                rel = str(p.relative_to(root / FOLDER))
                out[rel] = os.readlink(p) if p.is_symlink() else ("dir" if p.is_dir() else p.read_bytes().hex())
        return out

    assert layout(models) == layout(ref)


def _taken(files: dict[str, bytes]) -> list[str]:
    return sorted(p for p in files if not p.endswith((".bin", ".pth")) and not p.startswith("original/")
                  and p not in ("README.md", ".gitattributes"))
