"""A wheel's METADATA is taken out once, as the wheel enters the cache, and kept beside it by its sha256:
a rebuild's lock (the remembered resolution's check) reads that, never the wheel. The kept file is
trusted only as far as the cache is (this user's own private file, never a link) and only for the wheel
its first line names, with the digest it records."""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import pytest
from conftest import day
from servers import FakeServer, make_wheel
from test_lock_memo import entries, lock, publish_engine, recipe, uv_requests, versions

from lockbuild.errors import FetchError
from lockbuild.fetch.cache import METADATA_MAGIC, Cache


def kept_files(cache: Path) -> list[Path]:
    return sorted(p for p in (cache / "metadata").rglob("*") if p.is_file() or p.is_symlink())


def test_a_rebuild_s_lock_opens_no_wheel(env: FakeServer, tmp_path: Path) -> None:
    """Every cached wheel is overwritten with same-size garbage after the lock that fetched it: the next
    lock still reuses the resolution, asks for no wheel, and leaves the garbage in place (a wheel opened
    and hashed would have been found damaged, removed and fetched again)."""
    publish_engine(env, "kmone")
    path = recipe(tmp_path, "kmone")
    cache = tmp_path / "cache"
    first = lock(path, tmp_path / "a")
    second = lock(path, tmp_path / "b")  # the check reads each wheel's METADATA: the wheels are fetched now
    assert second["resolution_reused"] is True
    wheels = set(re.findall(r"sha256:([0-9a-f]{64})", (tmp_path / "b/1.0-cpu/requirements.txt").read_text()))
    assert len(wheels) == 2
    assert {p.name for p in kept_files(cache)} >= set(wheels)
    for sha in wheels:
        entry = Cache(cache).path(sha)
        entry.write_bytes(b"\0" * entry.stat().st_size)
    before = len(env.requests)
    third = lock(path, tmp_path / "c")
    assert third.pop("resolution_reused") is True
    assert not [p for p in env.requests[before:] if p.endswith(".whl")]
    assert all(set(Cache(cache).path(sha).read_bytes()) == {0} for sha in wheels)  # never opened to be hashed
    first.pop("resolution_reused")
    assert first == third


def _forged(sha256: str, body: bytes, *, named: str | None = None) -> bytes:
    head = b" ".join((METADATA_MAGIC, (named or sha256).encode(), hashlib.sha256(body).hexdigest().encode()))
    return head + b"\n" + body


@pytest.mark.parametrize("attack", ["edited", "another-wheel-s", "other-owner", "group-writable", "symlink"])
def test_a_planted_metadata_file_never_lets_an_added_package_through(
    env: FakeServer, tmp_path: Path, attack: str
) -> None:
    """The resolution's memory is rewritten to pin one more package (a real file, real digest) and the
    engine's kept METADATA is rewritten to require it, so that the closure check would pass: each kept file
    the cache did not write for that wheel is refused, the wheel's own METADATA is read, and uv runs afresh."""
    engine = f"kmp{attack.replace('-', '')[:10]}"
    publish_engine(env, engine)
    implant = f"{engine}-implant"
    if ("primary", implant) not in env.projects:
        env.publish(*make_wheel(implant, "1.0"), uploaded=day(1))
    implant_sha = env.projects[("primary", implant)][0].sha256
    path = recipe(tmp_path, engine)
    cache = tmp_path / "cache"
    first = lock(path, tmp_path / "a")
    lock(path, tmp_path / "b")  # fetches the wheels, keeps their METADATA
    (entry,) = entries(cache)
    doc = json.loads(entry.read_text())
    doc["text"] += f"{implant}==1.0 \\\n    --hash=sha256:{implant_sha}\n"
    entry.write_text(json.dumps(doc))
    sha = env.projects[("primary", engine)][0].sha256
    kept = cache / "metadata" / sha[:2] / sha
    head, _, body = kept.read_bytes().partition(b"\n")
    body = body.rstrip(b"\n") + f"\nRequires-Dist: {implant}\n".encode()
    if attack == "edited":  # the body changed, the first line kept: its digest no longer holds
        kept.write_bytes(head + b"\n" + body)
    elif attack == "another-wheel-s":  # a file written for another wheel, put in this one's place
        kept.write_bytes(_forged(sha, body, named=implant_sha))
    else:
        kept.write_bytes(_forged(sha, body))
        if attack == "other-owner":
            os.chown(kept, 65534, 65534)
        elif attack == "group-writable":
            kept.chmod(0o660)
        else:
            planted = tmp_path / "planted"
            kept.rename(planted)
            kept.symlink_to(planted)
    before = len(env.request_headers)
    second = lock(path, tmp_path / "c")
    assert second.pop("resolution_reused") is False and uv_requests(env, before)
    assert implant not in versions(second)
    assert implant not in (tmp_path / "c/1.0-cpu/requirements.txt").read_text()
    first.pop("resolution_reused")
    assert first == second
    again = Cache(cache).metadata(sha)  # the wheel's own, kept again
    assert again is not None and implant.encode() not in again


def test_a_metadata_directory_another_user_could_write_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    root.mkdir(mode=0o700)
    (root / "metadata").mkdir()
    (root / "metadata").chmod(0o775)
    with pytest.raises(FetchError, match="metadata is writable by group or others"):
        Cache(root).check_owner()
