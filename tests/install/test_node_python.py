"""The node's interpreter follows --root's rule, as named and on every link of its way: the installer
(``install/tools.py::locate_python``, ``fsio.program_problem``) and the bootstrap (``bootstrap.sh``'s
``program_problem``) refuse one another user could swap before it runs, and give the same verdict on the
same tree. Run as root (a directory chowned to uid 65534) and as uid 65534 (scripts/test-as-nobody)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import PY, make_keys
from sitekit import make_bundle

import lockbuild
from lockbuild.errors import InstallError
from lockbuild.install import tools
from lockbuild.install.tools import locate_python

OTHER = 65534  # another user, as root makes one (nobody)
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="making a file of another user's needs root")
BOOTSTRAP = Path(lockbuild.__file__).parent / "bundle" / "bootstrap.sh"


def fake_python(path: Path, ran: Path) -> Path:
    """An executable that says it is Python PY and leaves ``ran`` behind when it runs."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho ran > '{ran}'\necho {PY}\n")
    path.chmod(0o755)
    return path


def _dir(path: Path, mode: int = 0o755, owner: int | None = None) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(mode)
    if owner is not None:
        os.chown(path, owner, owner)
    return path


# Each case makes a tree under tmp and returns (the path to name, the place the refusal must name or None).
Case = Callable[[Path, Path], tuple[Path, Path | None]]


def safe_named(tmp: Path, ran: Path) -> tuple[Path, Path | None]:
    real = fake_python(_dir(tmp / "opt" / "py" / "bin") / f"python{PY}", ran)
    link = _dir(tmp / "usr-local-bin") / f"python{PY}"
    link.symlink_to(os.path.relpath(real, link.parent))
    return link, None


def world_writable_dir(tmp: Path, ran: Path) -> tuple[Path, Path | None]:
    shared = _dir(tmp / "shared", 0o777)  # not sticky: anyone may rename the interpreter away
    return fake_python(shared / "bin" / f"python{PY}", ran), shared


def group_writable_file(tmp: Path, ran: Path) -> tuple[Path, Path | None]:
    exe = fake_python(_dir(tmp / "bin") / f"python{PY}", ran)
    exe.chmod(0o775)
    return exe, exe


def link_through_a_shared_dir(tmp: Path, ran: Path) -> tuple[Path, Path | None]:
    """Named and resolved in safe places; the link in the middle lies where anyone may replace it."""
    real = fake_python(_dir(tmp / "opt" / "bin") / f"python{PY}", ran)
    shared = _dir(tmp / "shared", 0o777)
    (shared / "py").symlink_to(real)
    named = _dir(tmp / "usr-local-bin") / f"python{PY}"
    named.symlink_to(shared / "py")
    return named, shared


def dir_of_another_user(tmp: Path, ran: Path) -> tuple[Path, Path | None]:
    home = _dir(tmp / "home" / "other", owner=OTHER)
    return fake_python(home / "bin" / f"python{PY}", ran), home


def system_link_into_another_users_home(tmp: Path, ran: Path) -> tuple[Path, Path | None]:
    home = _dir(tmp / "home" / "other", owner=OTHER)
    real = fake_python(home / ".pyenv" / "bin" / f"python{PY}", ran)
    link = _dir(tmp / "usr-local-bin") / f"python{PY}"
    link.symlink_to(real)
    return link, home


def middle_link_in_another_users_dir(tmp: Path, ran: Path) -> tuple[Path, Path | None]:
    real = fake_python(_dir(tmp / "opt" / "bin") / f"python{PY}", ran)
    home = _dir(tmp / "home" / "other", owner=OTHER)
    (home / "py").symlink_to(real)
    named = _dir(tmp / "usr-local-bin") / f"python{PY}"
    named.symlink_to(home / "py")
    return named, home


def link_of_another_user_in_a_sticky_dir(tmp: Path, ran: Path) -> tuple[Path, Path | None]:
    real = fake_python(_dir(tmp / "opt" / "bin") / f"python{PY}", ran)
    sticky = _dir(tmp / "sticky", 0o1777)  # like /tmp: only an entry's owner may replace it
    link = sticky / f"python{PY}"
    link.symlink_to(real)
    os.chown(link, OTHER, OTHER, follow_symlinks=False)
    return link, link


def file_of_another_user(tmp: Path, ran: Path) -> tuple[Path, Path | None]:
    exe = fake_python(_dir(tmp / "bin") / f"python{PY}", ran)
    os.chown(exe, OTHER, OTHER)
    return exe, exe


CASES: list[object] = [
    safe_named,
    world_writable_dir,
    group_writable_file,
    link_through_a_shared_dir,
    pytest.param(dir_of_another_user, marks=as_root),
    pytest.param(system_link_into_another_users_home, marks=as_root),
    pytest.param(middle_link_in_another_users_dir, marks=as_root),
    pytest.param(link_of_another_user_in_a_sticky_dir, marks=as_root),
    pytest.param(file_of_another_user, marks=as_root),
]


@pytest.mark.parametrize("case", CASES)
def test_the_installer_refuses_an_interpreter_another_user_could_swap(case: Case, tmp_path: Path) -> None:
    tmp = _dir(tmp_path / "t")
    ran = tmp_path / "ran"
    named, unsafe = case(tmp, ran)
    if unsafe is None:
        assert locate_python(PY, named).path == named and ran.exists()
        return
    with pytest.raises(InstallError) as got:
        locate_python(PY, named)
    assert f"refused the interpreter {named} (from --python): {unsafe}, on its way" in got.value.message
    assert "so another user could swap the interpreter" in got.value.message
    assert f"such as /usr/bin/python{PY}" in (got.value.tip or "")
    assert not ran.exists()  # refused before it ran


@pytest.mark.parametrize("case", CASES)
def test_the_bootstrap_gives_the_same_verdict(case: Case, tmp_path: Path) -> None:
    """bootstrap.sh's rule, run on its own (the block between its markers), names the same place."""
    text = BOOTSTRAP.read_text()
    block = text[text.index("# --- the ownership rules") : text.index("# --- the ownership rules: end")]
    tmp = _dir(tmp_path / "t")
    named, unsafe = case(tmp, tmp_path / "ran")
    got = subprocess.run(
        ["sh", "-c", block + 'program_problem "$1"', "sh", str(named)], capture_output=True, text=True, check=True
    )
    assert got.stdout == (str(unsafe) if unsafe else ""), got.stderr


@as_root
def test_the_system_interpreter_linking_into_another_users_home_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """/usr/local/bin/pythonX.Y (found, not named) linking into a home of another user's."""
    named, home = system_link_into_another_users_home(_dir(tmp_path / "t"), tmp_path / "ran")
    monkeypatch.setattr(tools, "SYSTEM_DIRS", (named.parent,))
    with pytest.raises(InstallError, match=rf"refused the interpreter {named} \(from system\): {home}, on its way"):
        locate_python(PY, None)
    assert not (tmp_path / "ran").exists()


def test_install_refuses_it_before_anything_is_made(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from lockbuild.cli import main

    keys = make_keys(tmp_path / "k")
    bundle = make_bundle(tmp_path / "b", [keys.secret])
    named, shared = world_writable_dir(_dir(tmp_path / "t"), tmp_path / "ran")
    root = tmp_path / "engines"
    argv = ["install", str(bundle), "--root", str(root), "--trust", str(keys.trust), "--python", str(named)]
    r = CliRunner().invoke(main, argv)
    assert r.exit_code == InstallError.exit_code, r.output
    assert f"ERROR refused the interpreter {named} (from --python): {shared}, on its way" in r.output
    assert "is writable by its group or by others and not sticky (mode 0777)" in r.output
    assert "and the environment's pyvenv.cfg would name it" in r.output
    assert not root.exists() and not (tmp_path / "ran").exists()
