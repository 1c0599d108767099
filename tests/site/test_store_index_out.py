"""Which --out `lockbuild store index` takes: never the store, a directory that holds it or one inside it
(as named, as resolved, and by device and inode: a bind mount hides no path); an existing --out only when
it is empty or an earlier export (its marker, read by descriptor); and what a killed export left beside
--out is removed by the next run, never a user's look-alike."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import make_keys
from hostile import UV_MEMBER
from servers import make_wheel
from sitekit import cli, make_bundle

from lockbuild.site.exportout import MARKER, MARKER_TEXT

HEX = "0123456789abcdef"


def tree(root: Path) -> dict[str, bytes | str]:
    """Every entry under ``root``: a file's bytes, a link's target, a directory as "dir"."""
    out: dict[str, bytes | str] = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        out[rel] = f"-> {os.readlink(p)}" if p.is_symlink() else "dir" if p.is_dir() else p.read_bytes()
    return out


@pytest.fixture()
def store(tmp_path: Path) -> Path:
    keys = make_keys(tmp_path / "k")
    name, data = make_wheel("toydep", "1.0")
    files = [("recipe.toml", b"[engine]\n", "recipe"), (UV_MEMBER, b"PK uv", "tool"), (f"wheels/{name}", data, "wheel")]
    bundle = make_bundle(tmp_path / "b", [keys.secret], files=files)
    store = tmp_path / "srv" / "store"
    store.parent.mkdir()
    r = cli("import", bundle, "--trust", keys.trust, "--store", store)
    assert r.exit_code == 0, r.output
    return store


def run(store: Path, out: Path) -> tuple[int, str]:
    r = cli("store", "index", "--store", store, "--out", out)
    return r.exit_code, r.output


def test_an_out_that_is_holds_or_lies_inside_the_store_is_refused(store: Path, tmp_path: Path) -> None:
    before = tree(store)
    link = tmp_path / "link-to-store"
    link.symlink_to(store)
    up = tmp_path / "link-to-srv"
    up.symlink_to(store.parent)
    cases = {
        store: "is the store",
        store / "..": "holds the store",
        store.parent: "holds the store",
        tmp_path: "holds the store",
        store / "pypi": "lies inside the store",
        store / "blobs": "lies inside the store",
        store / "blobs" / "sha256" / "new": "lies inside the store",
        up / "store": "is the store",  # as resolved
        link / "pypi": "lies inside the store",
    }
    for out, where in cases.items():
        code, output = run(store, out)
        assert code == 1 and f"refused --out {out}: it {where} {store}" in output, (out, output)
        assert "TIP Give --out a new or empty directory outside the store" in output
        assert tree(store) == before, out  # nothing deleted, nothing added
    assert sorted(p.name for p in store.parent.iterdir()) == ["store"]  # no staging left beside it


def test_a_bind_mount_of_the_store_is_known_by_its_inode(store: Path, tmp_path: Path) -> None:
    """A path that names the store through a bind mount resolves elsewhere: the device and inode tell."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if subprocess.run(["mount", "--bind", str(store), str(mnt)], capture_output=True, check=False).returncode:
        pytest.skip("bind mounts need root (CAP_SYS_ADMIN)")
    try:
        before = tree(store)
        for out, where in ((mnt, "is the store"), (mnt / "pypi", "lies inside the store")):
            code, output = run(store, out)
            assert code == 1 and f"refused --out {out}: it {where}" in output, output
        inner = store / "tmp" / "holder"
        inner.mkdir()
        (mnt / "tmp" / "holder").rmdir()  # the same directory, named through the mount
        assert tree(store) == before
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def test_only_an_empty_directory_or_an_earlier_export_is_replaced(store: Path, tmp_path: Path) -> None:
    out = tmp_path / "pypi"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    (out / "data").mkdir()
    code, output = run(store, out)
    assert code == 1 and f"refused --out {out}: it holds 2 entries (data, notes.txt) and no {MARKER}" in output
    assert "TIP Give --out a new or empty directory" in output
    assert tree(out) == {"data": "dir", "notes.txt": b"mine"}
    # a marker that is a link to a file with the right text, or with other text, is no marker
    (tmp_path / "elsewhere").write_bytes(MARKER_TEXT)
    (out / MARKER).symlink_to(tmp_path / "elsewhere")
    assert run(store, out)[0] == 1
    (out / MARKER).unlink()
    (out / MARKER).write_bytes(MARKER_TEXT[:-1] + b"!")
    assert run(store, out)[0] == 1 and (out / "notes.txt").read_text() == "mine"

    empty = tmp_path / "empty"
    empty.mkdir()
    code, output = run(store, empty)
    assert code == 0, output
    assert (empty / MARKER).read_bytes() == MARKER_TEXT and (empty / "simple" / "index.html").is_file()
    (empty / "simple" / "stale.html").write_text("old")  # an earlier export is replaced whole
    assert run(store, empty)[0] == 0
    assert not (empty / "simple" / "stale.html").exists() and (empty / "files").is_dir()


def _partial(beside: Path) -> str:
    return f".{beside.name}.{os.urandom(8).hex()}.partial"


def test_a_killed_exports_partial_is_removed_by_the_next_run(store: Path, tmp_path: Path) -> None:
    out = tmp_path / "pypi"
    killed = (
        "import os, signal, sys\n"
        "from lockbuild.site import export\n"
        "def die(*a, **k):\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "export._fill = die\n"
        "from lockbuild.cli import main\n"
        "sys.argv = ['lockbuild', 'store', 'index', '--store', sys.argv[1], '--out', sys.argv[2]]\n"
        "main()\n"
    )
    proc = subprocess.run([sys.executable, "-c", killed, str(store), str(out)], capture_output=True, check=False)
    assert proc.returncode == -9, proc.stderr
    (left,) = [p for p in tmp_path.iterdir() if p.name.startswith(".pypi.")]
    assert left.name.endswith(".partial") and (left / MARKER).read_bytes() == MARKER_TEXT

    # look-alikes that are not the export's own, or not abandoned, stay
    users = tmp_path / _partial(out)
    users.mkdir()
    (users / "thesis.tex").write_text("mine")
    as_file = tmp_path / _partial(out)
    as_file.write_bytes(MARKER_TEXT)
    marked = tmp_path / "marked"
    marked.mkdir()
    (marked / MARKER).write_bytes(MARKER_TEXT)
    as_link = tmp_path / _partial(out)
    as_link.symlink_to(marked)
    running = tmp_path / _partial(out)
    running.mkdir()
    (running / MARKER).write_bytes(MARKER_TEXT)
    held = os.open(running, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(held, fcntl.LOCK_EX)  # an export still working in it
    other_name = tmp_path / f".other.{'a' * 16}.partial"
    other_name.mkdir()
    (other_name / MARKER).write_bytes(MARKER_TEXT)
    try:
        code, output = run(store, out)
        assert code == 0, output
    finally:
        os.close(held)
    assert not left.exists()
    assert (users / "thesis.tex").read_text() == "mine" and as_file.read_bytes() == MARKER_TEXT
    assert as_link.is_symlink() and (marked / MARKER).is_file()
    assert (running / MARKER).is_file() and (other_name / MARKER).is_file()
    assert json.loads(cli("store", "index", "--store", store, "--out", out, "--json").stdout)["files"] == 1
