"""`install ENGINE/VERSION-VARIANT --store DIR` hard-links the store's blobs into staging (same
file system, same owner) and checks each linked file's sha256 in the one extraction; elsewhere it copies.
The store is the same after an install, a failed install and a refused one."""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import io
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import TOY_RECIPE, Keys
from servers import FakeServer
from test_install import build, cli, toy_version

import lockbuild.fsio.trees
from lockbuild.bundle.extract import FilePiece, extract
from lockbuild.bundle.manifest import Member
from lockbuild.bundle.manifestparse import parse_manifest
from lockbuild.errors import InstallError, IntegrityError
from lockbuild.fsio import link_under, open_dir
from lockbuild.install.stage import Stage

REF = "toyengine/1.0-cpu"


@pytest.fixture(scope="module")
def store(server: FakeServer, keys: Keys, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    tmp = tmp_path_factory.mktemp("store-link")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LOCKBUILD_INDEX_URL", server.index_url())
        mp.setenv("LOCKBUILD_CACHE_DIR", str(tmp / "cache"))
        bundle = build(TOY_RECIPE, tmp, keys, "v1")
    out = tmp / "store"
    code, _, err = cli("import", str(bundle), "--trust", str(keys.trust), "--store", str(out))
    assert code == 0, err
    yield out


def _copy(store: Path, tmp: Path) -> Path:
    dst = tmp / "store"
    shutil.copytree(store, dst)
    return dst


def _blobs(store: Path) -> dict[str, tuple[int, int, int, str]]:
    """Each blob: (inode, link count, mode, sha256 of its bytes)."""
    out = {}
    for p in sorted((store / "blobs" / "sha256").iterdir()):
        st = p.lstat()
        out[p.name] = (st.st_ino, st.st_nlink, st.st_mode, hashlib.sha256(p.read_bytes()).hexdigest())
    return out


def _members(store: Path) -> dict[str, str]:
    m = parse_manifest((store / "builds" / "toyengine" / "1.0-cpu" / "bundle.toml").read_bytes())
    return {x.path: x.sha256 for x in m.members}


def _install(store: Path, root: Path, keys: Keys) -> tuple[int, str]:
    code, out, err = cli(
        "install", REF, "--store", str(store), "--root", str(root), "--trust", str(keys.trust), "--json"
    )
    return code, out + err


def _seen_by_uv(monkeypatch: pytest.MonkeyPatch, fail: bool = False) -> dict[str, os.stat_result]:
    """What the staging directory holds when uv starts: each member's lstat, by member path."""
    seen: dict[str, os.stat_result] = {}
    original = Stage.build

    def spy(self: Stage, python: Path) -> None:
        for p in self.unpacked.rglob("*"):
            if p.is_file() and not p.is_symlink():
                seen[p.relative_to(self.unpacked).as_posix()] = p.lstat()
        original(self, python)
        if fail:
            raise InstallError("the test stops the install after uv ran.")

    monkeypatch.setattr(Stage, "build", spy)
    return seen


def test_install_from_a_store_hard_links_each_blob_and_leaves_the_store_as_it_was(
    store: Path, keys: Keys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = _copy(store, tmp_path)
    before = _blobs(s)
    seen = _seen_by_uv(monkeypatch)
    root = tmp_path / "engines"
    code, said = _install(s, root, keys)
    assert code == 0 and json.loads(said)["status"] == "installed", said
    assert toy_version(root / "toyengine" / "1.0-cpu") == "1.0"
    members = _members(s)
    wheels = [p for p in members if p.startswith("wheels/")]
    assert wheels
    for path, sha in members.items():
        st = seen[path]
        blob = (s / "blobs" / "sha256" / sha).lstat()
        assert (st.st_dev, st.st_ino) == (blob.st_dev, blob.st_ino), path  # the store's file, not a copy
        assert st.st_nlink >= 2 and not st.st_mode & 0o222, path  # linked, and writable by no one
    assert _blobs(s) == before  # every blob: same inode, one link again, same mode, same bytes


def test_a_failed_install_from_a_store_leaves_the_store_as_it_was(
    store: Path, keys: Keys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = _copy(store, tmp_path)
    before = _blobs(s)
    seen = _seen_by_uv(monkeypatch, fail=True)
    root = tmp_path / "engines"
    code, said = _install(s, root, keys)
    assert code != 0 and "the test stops the install after uv ran" in said, said
    assert any(st.st_nlink >= 2 for st in seen.values())  # it had linked
    assert not (root / "toyengine" / "1.0-cpu").exists()
    assert [p.name for p in (root / "toyengine").iterdir() if not p.name.startswith(".")] == []
    assert _blobs(s) == before
    code, out, err = cli("store", "verify", "--store", str(s), "--json")
    assert code == 0, out + err


def _damage(store: Path) -> str:
    """Flip one byte in the middle of toydep's wheel blob (same size); the member's path."""
    path, sha = next((p, h) for p, h in _members(store).items() if p.startswith("wheels/toydep"))
    blob = store / "blobs" / "sha256" / sha
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 1
    blob.chmod(0o644)
    blob.write_bytes(bytes(data))
    blob.chmod(0o444)
    return path


def test_a_damaged_blob_is_refused_though_it_was_linked(
    store: Path, keys: Keys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = _copy(store, tmp_path)
    wheel = _damage(s)
    before = _blobs(s)
    linked: list[str] = []
    real = lockbuild.fsio.link_file

    def spy(src_dir_fd: int, src_name: str, dst_dir_fd: int, dst_name: str) -> None:
        real(src_dir_fd, src_name, dst_dir_fd, dst_name)
        linked.append(dst_name)

    monkeypatch.setattr(lockbuild.fsio.trees, "link_file", spy)
    root = tmp_path / "engines"
    code, said = _install(s, root, keys)
    assert wheel.rsplit("/", 1)[1] in linked  # the damaged member went the linked way
    assert code == 4 and f"member '{wheel}' has sha256" in said and "lockbuild store verify" in said, said
    assert not (root / "toyengine" / "1.0-cpu").exists()
    assert _blobs(s) == before  # refused, and the store (damage included) untouched


def test_across_file_systems_the_blobs_are_copied_and_still_checked(
    store: Path, keys: Keys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def cross(*_a: object) -> None:
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(lockbuild.fsio.trees, "link_file", cross)
    s = _copy(store, tmp_path)
    seen = _seen_by_uv(monkeypatch)
    root = tmp_path / "engines"
    code, said = _install(s, root, keys)
    assert code == 0 and json.loads(said)["status"] == "installed", said
    for path, sha in _members(s).items():
        blob = (s / "blobs" / "sha256" / sha).lstat()
        assert seen[path].st_ino != blob.st_ino and seen[path].st_nlink == 1, path  # a copy
    wheel = _damage(s)
    code, said = _install(s, tmp_path / "other", keys)
    assert code == 4 and f"member '{wheel}' has sha256" in said, said


def test_link_under_links_only_a_regular_file_of_this_user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "blob").write_bytes(b"x" * 10)
    (src / "link").symlink_to(src / "blob")
    dest = tmp_path / "dest"
    dest.mkdir()
    fd = open_dir(src)
    try:
        f = link_under(fd, "blob", dest, "a/b/c.whl")
        assert f is not None
        with f:
            assert f.read() == b"x" * 10
        assert (dest / "a" / "b" / "c.whl").stat().st_ino == (src / "blob").stat().st_ino
        assert link_under(fd, "link", dest, "d.whl") is None and not (dest / "d.whl").exists()
        assert link_under(fd, "absent", dest, "e.whl") is None
        with pytest.raises(FileExistsError):
            link_under(fd, "blob", dest, "a/b/c.whl")
        owner = os.geteuid()
        monkeypatch.setattr(lockbuild.fsio.trees.os, "geteuid", lambda: owner + 1)
        assert link_under(fd, "blob", dest, "f.whl") is None and not (dest / "f.whl").exists()
    finally:
        os.close(fd)


def test_a_linked_member_longer_than_signed_is_refused(store: Path, tmp_path: Path) -> None:
    """The extraction holds a linked file to the manifest's size as it does a copied one."""
    src = tmp_path / "src"
    src.mkdir()
    data = b"y" * 100
    (src / "blob").write_bytes(data + b"z")
    one = Member("wheels/a-1-py3-none-any.whl", 100, hashlib.sha256(data).hexdigest(), "wheel")
    real = parse_manifest((store / "builds" / "toyengine" / "1.0-cpu" / "bundle.toml").read_bytes())
    manifest = dataclasses.replace(real, members=(one,))
    (tmp_path / "dest").mkdir()
    fd = open_dir(src)
    try:
        piece = FilePiece(one.path, 100, lambda: io.BytesIO(data), link=(fd, "blob"))
        with pytest.raises(IntegrityError) as info:
            extract(manifest, iter([piece]), dest=tmp_path / "dest")
        assert "longer than the 100 bytes" in info.value.message
    finally:
        os.close(fd)
