"""Checks a review found no test for: each test here fails when its check is removed."""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
from pathlib import Path

import pytest

from lockbuild.errors import InstallError


def _archive(path: Path, exe: str, script: str) -> str:
    """A python-build-standalone-shaped archive whose interpreter is ``script``."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for d in ("python", "python/bin"):
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        data = script.encode()
        info = tarfile.TarInfo(exe)
        info.size, info.mode = len(data), 0o755
        tar.addfile(info, io.BytesIO(data))
    path.write_bytes(buf.getvalue())
    return hashlib.sha256(buf.getvalue()).hexdigest()


def test_the_node_runs_the_bundled_interpreter_and_refuses_another_python(tmp_path: Path) -> None:
    """The builder checks the archive's name and entries; the node runs the unpacked interpreter and
    refuses one that is another Python than the bundle's, leaving nothing placed."""
    from lockbuild.install.pythons import PYTHONS, bundled_python

    archive = tmp_path / "cpython-3.12.0-x86_64-unknown-linux-gnu-install_only.tar.gz"
    sha = _archive(archive, "python/bin/python3.12", "#!/bin/sh\necho 3.11\n")
    root = tmp_path / "root"
    with (
        pytest.raises(InstallError, match=r"is Python 3\.11; the bundle is built for 3\.12"),
        bundled_python(root, archive, sha, "3.12"),
    ):
        pass
    assert [p.name for p in (root / PYTHONS).iterdir() if not p.name.endswith((".lock", ".use"))] == []
    sha_ok = _archive(archive, "python/bin/python3.12", "#!/bin/sh\necho 3.12\n")
    with bundled_python(root, archive, sha_ok, "3.12") as exe:
        assert exe == root / PYTHONS / sha_ok / "python" / "bin" / "python3.12"


@pytest.mark.parametrize("damage", ["group-writable", "foreign"])
def test_a_remembered_resolution_that_is_not_this_users_private_file_is_a_miss(tmp_path: Path, damage: str) -> None:
    """The memo's owner check: an entry writable by others (or owned by another user) could choose uv's
    answer; it is ignored, never read."""
    from lockbuild.resolution.memo import ResolutionMemo

    root = tmp_path / "resolutions"
    root.mkdir(mode=0o700)
    memo = ResolutionMemo(root)
    key = "a" * 64
    assert memo.put(key, "requirements.txt", "toydep==1.0 \\\n    --hash=sha256:" + "b" * 64 + "\n")
    assert memo.get(key) is not None
    entry = root / key
    if damage == "group-writable":
        entry.chmod(0o660)
    else:
        if os.geteuid() != 0:
            pytest.skip("changing a file's owner needs root")
        os.chown(entry, 65534, 65534)
    assert memo.get(key) is None
