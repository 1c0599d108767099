"""lockbuild's own bundle: built reproducibly from the running lockbuild's own files, checked
on the node with stock minisign, extracted with zstd and tar, and installed by its signed bootstrap.sh
with no network and no python on PATH, using the interpreter it carries; then it updates itself like any
engine."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import PY, Keys
from selfkit import repack, runtime_closure
from servers import FakeServer
from standalone import archive_name, make_tree, pack

from lockbuild import __version__
from lockbuild.cli import main

PBS = "astral-sh/python-build-standalone"
TAG = "20251014"
MINISIGN = shutil.which("minisign")
ZSTD = shutil.which("zstd")
pytestmark = pytest.mark.skipif(MINISIGN is None or ZSTD is None, reason="needs minisign and zstd")
UPLOADED = "2025-06-01T00:00:00Z"


def recipe_text(
    interpreter: str | None, *, name: str = "lockbuild", version: str = __version__, wheel: str = "{ self = true }"
) -> str:
    text = f'''\
[engine]
name = "{name}"
pypi = "lockbuild"
binary = "lockbuild"
verify = ["lockbuild", "--version"]

[[builds]]
version = "{version}"
variant = "py{PY.replace(".", "")}"
python = "{PY}"
platform = "x86_64-manylinux_2_34"
as-of = "2026-01-01T00:00:00Z"
requirements = ["lockbuild=={version}"]
wheel = {wheel}
'''
    if interpreter is not None:
        text += f'interpreter = {{ tag = "{TAG}", file = "{interpreter}" }}\n'
    return text


def cli(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return r.exit_code, r.stdout, r.stderr


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[FakeServer, str]]:
    """A local index with lockbuild's dependencies (as installed here) and a release of the packed CPython."""
    import datetime as dt

    s = FakeServer()
    when = dt.datetime.fromisoformat(UPLOADED)
    s.publish(*repack("uv", scripts=("uv",)), uploaded=when)
    for dist in runtime_closure():
        s.publish(*repack(dist), uploaded=when)
    top = make_tree(tmp_path_factory.mktemp("pbs"))
    name = archive_name(TAG)
    s.add_release(PBS, TAG, {name: pack(top)})
    yield s, name
    s.close()


def build(index: tuple[FakeServer, str], tmp: Path, keys: Keys, text: str, tag: str) -> tuple[int, str, str]:
    server, _ = index
    recipe = tmp / f"lockbuild-{tag}.toml"
    recipe.write_text(text)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LOCKBUILD_INDEX_URL", server.index_url())
        mp.setenv("LOCKBUILD_GITHUB_API", server.github_api)
        mp.setenv("LOCKBUILD_GITHUB_DOWNLOAD", server.github_download)
        mp.setenv("LOCKBUILD_CACHE_DIR", str(tmp / f"cache-{tag}"))  # each build from nothing
        return cli("build", str(recipe), "--key", str(keys.secret), "--out", str(tmp / f"dist-{tag}"), "--json")


@pytest.fixture(scope="module")
def bundles(index: tuple[FakeServer, str], keys: Keys, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """The self-bundle, built twice, each time with an empty cache."""
    tmp = tmp_path_factory.mktemp("selfbundle")
    out = []
    for tag in ("a", "b"):
        code, stdout, stderr = build(index, tmp, keys, recipe_text(index[1]), tag)
        assert code == 0, stderr
        out.append(Path(json.loads(stdout)["bundles"][0]["bundle"]))
    return out


def offline(argv: list[str]) -> list[str]:
    """``argv`` with no network: ``unshare -n`` as root, else bubblewrap's own network namespace."""
    unshare = shutil.which("unshare")
    if os.geteuid() == 0 and unshare and subprocess.run([unshare, "-n", "true"]).returncode == 0:
        return [unshare, "-n", *argv]
    bwrap = shutil.which("bwrap")
    if bwrap and subprocess.run([bwrap, "--dev-bind", "/", "/", "--unshare-net", "true"]).returncode == 0:
        return [bwrap, "--dev-bind", "/", "/", "--unshare-net", *argv]
    pytest.skip("no network namespace can be made here")


def extract(bundle: Path, dest: Path) -> Path:
    """Step 2 of the docs, verbatim: ``zstd -dc FILE.lbz | tar -x -C DIR``."""
    dest.mkdir()
    subprocess.run(f"zstd -dc '{bundle}' | tar -x -C '{dest}'", shell=True, check=True)
    return dest


# What a minimal node has: a shell, coreutils, tar, gzip, grep and sed; no python of any version.
NODE_TOOLS = (
    "sh",
    "sha256sum",
    "tar",
    "gzip",
    "mktemp",
    "mv",
    "rm",
    "mkdir",
    "chmod",
    "cat",
    "head",
    "grep",
    "sed",
    "dirname",
    "readlink",
    "realpath",
    "ls",
    "find",
    "id",
    "dd",
    "cut",
)


def node_path(base: Path) -> str:
    """A PATH of only NODE_TOOLS (links to this machine's), as on a node image with no Python."""
    bin_dir = base / "node-bin"
    if not bin_dir.exists():
        bin_dir.mkdir(parents=True)
        for tool in NODE_TOOLS:
            found = shutil.which(tool)
            assert found is not None, tool
            (bin_dir / tool).symlink_to(os.path.realpath(found))
    assert shutil.which("python3", path=str(bin_dir)) is None and shutil.which(f"python{PY}", path=str(bin_dir)) is None
    return str(bin_dir)


def bootstrap(extracted: Path, target: Path, home: Path) -> subprocess.CompletedProcess[str]:
    """Step 3: ``sh DIR/bootstrap.sh TARGET``, offline, with no python (any version) on PATH."""
    home.mkdir(exist_ok=True)
    (home / "tmp").mkdir(exist_ok=True)
    env = {"PATH": node_path(home.parent), "HOME": str(home), "TMPDIR": str(home / "tmp"), "LANG": "C.UTF-8"}
    return subprocess.run(
        offline(["sh", str(extracted / "bootstrap.sh"), str(target)]), capture_output=True, text=True, env=env
    )


def tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


# --- the builder -----------------------------------------------------------------------------------------


def test_the_self_bundle_is_byte_identical_when_built_twice_from_nothing(bundles: list[Path]) -> None:
    a, b = bundles
    assert a.name == f"lockbuild-{__version__}-py{PY.replace('.', '')}-x86_64-manylinux_2_34.lbz"
    assert hashlib.sha256(a.read_bytes()).hexdigest() == hashlib.sha256(b.read_bytes()).hexdigest()


def test_the_self_bundle_carries_lockbuild_its_lock_uv_the_interpreter_and_the_bootstrap(
    bundles: list[Path], index: tuple[FakeServer, str]
) -> None:
    code, text, _ = cli("inspect", str(bundles[0]), "--json")
    assert code == 0
    members = {m["path"]: m for m in json.loads(text)["files"]}
    wheel = f"wheels/lockbuild-{__version__}-py3-none-any.whl"
    assert members[wheel]["kind"] == "wheel" and members[wheel]["origin"] == ""
    assert members[f"python/{index[1]}"]["kind"] == "interpreter"
    assert members["bootstrap.sh"]["kind"] == members["SHA256SUMS"]["kind"] == "bootstrap"
    assert any(p.startswith("tools/uv-") for p in members)
    for dep in ("click", "httpx", "cryptography", "zstandard", "tomlkit", "packaging"):
        assert any(p.startswith(f"wheels/{dep}-") for p in members), dep


def test_the_recorded_recipe_pins_lockbuilds_own_wheel_by_its_sha256(bundles: list[Path], tmp_path: Path) -> None:
    unpacked = extract(bundles[0], tmp_path / "x")
    wheel = unpacked / "wheels" / f"lockbuild-{__version__}-py3-none-any.whl"
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert f'wheel = {{self = true, sha256 = "{sha}"}}' in (unpacked / "recipe.toml").read_text()
    assert f"--hash=sha256:{sha}" in (unpacked / "lock" / "requirements.txt").read_text()
    listed = dict(line.split("  ")[::-1] for line in (unpacked / "SHA256SUMS").read_text().splitlines())
    assert listed[f"wheels/{wheel.name}"] == sha and "bootstrap.sh" in listed and "bundle.toml" not in listed


def test_a_pin_that_this_lockbuild_does_not_make_is_refused(
    index: tuple[FakeServer, str], keys: Keys, tmp_path: Path
) -> None:
    code, _, stderr = build(
        index, tmp_path, keys, recipe_text(None, wheel=f'{{ self = true, sha256 = "{"0" * 64}" }}'), "pin"
    )
    assert code != 0
    assert f"pins lockbuild's own wheel to sha256 {'0' * 64}" in stderr and "Traceback" not in stderr
    assert not (tmp_path / "dist-pin").exists() or not list((tmp_path / "dist-pin").iterdir())


@pytest.mark.parametrize(("name", "version"), [("toyengine", __version__), ("lockbuild", "9.9.9")])
def test_only_lockbuild_at_the_running_version_takes_the_self_wheel(
    index: tuple[FakeServer, str], keys: Keys, tmp_path: Path, name: str, version: str
) -> None:
    code, _, stderr = build(index, tmp_path, keys, recipe_text(None, name=name, version=version), "other")
    assert code != 0
    assert f"at the running lockbuild's version, {__version__}; found the engine {name!r} at {version}" in stderr


# --- the node, with stock tools only ---------------------------------------------------------------------


def test_minisign_accepts_the_self_bundle_and_refuses_a_flipped_byte(
    bundles: list[Path], keys: Keys, tmp_path: Path
) -> None:
    ok = subprocess.run([MINISIGN, "-Vm", str(bundles[0]), "-p", str(keys.public)], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    bad = tmp_path / bundles[0].name
    data = bytearray(bundles[0].read_bytes())
    data[len(data) // 2] ^= 1
    bad.write_bytes(bytes(data))
    shutil.copy(f"{bundles[0]}.minisig", f"{bad}.minisig")
    refused = subprocess.run([MINISIGN, "-Vm", str(bad), "-p", str(keys.public)], capture_output=True, text=True)
    assert refused.returncode != 0 and "verification failed" in (refused.stdout + refused.stderr).lower()


@pytest.mark.slow
def test_the_bootstrap_installs_lockbuild_offline_with_no_python_on_path(
    bundles: list[Path], keys: Keys, tmp_path: Path
) -> None:
    extracted = extract(bundles[0], tmp_path / "x")
    parent = tmp_path / "opt"
    parent.mkdir()
    target = parent / "lockbuild"
    run = bootstrap(extracted, target, tmp_path / "home")
    assert run.returncode == 0, run.stderr
    assert f"installed lockbuild, version {__version__} at {target}" in run.stderr
    assert sorted(p.name for p in parent.iterdir()) == ["lockbuild"]  # no staging directory left
    assert tree(tmp_path / "home") == ["tmp"]  # nothing written to HOME or TMPDIR
    assert not [p for p in target.rglob("*") if ".uv-cache" in p.parts or ".tools" in p.parts]
    assert json.loads((target / "lockbuild.json").read_text())["lockbuild"] == __version__
    # the installed lockbuild runs from its own interpreter, and it verifies and installs offline
    env = {"PATH": node_path(tmp_path), "HOME": str(tmp_path / "home"), "LANG": "C.UTF-8"}
    version = subprocess.run([str(target / "bin" / "lockbuild"), "--version"], capture_output=True, text=True, env=env)
    assert version.stdout.strip() == f"lockbuild, version {__version__}"
    verify = subprocess.run(
        [str(target / "bin" / "lockbuild"), "verify", str(bundles[1]), "--trust", str(keys.trust)],
        capture_output=True,
        text=True,
        env=env,
    )
    assert verify.returncode == 0, verify.stderr
    engines = tmp_path / "engines"
    update = subprocess.run(
        offline(
            [
                str(target / "bin" / "lockbuild"),
                "install",
                str(bundles[1]),
                "--root",
                str(engines),
                "--trust",
                str(keys.trust),
                "--json",
            ]
        ),
        capture_output=True,
        text=True,
        env=env,
    )
    assert update.returncode == 0, update.stderr
    current = engines / "lockbuild" / f"{__version__}-py{PY.replace('.', '')}" / "bin" / "lockbuild"
    again = subprocess.run([str(current), "--version"], capture_output=True, text=True, env=env)
    assert again.stdout.strip() == f"lockbuild, version {__version__}"


def test_the_bootstrap_refuses_a_damaged_extraction_and_leaves_nothing(bundles: list[Path], tmp_path: Path) -> None:
    extracted = extract(bundles[0], tmp_path / "x")
    wheel = next((extracted / "wheels").glob("click-*.whl"))
    data = bytearray(wheel.read_bytes())
    data[100] ^= 1
    wheel.write_bytes(bytes(data))
    parent = tmp_path / "opt"
    parent.mkdir()
    run = bootstrap(extracted, parent / "lockbuild", tmp_path / "home")
    assert run.returncode == 1
    assert "does not match the bundle's signed list of members" in run.stderr
    assert f"wheels/{wheel.name}: FAILED" in run.stderr
    assert list(parent.iterdir()) == [] and tree(tmp_path / "home") == ["tmp"]


def test_the_bootstrap_refuses_an_existing_target_and_a_relative_one(bundles: list[Path], tmp_path: Path) -> None:
    extracted = extract(bundles[0], tmp_path / "x")
    (tmp_path / "opt").mkdir()
    (tmp_path / "opt" / "lockbuild").mkdir()
    run = bootstrap(extracted, tmp_path / "opt" / "lockbuild", tmp_path / "home")
    assert run.returncode == 1 and "exists already" in run.stderr and "lockbuild install" in run.stderr
    run = subprocess.run(
        ["sh", str(extracted / "bootstrap.sh"), "opt/lockbuild"], capture_output=True, text=True, cwd=tmp_path
    )
    assert run.returncode == 1 and "expected TARGET as an absolute path" in run.stderr
    for odd in (f"{tmp_path}/opt/../opt/lb", f"{tmp_path}/opt/a b", f"{tmp_path}/opt/$(id)"):
        run = subprocess.run(["sh", str(extracted / "bootstrap.sh"), odd], capture_output=True, text=True)
        assert run.returncode == 1 and "with no . or .. parts" in run.stderr, odd
    assert sorted(p.name for p in (tmp_path / "opt").iterdir()) == ["lockbuild"]


def test_a_failing_install_step_leaves_nothing(bundles: list[Path], tmp_path: Path) -> None:
    """The lock names a file the extraction lacks (both lists edited alike): uv refuses, nothing stays."""
    extracted = extract(bundles[0], tmp_path / "x")
    wheel = next((extracted / "wheels").glob("tomlkit-*.whl"))
    wheel.unlink()
    sums = extracted / "SHA256SUMS"
    sums.write_text("".join(line + "\n" for line in sums.read_text().splitlines() if "tomlkit-" not in line))
    parent = tmp_path / "opt"
    parent.mkdir()
    run = bootstrap(extracted, parent / "lockbuild", tmp_path / "home")
    assert run.returncode == 1 and "uv could not install the bundle's lock; nothing was installed" in run.stderr
    assert list(parent.iterdir()) == [] and tree(tmp_path / "home") == ["tmp"]


def test_the_bootstrap_script_is_posix_sh() -> None:
    from importlib.resources import files

    script = files("lockbuild.bundle").joinpath("bootstrap.sh")
    for sh in ("dash", "sh", "bash"):
        exe = shutil.which(sh)
        if exe is not None:
            check = subprocess.run([exe, "-n", str(script)], capture_output=True, text=True)
            assert check.returncode == 0, (sh, check.stderr)
    shellcheck = shutil.which("shellcheck")
    if shellcheck is not None:
        lint = subprocess.run([shellcheck, "-s", "sh", str(script)], capture_output=True, text=True)
        assert lint.returncode == 0, lint.stdout
    assert sys.version_info >= (3, 11)


# --- lockbuild's own wheel: the commit's files, never the work tree's ---------------------------------------


def _repo(tmp: Path, version: str = __version__) -> Path:
    root = tmp / "checkout"
    (root / "lockbuild").mkdir(parents=True)
    (root / "lockbuild" / "__init__.py").write_text('__version__ = "committed"\n')
    (root / "pyproject.toml").write_text(
        f'[project]\nname = "lockbuild"\nversion = "{version}"\nrequires-python = ">=3.11"\n'
        'dependencies = ["click>=8.1"]\n'
    )
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "c"], check=True)
    return root


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_the_self_wheel_holds_the_commits_files_not_stray_or_uncommitted_ones(tmp_path: Path) -> None:
    import datetime as dt
    import io
    import zipfile

    from lockbuild.builder.selfwheel import from_checkout, make_self_wheel

    root = _repo(tmp_path)
    when = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    clean = make_self_wheel(when, from_checkout(root))
    (root / "lockbuild" / "backdoor.py").write_text("import os\n")  # untracked
    (root / "lockbuild" / "__init__.py.orig").write_text("x\n")
    (root / "lockbuild" / "__init__.py").write_text('__version__ = "edited, not committed"\n')
    dirty = make_self_wheel(when, from_checkout(root))
    assert dirty.data == clean.data  # the same commit gives the same bytes, whatever the work tree holds
    names = zipfile.ZipFile(io.BytesIO(clean.data)).namelist()
    assert names[0] == "lockbuild/__init__.py" and not [n for n in names if "backdoor" in n or n.endswith(".orig")]
    assert zipfile.ZipFile(io.BytesIO(clean.data)).read("lockbuild/__init__.py") == b'__version__ = "committed"\n'
    meta = zipfile.ZipFile(io.BytesIO(clean.data)).read(f"lockbuild-{__version__}.dist-info/METADATA").decode()
    assert "Requires-Dist: click>=8.1" in meta  # the commit's pyproject.toml, not an installed copy's
    assert all(i.compress_type == zipfile.ZIP_STORED for i in zipfile.ZipFile(io.BytesIO(clean.data)).infolist())
    assert clean.made_from.startswith("commit ")


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_commit_of_another_version_is_refused(tmp_path: Path) -> None:
    from lockbuild.builder.selfwheel import from_checkout
    from lockbuild.errors import RecipeError

    root = _repo(tmp_path, version="9.9.9")
    with pytest.raises(RecipeError, match=f"'9.9.9', but the running lockbuild is {__version__}"):
        from_checkout(root)


@pytest.mark.parametrize("where", ["extraction", "parent"])
def test_the_bootstrap_refuses_a_directory_another_user_could_write(
    bundles: list[Path], tmp_path: Path, where: str
) -> None:
    """A group- or world-writable extraction could be changed between the check and the use; a parent
    writable by others lets them replace TARGET. Both are refused before anything is made."""
    extracted = extract(bundles[0], tmp_path / "x")
    parent = tmp_path / "opt"
    parent.mkdir()
    if where == "extraction":
        (extracted / "wheels").chmod(0o775)
        expected = "another user could change"
    else:
        parent.chmod(0o777)
        expected = "is writable by other users"
    run = bootstrap(extracted, parent / "lockbuild", tmp_path / "home")
    assert run.returncode == 1 and expected in run.stderr, run.stderr
    assert list(parent.iterdir()) == []


# --- the self wheel and the bootstrap are the commit's blobs, whatever git would apply on the way out -----

_GIT_ID = ["-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]


def _committed(root: Path, name: str) -> bytes:
    return subprocess.run(
        ["git", "--no-replace-objects", "-C", str(root), "cat-file", "blob", f"HEAD:{name}"],
        capture_output=True,
        check=True,
    ).stdout


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_the_self_wheel_holds_the_committed_blobs_whatever_the_checkouts_attributes_and_config_say(
    tmp_path: Path,
) -> None:
    """``git archive`` applies the checkout's own ``.git/info/attributes``: a ``filter.*.smudge`` from
    ``.git/config`` and ``export-subst`` rewrote modules of the signed wheel while HEAD and ``git status``
    stayed clean. So does a replace ref. The wheel holds the committed blobs, byte for byte."""
    import datetime as dt
    import io
    import zipfile

    from lockbuild.builder.selfwheel import from_checkout, make_self_wheel

    root = _repo(tmp_path)
    (root / "lockbuild" / "stamp.py").write_text('COMMIT = "$Format:%H$"\n')
    (root / "lockbuild" / "replaced.py").write_text('WHO = "committed"\n')
    git = ["git", "-C", str(root), *_GIT_ID]
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "more"], check=True)
    (root / ".git" / "info").mkdir(exist_ok=True)
    (root / ".git" / "info" / "attributes").write_text("*.py filter=x\nlockbuild/stamp.py export-subst\n")
    subprocess.run([*git, "config", "filter.x.smudge", "sed s/committed/rewritten/"], check=True)
    subprocess.run([*git, "config", "filter.x.clean", "cat"], check=True)
    evil = (
        subprocess.run(
            [*git, "hash-object", "-w", "--stdin"], input=b'WHO = "replaced"\n', capture_output=True, check=True
        )
        .stdout.decode()
        .strip()
    )
    blob = subprocess.run(
        [*git, "rev-parse", "HEAD:lockbuild/replaced.py"], capture_output=True, check=True, text=True
    ).stdout.strip()
    subprocess.run([*git, "replace", blob, evil], check=True)
    status = subprocess.run([*git, "status", "--porcelain"], capture_output=True, text=True, check=True).stdout
    assert status == ""  # the checkout looks clean
    archived = subprocess.run(
        [*git, "archive", "--format=tar", "HEAD", "--", "lockbuild"], capture_output=True, check=True
    ).stdout
    assert b"rewritten" in archived and b"$Format:%H$" not in archived  # what the old way shipped

    wheel = make_self_wheel(dt.datetime(2026, 1, 1, tzinfo=dt.UTC), from_checkout(root))
    with zipfile.ZipFile(io.BytesIO(wheel.data)) as zf:
        for name in ("lockbuild/__init__.py", "lockbuild/stamp.py", "lockbuild/replaced.py"):
            assert zf.read(name) == _committed(root, name), name
        assert zf.read("lockbuild/stamp.py") == b'COMMIT = "$Format:%H$"\n'
        assert zf.read("lockbuild/replaced.py") == b'WHO = "committed"\n'


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_the_bundles_bootstrap_is_the_commits_not_an_uncommitted_edit(
    index: tuple[FakeServer, str], keys: Keys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bootstrap came from the running lockbuild's package data (the work tree): an uncommitted edit of
    bootstrap.sh was signed and ran as root on the node. It comes out of the self wheel, the commit's."""
    from importlib.resources import files

    from lockbuild.builder import selfwheel

    root = _repo(tmp_path)
    real = Path(selfwheel.__file__).resolve().parents[2]
    (root / "pyproject.toml").write_text((real / "pyproject.toml").read_text())
    script = root / "lockbuild" / "bundle" / "bootstrap.sh"
    script.parent.mkdir()
    template = files("lockbuild.bundle").joinpath("bootstrap.sh").read_text()
    script.write_text(template + "# the committed bootstrap\n")
    git = ["git", "-C", str(root), *_GIT_ID]
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "bootstrap"], check=True)
    script.write_text(template + "# an uncommitted edit\n")
    monkeypatch.setattr(selfwheel, "own_contents", lambda: selfwheel.from_checkout(root))

    code, stdout, stderr = build(index, tmp_path, keys, recipe_text(None), "edited")
    assert code == 0, stderr
    unpacked = extract(Path(json.loads(stdout)["bundles"][0]["bundle"]), tmp_path / "x")
    shipped = (unpacked / "bootstrap.sh").read_text()
    assert shipped.endswith("# the committed bootstrap\n") and "uncommitted" not in shipped
    assert "@VERSION@" not in shipped and f"LOCKBUILD_VERSION='{__version__}'" in shipped


# --- the bootstrap reads nothing of DIR after it checked it --------------------------------------------------


def test_the_bootstrap_refuses_an_extraction_under_a_directory_another_user_can_write(
    bundles: list[Path], tmp_path: Path
) -> None:
    """DIR's own files may be safe, but a directory above it that another user can write (and that is not
    sticky) lets them rename DIR away and put their own extraction in its place after the checks: their uv
    would run as root. Refused, as --root is, before anything is made."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    extracted = extract(bundles[0], shared / "x")
    parent = tmp_path / "opt"
    parent.mkdir()
    run = bootstrap(extracted, parent / "lockbuild", tmp_path / "home")
    assert run.returncode == 1, run.stderr
    assert f"the extraction {extracted} sits in {shared}, which another user can write" in run.stderr
    assert list(parent.iterdir()) == []
    shared.chmod(0o1777)  # sticky, like /tmp: no one may rename another's entry
    run = bootstrap(extracted, parent / "lockbuild", tmp_path / "home")
    assert "which another user can write" not in run.stderr


def test_the_bootstrap_refuses_a_target_whose_parents_parent_another_user_can_write(
    bundles: list[Path], tmp_path: Path
) -> None:
    extracted = extract(bundles[0], tmp_path / "x")
    shared = tmp_path / "shared"
    (shared / "opt").mkdir(parents=True)
    shared.chmod(0o777)
    run = bootstrap(extracted, shared / "opt" / "lockbuild", tmp_path / "home")
    assert run.returncode == 1 and f"{shared} is writable by other users" in run.stderr, run.stderr
    assert list((shared / "opt").iterdir()) == []


@pytest.mark.slow
def test_the_bootstrap_installs_from_its_own_copy_not_from_dir_after_the_check(
    bundles: list[Path], tmp_path: Path
) -> None:
    """The attacker's move, made at the worst moment: DIR's files are replaced right as the bootstrap checks
    the members (a sha256sum that first rewrites DIR). The bootstrap checks and uses its own 0700 copy,
    made before, so what it installs is the signed lockbuild; reading DIR by path after the check, it ran
    (here: failed on) the attacker's files."""
    extracted = extract(bundles[0], tmp_path / "x")
    parent = tmp_path / "opt"
    parent.mkdir()
    node = node_path(tmp_path)
    spy = tmp_path / "spy-bin"
    spy.mkdir()
    real = os.path.realpath(shutil.which("sha256sum") or "sha256sum")
    swap = " ".join(f"'{p}'" for p in sorted((extracted / "wheels").glob("*.whl")))
    (spy / "sha256sum").write_text(
        f"#!/bin/sh\nfor f in {swap}; do printf 'swapped\\n' > \"$f\"; done\nexec '{real}' \"$@\"\n"
    )
    (spy / "sha256sum").chmod(0o755)
    home = tmp_path / "home"
    home.mkdir()
    (home / "tmp").mkdir()
    env = {"PATH": f"{spy}:{node}", "HOME": str(home), "TMPDIR": str(home / "tmp"), "LANG": "C.UTF-8"}
    target = parent / "lockbuild"
    run = subprocess.run(
        offline(["sh", str(extracted / "bootstrap.sh"), str(target)]), capture_output=True, text=True, env=env
    )
    assert all(p.read_bytes() == b"swapped\n" for p in (extracted / "wheels").glob("*.whl"))  # the swap happened
    assert run.returncode == 0, run.stderr
    assert sorted(p.name for p in parent.iterdir()) == ["lockbuild"] and not (target / ".bundle").exists()
    version = subprocess.run(
        [str(target / "bin" / "lockbuild"), "--version"],
        capture_output=True,
        text=True,
        env={"PATH": node, "LANG": "C.UTF-8"},
    )
    assert version.stdout.strip() == f"lockbuild, version {__version__}"


def test_the_bootstrap_refuses_an_interpreter_another_user_could_swap(bundles: list[Path], tmp_path: Path) -> None:
    """--python names a file that runs as the installing user (often root): in a directory another user can
    write, they could swap it between the check and the run. Refused before it is run."""
    extracted = extract(bundles[0], tmp_path / "x")
    parent = tmp_path / "opt"
    parent.mkdir()
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    fake = shared / f"python{PY}"
    ran = tmp_path / "ran"
    fake.write_text(f"#!/bin/sh\necho ran > '{ran}'\necho {PY}\n")
    fake.chmod(0o755)
    home = tmp_path / "home"
    home.mkdir()
    (home / "tmp").mkdir()
    env = {"PATH": node_path(tmp_path), "HOME": str(home), "TMPDIR": str(home / "tmp"), "LANG": "C.UTF-8"}
    run = subprocess.run(
        offline(["sh", str(extracted / "bootstrap.sh"), str(parent / "lockbuild"), "--python", str(fake)]),
        capture_output=True,
        text=True,
        env=env,
    )
    assert run.returncode == 1, run.stderr
    assert f"the interpreter {fake} ({fake}) is in or under {shared}, which another user can write" in run.stderr
    assert not ran.exists() and list(parent.iterdir()) == []


def test_the_bootstrap_refuses_an_interpreter_other_users_cannot_run_for_a_target_they_can_reach(
    bundles: list[Path], tmp_path: Path
) -> None:
    """root's PATH often names a pyenv build in root's 0700 home: a lockbuild made with it at a TARGET every
    user can reach would answer them "Permission denied". Refused, naming the fix, with nothing made."""
    import tempfile

    extracted = extract(bundles[0], tmp_path / "x")
    private = tmp_path / "private"  # not writable by others (the swap check passes), not enterable either
    private.mkdir(mode=0o700)
    fake = private / f"python{PY}"
    fake.write_text(f"#!/bin/sh\necho {PY}\n")
    fake.chmod(0o755)
    home = tmp_path / "home"
    home.mkdir()
    (home / "tmp").mkdir()
    env = {"PATH": node_path(tmp_path), "HOME": str(home), "TMPDIR": str(home / "tmp"), "LANG": "C.UTF-8"}
    open_parent = Path(tempfile.mkdtemp(prefix="lb-open-", dir="/tmp"))  # /tmp/X, 0755: others may enter
    try:
        open_parent.chmod(0o755)
        run = subprocess.run(
            offline(["sh", str(extracted / "bootstrap.sh"), str(open_parent / "lockbuild"), "--python", str(fake)]),
            capture_output=True,
            text=True,
            env=env,
        )
        assert run.returncode == 1, run.stderr
        assert f"the interpreter {fake} ({fake}) lies under a directory other users cannot enter" in run.stderr
        assert f"--python /usr/bin/python{PY}" in run.stderr
        assert list(open_parent.iterdir()) == []
    finally:
        shutil.rmtree(open_parent)


def test_after_its_copy_the_bootstrap_names_dir_only_in_messages() -> None:
    """The structural half of the copy: once the extraction is copied, every command of the script reads
    the copy ($here, inside its own 0700 staging directory); DIR appears only in what it says."""
    from importlib.resources import files

    lines = files("lockbuild.bundle").joinpath("bootstrap.sh").read_text().splitlines()
    copy = next(i for i, line in enumerate(lines) if "tar -cf - ." in line)
    assert lines[copy].startswith('(cd "$dir" && tar -cf - .)')
    uses = [
        f"{i + 1}: {line}"
        for i, line in enumerate(lines[copy + 1 :], copy + 1)
        if "$dir" in line and not line.lstrip().startswith(("die ", "say ", "|| die ", '[ -z "$odd" ] || die ', "#"))
    ]
    assert uses == []
    assert "here=$stage/.bundle" in lines[:copy]


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_blob_that_does_not_hash_to_its_id_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever git answers (a patched git, an object store edited in place), each blob is hashed again
    against the id the commit names: other bytes are refused, never shipped."""
    from lockbuild.builder.selfwheel import from_checkout
    from lockbuild.errors import RecipeError

    root = _repo(tmp_path)
    real = shutil.which("git")
    fake = tmp_path / "bin" / "git"
    fake.parent.mkdir()
    fake.write_text(
        f'#!/bin/sh\ncase " $* " in *" cat-file "*) \'{real}\' "$@" | sed s/committed/COMMITTED/ ;;\n'
        f"*) exec '{real}' \"$@\" ;; esac\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    with pytest.raises(RecipeError, match=r"lockbuild/__init__\.py of commit .* does not hash to its blob id"):
        from_checkout(root)


def test_a_checkout_that_moves_during_the_build_stops_it(
    index: tuple[FakeServer, str], keys: Keys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bootstrap is read out of the self wheel made again at packing time; when that is not the wheel
    the lock pins (the checkout moved to another commit), the bootstrap of one commit would ship with the
    wheel of another: the build stops instead."""
    import dataclasses

    from lockbuild.builder import selfwheel

    first = selfwheel.own_contents()
    moved = dataclasses.replace(
        first, files=tuple((n, d + b"# moved\n" if n == "lockbuild/__init__.py" else d) for n, d in first.files)
    )
    made = iter([first, moved])
    monkeypatch.setattr(selfwheel, "own_contents", lambda: next(made))
    code, _, stderr = build(index, tmp_path, keys, recipe_text(None), "moved")
    assert code == 4, stderr
    assert "The checkout changed while the bundle was built" in stderr and "Traceback" not in stderr
    assert not (tmp_path / "dist-moved").exists() or not list((tmp_path / "dist-moved").iterdir())
