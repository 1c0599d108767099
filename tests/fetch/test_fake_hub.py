"""The fake Hub answers as the Hugging Face Hub does: the real ``huggingface_hub`` client, pointed at it
with ``HF_ENDPOINT`` and a fresh ``HF_HOME``, downloads the tiny model correctly (a paginated tree, a
small file answered by the Hub, LFS files through the 302 to the CDN, which honours Range)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest
from hubkit import REPO, tiny_model
from servers import FakeHub

pytest.importorskip("huggingface_hub")

_CLIENT = """
import json, os, sys
from huggingface_hub import hf_hub_download, snapshot_download
repo, cache = sys.argv[1], sys.argv[2]
snap = snapshot_download(repo, cache_dir=cache)
one = hf_hub_download(repo, "config.json", cache_dir=cache)
print(json.dumps({"snapshot": snap, "config": one}))
"""


def _run_client(hub: FakeHub, tmp_path: Path, *args: str) -> dict[str, str]:
    import json

    env = {
        "PATH": "/usr/bin:/bin",
        "HF_ENDPOINT": hub.endpoint,
        "HF_HOME": str(tmp_path / "hf-home"),
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HUB_DISABLE_XET": "1",
        "NO_PROXY": "*",
    }
    done = subprocess.run([sys.executable, "-c", _CLIENT, *args], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_snapshot_download_and_hf_hub_download_read_the_fake_hub(hub: FakeHub, tmp_path: Path) -> None:
    files = tiny_model()
    commit = hub.add_repo(REPO, files)
    hub.page_size = 4  # the recursive tree comes in pages, each naming the next with Link: rel="next"
    cache = tmp_path / "hub-cache"
    got = _run_client(hub, tmp_path, REPO, str(cache))

    snap = Path(got["snapshot"])
    assert snap == cache / "models--tiny-org--tiny-llama" / "snapshots" / commit
    assert sorted(str(p.relative_to(snap)) for p in snap.rglob("*") if not p.is_dir()) == sorted(files)
    for path, data in files.items():
        assert (snap / path).read_bytes() == data, path
    blobs = {p.name for p in (snap.parent.parent / "blobs").iterdir()}
    expected = {
        hashlib.sha256(d).hexdigest() if hub_lfs else _oid(hub, commit, p)
        for p, d in files.items()
        for hub_lfs in [_is_lfs(hub, commit, p)]
    }
    assert blobs == expected
    assert Path(got["config"]).read_bytes() == files["config.json"]
    assert (snap.parent.parent / "refs" / "main").read_text() == commit

    tree_pages = [p for p, _ in hub.request_headers if "/tree/" in p]
    assert len(tree_pages) > 2 and any("cursor=" in p for p in tree_pages)  # the pages were followed
    shard = "model-00001-of-00002.safetensors"
    assert f"/{REPO}/resolve/{commit}/{shard}" in hub.requests  # asked at the Hub...
    sha = hashlib.sha256(files[shard]).hexdigest()
    assert hub.cdn.requests.count(hub.cdn_path(sha)) >= 1  # ...and fetched from the CDN after the 302


def test_the_cdn_honours_range(hub: FakeHub) -> None:
    import httpx

    files = tiny_model()
    commit = hub.add_repo(REPO, files)
    shard = "model-00002-of-00002.safetensors"
    with httpx.Client() as client:
        head = client.head(f"{hub.endpoint}/{REPO}/resolve/{commit}/{shard}")
        assert head.status_code == 302
        assert head.headers["x-linked-etag"] == f'"{hashlib.sha256(files[shard]).hexdigest()}"'
        assert head.headers["x-linked-size"] == str(len(files[shard]))
        assert head.headers["x-repo-commit"] == commit
        part = client.get(head.headers["location"], headers={"Range": "bytes=10-"})
        assert part.status_code == 206 and part.content == files[shard][10:]
        small = client.get(f"{hub.endpoint}/{REPO}/resolve/main/config.json")
        assert small.status_code == 200 and small.content == files["config.json"]
        assert small.headers["etag"] == f'"{_oid(hub, commit, "config.json")}"'
        missing = client.get(f"{hub.endpoint}/api/models/{REPO}/revision/no-such-branch")
        assert missing.status_code == 404 and missing.headers["x-error-code"] == "RevisionNotFound"


def _entry(hub: FakeHub, commit: str, path: str):  # type: ignore[no-untyped-def]
    return next(e for e in hub.repos[REPO][commit] if e.path == path)


def _is_lfs(hub: FakeHub, commit: str, path: str) -> bool:
    return bool(_entry(hub, commit, path).lfs)


def _oid(hub: FakeHub, commit: str, path: str) -> str:
    return str(_entry(hub, commit, path).oid)


def test_the_revisions_last_modified_is_the_commits_date_as_the_real_client_reads_it(
    hub: FakeHub, tmp_path: Path
) -> None:
    """``HfApi.model_info(repo, revision=COMMIT).last_modified``: what a model bundle's serial is made from."""
    import json

    old = hub.add_repo(REPO, tiny_model(), date="2024-03-05T06:07:08.000Z")
    new = hub.add_repo(REPO, {**tiny_model(), "extra.txt": b"x\n"}, date="2025-06-07T08:09:10.123Z")
    code = (
        "import json, sys\nfrom huggingface_hub import HfApi\n"
        "print(json.dumps({c: HfApi().model_info(sys.argv[1], revision=c).last_modified.isoformat() "
        "for c in sys.argv[2:]}))\n"
    )
    env = {"PATH": "/usr/bin:/bin", "HF_ENDPOINT": hub.endpoint, "HF_HOME": str(tmp_path / "h"), "NO_PROXY": "*"}
    env["HF_HUB_DISABLE_TELEMETRY"] = "1"
    done = subprocess.run([sys.executable, "-c", code, REPO, old, new], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout) == {old: "2024-03-05T06:07:08+00:00", new: "2025-06-07T08:09:10.123000+00:00"}
