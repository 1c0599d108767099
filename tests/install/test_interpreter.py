"""A bundle that carries its own Python: fetched only with the digest its release publishes,
checked to be the build's X.Y, and on the node shared under <root>/.python/<sha256>/ by every engine
whose bundle carries the same file."""

from __future__ import annotations

import gzip
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import PY, TOY_RECIPE, Keys, install_in_sandbox, no_python_path
from servers import FakeServer
from standalone import archive_name, make_tree, pack, runs_from

from lockbuild.cli import main
from lockbuild.errors import IntegrityError
from lockbuild.install import archives
from lockbuild.recipe import parse_recipe

PBS = "astral-sh/python-build-standalone"
TAG = "20251014"


def cli(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return r.exit_code, r.stdout, r.stderr


def with_interpreter(text: str, file: str, tag: str = TAG, name: str | None = None) -> str:
    if name is not None:
        text = text.replace('name = "toyengine"', f'name = "{name}"', 1)
    return text + f'interpreter = {{ tag = "{tag}", file = "{file}" }}\n'


def build(recipe_text: str, tmp: Path, keys: Keys, name: str) -> tuple[int, str, str]:
    recipe = tmp / f"{name}.toml"
    recipe.write_text(recipe_text)
    return cli("build", str(recipe), "--key", str(keys.secret), "--out", str(tmp / f"dist-{name}"), "--json")


def tiny_tar(members: dict[str, bytes]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755
            tf.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue(), mtime=0)


@pytest.fixture(scope="session")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, bytes]:
    """This machine's Python, copied into a python-build-standalone shaped tree and packed."""
    tree = tmp_path_factory.mktemp("pbs")
    top = make_tree(tree)
    assert runs_from(top) == str(top)  # the copy runs from its own directory, with its own stdlib
    return archive_name(TAG), pack(top)


@pytest.fixture(scope="module")
def py_bundles(
    server: FakeServer, keys: Keys, standalone: tuple[str, bytes], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Path]]:
    """Two engines (toyengine and toytwin) whose bundles carry the same interpreter archive."""
    name, data = standalone
    server.add_release(PBS, TAG, {name: data})
    tmp = tmp_path_factory.mktemp("pybundles")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LOCKBUILD_INDEX_URL", server.index_url())
        mp.setenv("LOCKBUILD_GITHUB_API", server.github_api)
        mp.setenv("LOCKBUILD_GITHUB_DOWNLOAD", server.github_download)
        mp.setenv("LOCKBUILD_CACHE_DIR", str(tmp / "cache"))
        out = {}
        for engine in ("toyengine", "toytwin"):
            code, stdout, stderr = build(with_interpreter(TOY_RECIPE, name, name=engine), tmp, keys, engine)
            assert code == 0, stderr
            out[engine] = Path(json.loads(stdout)["bundles"][0]["bundle"])
        yield out


def offline_install(bundle: Path, root: Path, keys: Keys) -> subprocess.CompletedProcess[str]:
    """``lockbuild install`` with no --python, no python<X.Y> on PATH, and no network: in ``unshare -n`` as
    root, else in lockbuild's sandbox (a user namespace made by ``unshare -rn`` would show root's
    directories above --root as uid 65534, which the installer rightly refuses)."""
    env = {"PATH": no_python_path(), "HOME": str(root.parent), "LANG": "C.UTF-8"}
    argv = [
        sys.executable,
        "-m",
        "lockbuild",
        "install",
        str(bundle),
        "--root",
        str(root),
        "--trust",
        str(keys.trust),
        "--json",
    ]
    unshare = shutil.which("unshare")
    if os.geteuid() == 0 and unshare is not None and subprocess.run([unshare, "-n", "true"]).returncode == 0:
        return subprocess.run([unshare, "-n", *argv], capture_output=True, text=True, env=env)
    from lockbuild.proc import sandbox

    try:
        sandbox.check_available()
    except sandbox.SandboxError as exc:
        pytest.skip(f"no network namespace here: {exc.message}")
    return install_in_sandbox(bundle, root, keys.trust, writable=root.parent, env=env)


def engine_runs(env_dir: Path) -> str:
    out = subprocess.run(
        [str(env_dir / "bin" / "toyengine"), "--version"], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"}
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def base_prefix(env_dir: Path) -> str:
    return subprocess.run(
        [str(env_dir / "bin" / "python"), "-c", "import sys; print(sys.base_prefix)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


# --- the builder ---------------------------------------------------------------------------------------


def test_recipe_interpreter_of_another_python_is_refused() -> None:
    other = "cpython-3.9.20+20251014-x86_64-unknown-linux-gnu-install_only.tar.gz"
    with pytest.raises(Exception, match=r"interpreter\.file: expected an interpreter for the build's Python"):
        parse_recipe(with_interpreter(TOY_RECIPE, other))
    r = parse_recipe(with_interpreter(TOY_RECIPE, archive_name()))
    assert r.builds[0].interpreter is not None and r.builds[0].interpreter.repo == PBS


def test_build_refuses_an_archive_holding_another_python(env: FakeServer, keys: Keys, tmp_path: Path) -> None:
    """The name says 3.X, the archive holds python3.9: read from the archive's entries, refused at build time."""
    name = archive_name("20990101")
    env.add_release(PBS, "20990101", {name: tiny_tar({"python/bin/python3.9": b"#!/bin/sh\n"})})
    code, _, stderr = build(with_interpreter(TOY_RECIPE, name, tag="20990101"), tmp_path, keys, "wrong")
    assert code != 0
    assert f"is not Python {PY}" in stderr and "found 3.9" in stderr
    assert not list((tmp_path / "dist-wrong").glob("*.lbz")) if (tmp_path / "dist-wrong").exists() else True


def test_build_refuses_an_interpreter_without_a_published_digest(env: FakeServer, keys: Keys, tmp_path: Path) -> None:
    name = archive_name("20990102")
    data = tiny_tar({f"python/bin/python{PY}": b"#!/bin/sh\n"})
    env.add_release(PBS, "20990102", {name: data}, digests={name: None})
    code, _, stderr = build(with_interpreter(TOY_RECIPE, name, tag="20990102"), tmp_path, keys, "nodigest")
    assert code != 0 and "publishes no digest" in stderr


def test_the_bundle_carries_the_interpreter_as_a_signed_member(
    py_bundles: dict[str, Path], standalone: tuple[str, bytes]
) -> None:
    import hashlib

    name, data = standalone
    code, stdout, _ = cli("inspect", str(py_bundles["toyengine"]), "--json")
    assert code == 0
    report = json.loads(stdout)
    member = next(f for f in report["files"] if f["kind"] == "interpreter")
    assert member["path"] == f"python/{name}" and member["sha256"] == hashlib.sha256(data).hexdigest()
    assert member["origin"].endswith(f"/{PBS}/releases/download/{TAG}/{name}")
    assert report["install"]["interpreter"] == member["path"]
    code, text, _ = cli("inspect", str(py_bundles["toyengine"]))
    assert f"interpreter: Python {PY}, python/{name}" in text


# --- the node --------------------------------------------------------------------------------------------


def test_a_node_without_that_python_installs_and_runs_the_engine_offline(
    py_bundles: dict[str, Path], keys: Keys, tmp_path: Path
) -> None:
    root = tmp_path / "engines"
    proc = offline_install(py_bundles["toyengine"], root, keys)
    assert proc.returncode == 0, proc.stderr
    env_dir = root / "toyengine" / "1.0-cpu"
    assert engine_runs(env_dir) == "toyengine 1.0"
    (shared,) = [p for p in (root / ".python").iterdir() if p.is_dir()]
    assert base_prefix(env_dir) == str(shared / "python")  # the venv stands on the bundle's Python
    _, stdout, _ = cli("doctor", "--root", str(root), "--trust", str(keys.trust), "--json")
    (entry,) = json.loads(stdout)["installed"]
    assert entry["python"]["bundled_sha256"] == shared.name


def test_an_interpreter_shared_by_two_engines_survives_the_removal_of_one(
    py_bundles: dict[str, Path], keys: Keys, tmp_path: Path
) -> None:
    root = tmp_path / "engines"
    for engine in ("toyengine", "toytwin"):
        proc = offline_install(py_bundles[engine], root, keys)
        assert proc.returncode == 0, proc.stderr
    shared = [p for p in (root / ".python").iterdir() if p.is_dir()]
    assert len(shared) == 1  # one copy, placed once
    code, _, stderr = cli("remove", "toyengine", "1.0-cpu", "--root", str(root))
    assert code == 0, stderr
    assert shared[0].is_dir()
    assert engine_runs(root / "toytwin" / "1.0-cpu") == "toyengine 1.0"
    code, _, stderr = cli("remove", "toytwin", "1.0-cpu", "--root", str(root))
    assert code == 0, stderr
    assert not shared[0].exists()  # the last user is gone: the interpreter is collected


def test_python_flag_wins_over_the_bundled_interpreter(py_bundles: dict[str, Path], keys: Keys, tmp_path: Path) -> None:
    root = tmp_path / "engines"
    code, _, stderr = cli(
        "install",
        str(py_bundles["toyengine"]),
        "--root",
        str(root),
        "--trust",
        str(keys.trust),
        "--python",
        sys.executable,
    )
    assert code == 0, stderr
    assert not (root / ".python").exists()
    assert base_prefix(root / "toyengine" / "1.0-cpu") == sys.base_prefix


# --- the extraction ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("target", ["../../etc/passwd", "/bin/sh", "sub/python3.11", ".."])
def test_an_interpreter_archive_may_link_only_to_a_sibling(tmp_path: Path, target: str) -> None:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tf:
        info = tarfile.TarInfo("python/bin/python3")
        info.type, info.linkname = tarfile.SYMTYPE, target
        tf.addfile(info)
    archive = tmp_path / "p.tar"
    archive.write_bytes(raw.getvalue())
    with pytest.raises(IntegrityError, match="refused entry"):
        archives.unpack_archive(archive, tmp_path / "out", sibling_links=True)
    assert not os.path.lexists(tmp_path / "out" / "python" / "bin" / "python3")


def test_a_sibling_link_is_made_after_the_files_and_never_written_through(tmp_path: Path) -> None:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tf:
        link = tarfile.TarInfo("python/bin/python3")
        link.type, link.linkname = tarfile.SYMTYPE, "python3.11"
        tf.addfile(link)
        f = tarfile.TarInfo("python/bin/python3.11")
        f.size = 2
        tf.addfile(f, io.BytesIO(b"ok"))
        again = tarfile.TarInfo("python/bin/python3")  # a file of the link's name: a collision, refused
        again.size = 1
        tf.addfile(again, io.BytesIO(b"x"))
    archive = tmp_path / "p.tar"
    archive.write_bytes(raw.getvalue())
    with pytest.raises(IntegrityError, match="collides"):
        archives.unpack_archive(archive, tmp_path / "out", sibling_links=True)
    assert (tmp_path / "out" / "python" / "bin" / "python3.11").read_bytes() == b"ok"


def test_an_environment_is_known_to_use_its_interpreter_through_a_linked_root(tmp_path: Path) -> None:
    """remove's collection must see the use whichever way the root is spelled (else it deletes a used one)."""
    from lockbuild.install.pythons import shared_python

    real = tmp_path / "data" / "engines"
    sha = "a" * 64
    env_dir = real / "e" / "1-cpu"
    env_dir.mkdir(parents=True)
    (tmp_path / "opt").symlink_to(tmp_path / "data")
    linked = tmp_path / "opt" / "engines"
    (env_dir / "pyvenv.cfg").write_text(f"home = {real}/.python/{sha}/python/bin\n")
    assert shared_python(linked, env_dir) == sha
    (env_dir / "pyvenv.cfg").write_text(f"home = {linked}/.python/{sha}/python/bin\n")
    assert shared_python(real, env_dir) == sha


# --- which interpreter an install picks, and who can run it ------------------------------------------------
@pytest.fixture
def open_root() -> Iterator[Path]:
    """A --root that every user can reach (/tmp/…, 0755 all the way up), unlike pytest's 0700 tmp_path."""
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="lockbuild-open-", dir="/tmp"))
    base.chmod(0o755)
    try:
        yield base / "engines"
    finally:
        shutil.rmtree(base, ignore_errors=True)


def private_python(tmp_path: Path) -> Path:
    """A working python<X.Y> under a directory only its owner may enter (a pyenv build under /root)."""
    home = tmp_path / "home"
    (home / "bin").mkdir(parents=True)
    home.chmod(0o700)
    exe = home / "bin" / f"python{PY}"
    exe.symlink_to(sys.executable)
    return exe


def test_an_interpreter_others_cannot_reach_is_refused_for_an_environment_they_can(
    py_bundles: dict[str, Path], keys: Keys, tmp_path: Path, open_root: Path
) -> None:
    exe = private_python(tmp_path)
    code, _, stderr = cli(
        "install",
        str(py_bundles["toyengine"]),
        "--root",
        str(open_root),
        "--trust",
        str(keys.trust),
        "--python",
        str(exe),
    )
    assert code == 1, stderr
    assert f"the interpreter {exe} (from --python) is not usable by everyone who can use" in stderr
    assert f"other users cannot enter {tmp_path / 'home'} (mode 0700)" in stderr
    assert f"TIP Pass --python /usr/bin/python{PY}" in stderr and "carries its own interpreter" in stderr
    assert not (open_root / "toyengine" / "1.0-cpu").exists()


def test_a_private_interpreter_is_fine_for_an_environment_only_its_owner_can_reach(
    py_bundles: dict[str, Path], keys: Keys, tmp_path: Path
) -> None:
    root = tmp_path / "engines"  # under pytest's 0700 directories: nobody else can use it either
    code, stdout, stderr = cli(
        "install",
        str(py_bundles["toyengine"]),
        "--root",
        str(root),
        "--trust",
        str(keys.trust),
        "--python",
        str(private_python(tmp_path)),
        "--json",
    )
    assert code == 0, stderr
    assert json.loads(stdout)["python"]["from"] == "--python"


@pytest.mark.skipif(not Path(f"/usr/bin/python{PY}").is_file(), reason=f"no /usr/bin/python{PY} here")
def test_the_result_names_the_interpreter_and_where_it_came_from(
    py_bundles: dict[str, Path], keys: Keys, open_root: Path
) -> None:
    system = f"/usr/bin/python{PY}"
    code, stdout, stderr = cli(
        "install",
        str(py_bundles["toyengine"]),
        "--root",
        str(open_root),
        "--trust",
        str(keys.trust),
        "--python",
        system,
    )
    assert code == 0, stderr
    assert f"\n  python: {system} (from --python)" in stdout
    code, stdout, stderr = cli(
        "install", str(py_bundles["toytwin"]), "--root", str(open_root), "--trust", str(keys.trust), "--json"
    )
    assert code == 0, stderr
    got = json.loads(stdout)["python"]
    assert got["from"] == "bundle" and got["path"].startswith(str(open_root / ".python"))
    assert Path(got["path"]).is_file()


def test_a_system_interpreter_is_preferred_to_one_elsewhere_on_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lockbuild.install import tools

    elsewhere = private_python(tmp_path)
    system = tmp_path / "usr-bin"
    system.mkdir()
    (system / f"python{PY}").symlink_to(sys.executable)
    monkeypatch.setattr(tools, "SYSTEM_DIRS", (tmp_path / "absent", system))
    found = tools.locate_python(PY, None, path=str(elsewhere.parent))
    assert (found.path, found.origin, found.warning) == (system / f"python{PY}", "system", None)
    monkeypatch.setattr(tools, "SYSTEM_DIRS", (tmp_path / "absent",))
    found = tools.locate_python(PY, None, path=str(elsewhere.parent))
    assert found.path == elsewhere and found.origin == "PATH"
    assert found.warning is not None and "not in /usr/bin or /usr/local/bin" in found.warning
    assert f"--python {elsewhere}" in found.warning


def test_an_interpreter_found_elsewhere_on_path_is_warned_about(
    py_bundles: dict[str, Path], keys: Keys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lockbuild.install import installer, tools

    def from_path(want: str, _explicit: object) -> tools.FoundPython:
        return tools.FoundPython(Path(sys.executable), "PATH", "using it: it was found on PATH")

    monkeypatch.setattr(installer, "locate_python", from_path)
    code, stdout, stderr = cli(
        "install",
        str(py_bundles["toyengine"]),
        "--root",
        str(tmp_path / "engines"),
        "--trust",
        str(keys.trust),
        "--python",
        sys.executable,
    )
    assert code == 0, stderr
    assert "warning: using it: it was found on PATH" in stderr and f"python: {sys.executable} (from PATH)" in stdout


def test_an_image_refuses_an_interpreter_outside_it_that_others_cannot_run(
    py_bundles: dict[str, Path], keys: Keys, tmp_path: Path
) -> None:
    exe = private_python(tmp_path)
    code, _, stderr = cli(
        "image",
        str(py_bundles["toyengine"]),
        "--prefix",
        "/opt/engines/toy",
        "--trust",
        str(keys.trust),
        "--python",
        str(exe),
        "--out",
        str(tmp_path / "toy.sqfs"),
    )
    assert code == 1, stderr
    assert f"the interpreter {exe} (from --python) is not usable by everyone who can use the image" in stderr
    assert not (tmp_path / "toy.sqfs").exists()
