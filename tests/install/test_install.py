"""The offline installer: every refusal leaves the previous environment untouched and nothing behind."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import PLATFORM, PY, TOY_RECIPE, Keys, build_on_node_recipe, day
from servers import FakeServer, make_wheel

from lockbuild.bundle.instructions import AssetPlace, InstallTable
from lockbuild.bundle.manifest import Manifest, Member
from lockbuild.cli import main
from lockbuild.errors import BusyError, InstallError
from lockbuild.install.swap import engine_lock
from lockbuild.progress import Progress

TORCH_STUB = """\
class _Cuda:
    @staticmethod
    def is_available():
        return True

    @staticmethod
    def get_device_name(i):
        return "Fake GPU"

    @staticmethod
    def get_device_capability(i):
        return (9, 0)


cuda = _Cuda()


def ones(n, device=None):
    raise RuntimeError("CUDA error: no kernel image is available for execution on the device")
"""


def cli(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)
    return r.exit_code, r.stdout, r.stderr


def build(recipe_text: str, tmp: Path, keys: Keys, name: str = "r") -> Path:
    recipe = tmp / f"{name}.toml"
    recipe.write_text(recipe_text)
    out = tmp / f"dist-{name}"
    code, stdout, stderr = cli("build", str(recipe), "--key", str(keys.secret), "--out", str(out), "--json")
    assert code == 0, stderr
    return Path(json.loads(stdout)["bundles"][0]["bundle"])


@pytest.fixture(scope="module")
def bundles(server: FakeServer, keys: Keys, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """Bundles built once for this module: the toy engine as of day 6 and day 25, and variants."""
    server.publish(*make_wheel("torch", "2.0", modules={"torch/__init__.py": TORCH_STUB}), uploaded=day(1))
    tmp = tmp_path_factory.mktemp("bundles")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LOCKBUILD_INDEX_URL", server.index_url())
        mp.setenv("LOCKBUILD_CACHE_DIR", str(tmp / "cache"))
        later = TOY_RECIPE + 'as-of = "2025-01-25T00:00:00Z"\n'
        probe = TOY_RECIPE.replace(
            'requirements = ["toyengine==1.0"]', 'requirements = ["toyengine==1.0", "torch==2.0"]'
        )
        probe = probe.replace('variant = "cpu"', 'variant = "cu999"')
        failing = TOY_RECIPE.replace('verify = ["toyengine", "--version"]', 'verify = ["toyengine", "--fail"]')
        failing = failing.replace('variant = "cpu"', 'variant = "bad"')
        big = TOY_RECIPE.replace('variant = "cpu"', 'variant = "big"') + "free-gb = 99999\n"
        gpu = TOY_RECIPE.replace('variant = "cpu"', 'variant = "cu130"') + (
            'gpu = { min-capability = "8.0", min-driver = "580" }\n'
        )
        yield {
            "v1": build(TOY_RECIPE, tmp, keys, "v1"),
            "v2": build(later, tmp, keys, "v2"),
            "probe": build(probe, tmp, keys, "probe"),
            "failing": build(failing, tmp, keys, "failing"),
            "big": build(big, tmp, keys, "big"),
            "gpu": build(gpu, tmp, keys, "gpu"),
        }


def install(bundle: Path, root: Path, keys: Keys, *extra: str) -> tuple[int, str, str]:
    return cli("install", str(bundle), "--root", str(root), "--trust", str(keys.trust), *extra)


def toy_version(env_dir: Path) -> str:
    out = subprocess.run(
        [str(env_dir / "bin" / "python"), "-c", "import toydep; print(toydep.__version__)"],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


def listing(root: Path) -> list[str]:
    return sorted(
        str(p.relative_to(root)) for p in root.rglob("*") if ".lock" not in p.name and p.parent == root / "toyengine"
    )


@pytest.fixture
def installed(bundles: dict[str, Path], keys: Keys, tmp_path: Path) -> Path:
    """A root with the day-6 build installed: the 'old' environment every failure must leave working."""
    root = tmp_path / "engines"
    code, _, stderr = install(bundles["v1"], root, keys)
    assert code == 0, stderr
    assert toy_version(root / "toyengine" / "1.0-cpu") == "1.0"
    return root


def test_upgrade_swaps_in_place(installed: Path, bundles: dict[str, Path], keys: Keys) -> None:
    code, _, stderr = install(bundles["v2"], installed, keys)
    assert code == 0, stderr
    assert toy_version(installed / "toyengine" / "1.0-cpu") == "2.0"
    assert listing(installed) == ["toyengine/1.0-cpu"]


def test_downgrade_is_refused_unless_allowed(installed: Path, bundles: dict[str, Path], keys: Keys) -> None:
    assert install(bundles["v2"], installed, keys)[0] == 0
    code, _, stderr = install(bundles["v1"], installed, keys)
    assert code == 1
    assert "newer build" in stderr and "--allow-downgrade" in stderr
    assert toy_version(installed / "toyengine" / "1.0-cpu") == "2.0"
    code, _, stderr = install(bundles["v1"], installed, keys, "--allow-downgrade")
    assert code == 0, stderr
    assert toy_version(installed / "toyengine" / "1.0-cpu") == "1.0"


def test_reinstall_is_a_noop_unless_forced(installed: Path, bundles: dict[str, Path], keys: Keys) -> None:
    marker = installed / "toyengine" / "1.0-cpu" / "lockbuild.json"
    before = marker.read_text()
    code, stdout, _ = install(bundles["v1"], installed, keys)
    assert code == 0 and "already installed" in stdout
    assert marker.read_text() == before
    code, stdout, _ = install(bundles["v1"], installed, keys, "--force")
    assert code == 0 and "installed:" in stdout
    assert json.loads(marker.read_text())["installed"] >= json.loads(before)["installed"]


# The test-only entry point: the installer's phase hook SIGKILLs the process at the named phase.
KILL_AT = """\
import os, signal, sys
from pathlib import Path
from lockbuild.install.installer import Installer, InstallOptions

phase, bundle, root, trust = sys.argv[1:]


def hook(name):
    if name == phase:
        os.kill(os.getpid(), signal.SIGKILL)


options = InstallOptions(root=Path(root), trust_dir=Path(trust), environ=dict(os.environ))
Installer(options, hook=hook).install(Path(bundle))
"""


@pytest.mark.parametrize("phase", ["extract", "install", "verify", "swap"])
def test_kill_in_each_phase_leaves_the_old_environment(
    phase: str, installed: Path, bundles: dict[str, Path], keys: Keys
) -> None:
    killed = [sys.executable, "-c", KILL_AT, phase, str(bundles["v2"]), str(installed), str(keys.trust)]
    proc = subprocess.run(killed, capture_output=True, text=True)
    assert proc.returncode == -9, proc.stderr
    argv = [
        sys.executable,
        "-m",
        "lockbuild",
        "install",
        str(bundles["v2"]),
        "--root",
        str(installed),
        "--trust",
        str(keys.trust),
    ]
    target = installed / "toyengine" / "1.0-cpu"
    # killed after the atomic exchange, the new environment is already complete and in place
    assert toy_version(target) == ("2.0" if phase == "swap" else "1.0")
    assert any(p.name.endswith(".partial") for p in target.parent.iterdir())
    assert subprocess.run([str(target / "bin" / "toyengine"), "--version"], capture_output=True).returncode == 0
    proc = subprocess.run(argv, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert toy_version(target) == "2.0"
    assert listing(installed) == ["toyengine/1.0-cpu"]


def test_failing_verify_command_places_nothing(bundles: dict[str, Path], keys: Keys, tmp_path: Path) -> None:
    root = tmp_path / "engines"
    code, _, stderr = install(bundles["failing"], root, keys)
    assert code == 1
    assert "verify command" in stderr and "exit 3" in stderr
    assert listing(root) == []


def test_no_kernel_image_gives_the_variant_hint(bundles: dict[str, Path], keys: Keys, tmp_path: Path) -> None:
    root = tmp_path / "engines"
    assert install(bundles["v1"], root, keys)[0] == 0
    code, _, stderr = install(bundles["probe"], root, keys, "--gpu-check", "require")
    assert code == 1
    assert "no kernel image" in stderr
    assert "TIP" in stderr and "another variant" in stderr
    assert listing(root) == ["toyengine/1.0-cpu"]
    code, _, stderr = install(bundles["probe"], root, keys, "--gpu-check", "skip")
    assert code == 0, stderr


def test_second_installer_fails_clearly_or_waits(installed: Path, bundles: dict[str, Path], keys: Keys) -> None:
    engine_dir = installed / "toyengine"
    with engine_lock(engine_dir):
        code, _, stderr = install(bundles["v2"], installed, keys)
    assert code == 5
    assert "another lockbuild" in stderr and "--wait" in stderr
    assert toy_version(engine_dir / "1.0-cpu") == "1.0"

    held = threading.Event()

    def hold() -> None:
        with engine_lock(engine_dir):
            held.set()
            time.sleep(1.0)

    t = threading.Thread(target=hold)
    t.start()
    held.wait()
    code, _, stderr = install(bundles["v2"], installed, keys, "--wait", "30")
    t.join()
    assert code == 0, stderr
    assert toy_version(engine_dir / "1.0-cpu") == "2.0"


def test_wrong_python_is_refused_before_anything(bundles: dict[str, Path], keys: Keys, tmp_path: Path) -> None:
    other = tmp_path / "python-other"
    other.write_text("#!/bin/sh\necho 3.99\n")
    other.chmod(0o755)
    root = tmp_path / "engines"
    code, _, stderr = install(bundles["v1"], root, keys, "--python", str(other))
    assert code == 1
    assert f"built for Python {PY}" in stderr and "3.99" in stderr
    assert not root.exists() or listing(root) == []


def test_not_enough_space_is_refused(bundles: dict[str, Path], keys: Keys, tmp_path: Path) -> None:
    root = tmp_path / "engines"
    code, _, stderr = install(bundles["big"], root, keys)
    assert code == 1 and "needs 99999.0 GiB free" in stderr
    assert listing(root) == []


def fake_nvidia_smi(bin_dir: Path, driver: str, cap: str) -> None:
    bin_dir.mkdir()
    exe = bin_dir / "nvidia-smi"
    exe.write_text(f"#!/bin/sh\necho '{driver}, {cap}, Fake GPU'\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)


def test_gpu_requirements_are_checked_against_the_node(
    bundles: dict[str, Path], keys: Keys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_nvidia_smi(tmp_path / "bin", "535.10", "7.0")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    root = tmp_path / "engines"
    code, _, stderr = install(bundles["gpu"], root, keys, "--gpu-check", "auto")
    assert code == 1 and "needs driver 580+, the node has 535.10" in stderr
    assert "compute capability 8.0+, the node has Fake GPU (7.0)" in stderr
    assert listing(root) == []


def test_untrusted_bundle_is_refused_before_unpacking(bundles: dict[str, Path], tmp_path: Path) -> None:
    from conftest import make_keys

    other = make_keys(tmp_path / "k", "other")
    root = tmp_path / "engines"
    code, _, stderr = install(bundles["v1"], root, other)
    assert code == 3 and "signature policy not met" in stderr
    assert not (root / "toyengine").exists() or listing(root) == []


def test_tampered_bundle_is_refused_and_old_env_kept(
    installed: Path, bundles: dict[str, Path], keys: Keys, tmp_path: Path
) -> None:
    bad = tmp_path / bundles["v2"].name
    shutil.copy(bundles["v2"], bad)
    shutil.copy(str(bundles["v2"]) + ".minisig", str(bad) + ".minisig")
    with bad.open("r+b") as f:
        f.seek(bad.stat().st_size // 2)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 1]))
    code, _, stderr = install(bad, installed, keys)
    assert code == 4 and "does not have the sha256 its signed frame table lists" in stderr, stderr
    assert toy_version(installed / "toyengine" / "1.0-cpu") == "1.0"
    assert listing(installed) == ["toyengine/1.0-cpu"]


@pytest.mark.skipif(shutil.which("unshare") is None, reason="unshare is not available")
def test_install_needs_no_network(bundles: dict[str, Path], keys: Keys, tmp_path: Path) -> None:
    if subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode != 0:
        pytest.skip("this machine does not allow a network namespace (unshare -n)")
    root = tmp_path / "engines"
    argv = [
        "unshare",
        "-n",
        sys.executable,
        "-m",
        "lockbuild",
        "install",
        str(bundles["v1"]),
        "--root",
        str(root),
        "--trust",
        str(keys.trust),
        "--json",
    ]
    proc = subprocess.run(argv, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["status"] == "installed"
    out = subprocess.run(
        [str(root / "toyengine" / "1.0-cpu" / "bin" / "toyengine"), "--version"], capture_output=True, text=True
    )
    assert out.stdout.strip() == "toyengine 1.0"


def test_wrong_architecture_is_refused(server: FakeServer, keys: Keys, tmp_path: Path, env: FakeServer) -> None:
    from conftest import uv_wheel

    name, data = uv_wheel()
    arm = name.replace("x86_64", "aarch64")
    if ("primary", "uv") not in server.projects or not any(
        e.filename == arm for e in server.projects[("primary", "uv")]
    ):
        server.publish(arm, data, uploaded=day(1))
    bundle = build(TOY_RECIPE.replace(PLATFORM, "aarch64-manylinux_2_28"), tmp_path, keys, "arm")
    root = tmp_path / "engines"
    code, _, stderr = install(bundle, root, keys)
    assert code == 1 and "for aarch64" in stderr
    assert not (root / "toyengine").exists() or listing(root) == []


# --- the node acts on the signed manifest only -----------------------------------------


def repack(
    bundle: Path,
    out_dir: Path,
    keys: Keys,
    change: Callable[[Manifest, dict[str, bytes]], Manifest],
    *,
    framed: bool = True,
) -> Path:
    """The bundle with ``change`` applied to its manifest and member bytes (sizes, digests and the recipe's
    digest recomputed), written (``framed=False``: in the layout made before frames) and signed again with
    the test key: valid in every way a signature checks."""
    from lockbuild.bundle.write import Entry, write_bundle
    from lockbuild.trust.sign import read_unverified

    work = out_dir / "unpacked"
    work.mkdir(parents=True)
    old = read_unverified(bundle, dest=work)
    files = {m.path: (work / m.path).read_bytes() for m in old.members}
    new = change(old, files)
    members = tuple(
        dataclasses.replace(m, size=len(files[m.path]), sha256=hashlib.sha256(files[m.path]).hexdigest())
        for m in new.members
    )
    new = dataclasses.replace(new, members=members, recipe_sha256=hashlib.sha256(files["recipe.toml"]).hexdigest())
    out = out_dir / new.bundle_name
    with out.open("wb") as f:
        write_bundle(f, new, [Entry(m, files[m.path]) for m in members], threads=1, framed=framed)
    code, _, stderr = cli("sign", str(out), "--key", str(keys.secret))
    assert code == 0, stderr
    return out


def test_a_bundle_made_before_frames_verifies_and_installs_as_before(
    bundles: dict[str, Path], keys: Keys, tmp_path: Path
) -> None:
    """A bundle in the single-frame layout (every bundle before frames): its statement signs the whole
    file's sha256 and no frame table; verify checks every member, install installs it."""
    old = repack(bundles["v1"], tmp_path / "old", keys, lambda m, _files: m, framed=False)
    framed = repack(bundles["v1"], tmp_path / "new", keys, lambda m, _files: m)
    assert old.read_bytes()[-4:] != framed.read_bytes()[-4:] == bytes.fromhex("b1ea928f")  # the seek table's magic
    code, out, stderr = cli("verify", str(old), "--trust", str(keys.trust), "--json")
    assert code == 0 and json.loads(out)["frames"] is None and json.loads(out)["members"] > 2, stderr
    code, _, stderr = install(old, tmp_path / "engines", keys)
    assert code == 0, stderr
    assert toy_version(tmp_path / "engines" / "toyengine" / "1.0-cpu") == "1.0"


def test_an_edited_recipe_in_a_signed_bundle_does_not_steer_the_node(
    bundles: dict[str, Path], keys: Keys, tmp_path: Path
) -> None:
    """recipe.toml is provenance: a signer's bundle whose recipe names another binary, verify command and
    probe installs exactly as its manifest says, and none of the recipe's commands runs."""
    pwned = tmp_path / "PWNED"

    def edit(m: Manifest, files: dict[str, bytes]) -> Manifest:
        text = files["recipe.toml"].decode()
        text = text.replace('binary = "toyengine"', 'binary = "sh"')
        text = text.replace('verify = ["toyengine", "--version"]', f'verify = ["sh", "-c", "touch {pwned}"]')
        files["recipe.toml"] = text.replace('gpu-probe = "torch"', 'gpu-probe = "none"').encode()
        assert files["recipe.toml"].decode() != text
        return m

    bundle = repack(bundles["v1"], tmp_path / "edited", keys, edit)
    root = tmp_path / "engines"
    code, _, stderr = install(bundle, root, keys, "--gpu-check", "require")
    # the manifest's probe (torch) runs, not the recipe's "none"; the recipe's verify command never does
    assert code == 1 and "the GPU probe failed" in stderr and "torch" in stderr and not pwned.exists()
    code, _, stderr = install(bundle, root, keys)
    assert code == 0, stderr
    assert not pwned.exists()
    marker = json.loads((root / "toyengine" / "1.0-cpu" / "lockbuild.json").read_text())
    assert marker["binary"] == "bin/toyengine"


def test_install_follows_the_signed_manifest(bundles: dict[str, Path], keys: Keys, tmp_path: Path) -> None:
    """The same bundle with the manifest's verify command changed: that command is what runs."""

    def edit(m: Manifest, files: dict[str, bytes]) -> Manifest:
        return dataclasses.replace(m, install=dataclasses.replace(m.install, verify=("toyengine", "--fail")))

    bundle = repack(bundles["v1"], tmp_path / "edited", keys, edit)
    code, _, stderr = install(bundle, tmp_path / "engines", keys)
    assert code == 1 and "the verify command (toyengine --fail) failed (exit 3)" in stderr


def test_a_signed_lock_without_hashes_is_refused_on_the_node(
    bundles: dict[str, Path], keys: Keys, tmp_path: Path
) -> None:
    """The node installs with --require-hashes whatever the lock says: a signer's lock whose lines carry
    no hashes is refused by uv, and the previous install (none) is left as it was."""

    def strip_hashes(m: Manifest, files: dict[str, bytes]) -> Manifest:
        text = files["lock/requirements.txt"].decode()
        stripped = re.sub(r"\s*\\\n\s*--hash=sha256:[0-9a-f]{64}", "", text)
        assert stripped != text and "--hash" not in stripped
        files["lock/requirements.txt"] = stripped.encode()
        return m

    bundle = repack(bundles["v1"], tmp_path / "edited", keys, strip_hashes)
    root = tmp_path / "engines"
    code, _, stderr = install(bundle, root, keys)
    assert code != 0
    assert "hash" in stderr.lower()
    assert not (root / "toyengine" / "1.0-cpu").exists()


# --- one fit rule ---------------------------------------------------------------------------------


def test_install_and_doctor_give_one_answer_on_the_same_facts(
    bundles: dict[str, Path], keys: Keys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Driver version unknown, an old glibc and too little space: install refuses with every reason, and
    doctor lists the same reasons for the same bundle on the same node."""
    import lockbuild.install.installer as installer
    import lockbuild.install.survey as doctor
    from lockbuild.bundle.read import read_head
    from lockbuild.errors import InstallError
    from lockbuild.install.node import Gpu, Node
    from lockbuild.install.nodecheck import Needs
    from lockbuild.install.survey import CatalogueBuild

    node = Node("x86_64", "glibc", (2, 17), "unknown", (Gpu("Old GPU", (7, 0)),))
    monkeypatch.setattr(installer, "free_bytes", lambda _path: 1 << 20)
    monkeypatch.setattr(doctor, "free_bytes", lambda _path: 1 << 20)
    monkeypatch.setattr(doctor, "find_pythons", lambda: {PY: sys.executable})
    manifest, _ = read_head(bundles["gpu"])
    report = doctor.examine(
        tmp_path / "engines",
        candidates=[CatalogueBuild("b.lbz", manifest.engine, "1.0-cu130", Needs.of(manifest))],
        trust=keys.trust,
        node=node,
    )
    reasons = report["catalogue"][0]["reasons"]
    assert len(reasons) == 4, reasons
    assert any("glibc 2.28+, the node has 2.17" in r for r in reasons)
    assert any("driver 580+, the node's driver version is unknown" in r for r in reasons)
    assert any("compute capability 8.0+, the node has Old GPU (7.0)" in r for r in reasons)
    assert any("free, the root has 0.0 GiB" in r for r in reasons)
    options = installer.InstallOptions(root=tmp_path / "engines", trust_dir=keys.trust)
    with pytest.raises(InstallError) as info:
        installer.Installer(options, node=node).install(bundles["gpu"])
    assert "; ".join(reasons) in info.value.message
    assert not (tmp_path / "engines" / "toyengine" / "1.0-cu130").exists()


# --- the root, the engine directory and the target ------------------------------


def test_a_root_that_is_a_symlink_is_refused(bundles: dict[str, Path], keys: Keys, tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o755)
    (tmp_path / "link").symlink_to(real)
    code, _, stderr = install(bundles["v1"], tmp_path / "link", keys)
    assert code == 1 and "refused --root" in stderr and "is a symbolic link" in stderr
    assert list(real.iterdir()) == []


def test_a_group_writable_root_is_refused(bundles: dict[str, Path], keys: Keys, tmp_path: Path) -> None:
    root = tmp_path / "engines"
    root.mkdir()
    root.chmod(0o775)
    code, _, stderr = install(bundles["v1"], root, keys)
    assert code == 1 and "writable by its group or by others (mode 0775)" in stderr
    assert list(root.iterdir()) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to hand a directory to another user")
def test_a_root_owned_by_another_user_is_refused(bundles: dict[str, Path], keys: Keys, tmp_path: Path) -> None:
    root = tmp_path / "engines"
    root.mkdir(mode=0o755)
    os.chown(root, 65534, 65534)
    code, _, stderr = install(bundles["v1"], root, keys)
    assert code == 1 and "owned by uid 65534" in stderr
    assert list(root.iterdir()) == []


def test_an_engine_dir_that_is_a_symlink_is_refused(bundles: dict[str, Path], keys: Keys, tmp_path: Path) -> None:
    root, elsewhere = tmp_path / "engines", tmp_path / "elsewhere"
    root.mkdir(mode=0o755)
    elsewhere.mkdir()
    (root / "toyengine").symlink_to(elsewhere)
    code, _, stderr = install(bundles["v1"], root, keys)
    assert code == 1 and "refused the engine directory" in stderr and "symbolic link" in stderr
    assert list(elsewhere.iterdir()) == []


def test_a_planted_lock_file_link_is_never_followed(bundles: dict[str, Path], keys: Keys, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    engine_dir = tmp_path / "engines" / "toyengine"
    engine_dir.mkdir(parents=True, mode=0o755)
    (engine_dir / ".lockbuild.lock").symlink_to(victim)
    code, _, stderr = install(bundles["v1"], tmp_path / "engines", keys)
    assert code == 1 and "cannot open the lock file" in stderr
    assert victim.read_text() == "precious\n"


def test_a_copied_environment_is_not_taken_for_an_installed_one(
    installed: Path, bundles: dict[str, Path], keys: Keys, tmp_path: Path
) -> None:
    """A look-alike (a copy of a real environment, marker and all) is not 'already installed': the marker
    counts only in the directory it was written into. Made by another user, the target is refused."""
    root = tmp_path / "other-root"
    (root / "toyengine").mkdir(parents=True, mode=0o755)
    root.chmod(0o755)
    copy = root / "toyengine" / "1.0-cpu"
    shutil.copytree(installed / "toyengine" / "1.0-cpu", copy, symlinks=True)
    code, stdout, _ = cli("list", "--root", str(root))
    assert code == 0 and "no engines" in stdout
    code, stdout, stderr = install(bundles["v1"], root, keys)
    assert code == 0 and "installed:" in stdout and "already" not in stdout, stderr
    if os.geteuid() == 0:
        for path in (copy, *copy.rglob("*")):
            os.chown(path, 65534, 65534, follow_symlinks=False)
        code, _, stderr = install(bundles["v1"], root, keys, "--force")
        assert code == 1 and "refused the installed environment" in stderr and "owned by uid 65534" in stderr


def test_the_stale_staging_sweep_never_follows_a_link(
    installed: Path, bundles: dict[str, Path], keys: Keys, tmp_path: Path
) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("precious\n")
    (installed / "toyengine" / "evil.partial").symlink_to(victim)
    code, _, stderr = install(bundles["v2"], installed, keys)
    assert code == 0, stderr
    assert (victim / "keep").read_text() == "precious\n"
    assert not (installed / "toyengine" / "evil.partial").is_symlink()


def test_no_lock_file_is_left_behind(installed: Path, bundles: dict[str, Path], keys: Keys) -> None:
    lock = installed / "toyengine" / ".lockbuild.lock"
    assert not lock.exists()
    assert install(bundles["failing"], installed, keys)[0] == 1
    assert not lock.exists()
    code, _, stderr = cli("remove", "toyengine", "1.0-cpu", "--root", str(installed))
    assert code == 0, stderr
    assert not lock.exists() and not os.path.lexists(lock)


def test_a_waiter_relocks_when_the_holder_removes_the_lock_file(tmp_path: Path) -> None:
    """The holder unlinks the lock file as it lets go; a waiter then checks it still holds the file that
    is there (else two installers would each hold a lock on a different file)."""
    engine_dir = tmp_path / "e"
    engine_dir.mkdir()
    order: list[str] = []
    held = threading.Event()

    def first() -> None:
        with engine_lock(engine_dir):
            held.set()
            time.sleep(0.5)
            order.append("first")

    t = threading.Thread(target=first)
    t.start()
    held.wait()
    with engine_lock(engine_dir, wait=10):
        order.append("second")
        inode = (engine_dir / ".lockbuild.lock").stat().st_ino
        with pytest.raises(BusyError), engine_lock(engine_dir):
            pass
        assert (engine_dir / ".lockbuild.lock").stat().st_ino == inode
    t.join()
    assert order == ["first", "second"]
    assert list(engine_dir.iterdir()) == []


# --- files placed in the environment ---------------------------------------------


def test_an_asset_named_like_a_file_of_the_environment_is_refused(
    bundles: dict[str, Path], keys: Keys, tmp_path: Path
) -> None:
    """An asset placed at bin/toyengine (the engine's console script) is refused, never written through."""

    def edit(m: Manifest, files: dict[str, bytes]) -> Manifest:
        files["assets/toyengine"] = b"#!/bin/sh\necho hijacked\n"
        members = (*m.members, Member("assets/toyengine", 0, "0" * 64, "asset", ""))
        table = dataclasses.replace(m.install, assets=(AssetPlace("assets/toyengine", "bin"),))
        return dataclasses.replace(m, members=members, install=table)

    bundle = repack(bundles["v1"], tmp_path / "edited", keys, edit)
    root = tmp_path / "engines"
    code, _, stderr = install(bundle, root, keys)
    assert code == 4 and "a file of that name is already there (bin/toyengine)" in stderr
    assert listing(root) == []


def test_an_asset_over_the_interpreter_is_refused_by_the_manifest_and_the_builder() -> None:
    from types import SimpleNamespace

    from lockbuild.builder.installtable import install_table
    from lockbuild.bundle.manifestparse import parse_manifest
    from lockbuild.errors import IntegrityError, RecipeError

    base = Member("tools/uv-0.9.0-py3-none-any.whl", 1, "0" * 64, "tool", "")
    asset = Member("assets/python", 1, "0" * 64, "asset", "")
    table = InstallTable(
        "toyengine", ("toyengine", "--version"), "none", base.path, assets=(AssetPlace(asset.path, "bin"),)
    )
    from hostile import manifest as make_manifest

    with pytest.raises(IntegrityError, match="bin/python is the environment's interpreter"):
        parse_manifest(make_manifest([base, asset], install=table).to_toml())
    build = SimpleNamespace(
        id="1.0-cpu",
        position=0,
        source=None,
        gpu=None,
        free_gb=None,
        requirements=(),
        assets=SimpleNamespace(dir="bin", files=("python",)),
    )
    engine = SimpleNamespace(binary="toyengine", verify=("toyengine",), gpu_probe="none")
    plan = SimpleNamespace(recipe=SimpleNamespace(engine=engine, path="r.toml"), build=build)
    wheel = Member("wheels/a-1-py3-none-any.whl", 1, "0" * 64, "wheel", "")
    with pytest.raises(RecipeError, match="would place python in bin/"):
        install_table(plan, [base, wheel, asset])  # type: ignore[arg-type]


# --- the engine's code runs in a minimal environment -------------------------------------


def test_the_installers_secrets_do_not_reach_the_verify_command(
    bundles: dict[str, Path], keys: Keys, tmp_path: Path
) -> None:
    check = (
        "import os, sys; leaked = [k for k in os.environ if 'TOKEN' in k or 'PROXY' in k.upper() "
        "or k in ('MY_SECRET', 'LD_PRELOAD', 'PYTHONPATH')]; print(leaked); sys.exit(7 if leaked else 0)"
    )

    def edit(m: Manifest, files: dict[str, bytes]) -> Manifest:
        return dataclasses.replace(m, install=dataclasses.replace(m.install, verify=("python", "-c", check)))

    bundle = repack(bundles["v1"], tmp_path / "edited", keys, edit)
    secrets = {
        "MY_SECRET": "s3cret",
        "GITHUB_TOKEN": "ghp_x",
        "LOCKBUILD_INDEX_TOKEN": "t",
        "HTTPS_PROXY": "http://p:1",
        "https_proxy": "http://p:1",
        "PYTHONPATH": "/nowhere",
    }
    code, _, stderr = cli(
        "install", str(bundle), "--root", str(tmp_path / "engines"), "--trust", str(keys.trust), env=secrets
    )
    assert code == 0, stderr


# --- a bundle without wheels -------------------------------------------------------------


def test_uv_is_pointed_only_at_the_folders_the_bundle_has(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An sdist-only bundle has no wheels/: passing --find-links to it made uv stop ("Failed to read")."""
    from hostile import INSTALL
    from hostile import manifest as make_manifest

    import lockbuild.install.stage as stage

    calls: list[list[str]] = []
    monkeypatch.setattr(stage, "extract_uv", lambda *_a: Path("/bin/uv"))
    monkeypatch.setattr(stage, "run_command", lambda argv, **_k: calls.append(list(argv)) or "")
    (tmp_path / "staged").mkdir()
    members = [Member(INSTALL.uv, 1, "0" * 64, "tool", ""), Member("sdists/a-1.0.tar.gz", 1, "0" * 64, "sdist", "")]
    s = stage.Stage(tmp_path / "u", tmp_path / "staged", make_manifest(members), Progress.quiet(), lambda _p: None, {})
    s.build(Path(sys.executable))
    pip = calls[1]
    assert pip.count("--find-links") == 1 and str(tmp_path / "u" / "sdists") in pip
    assert str(tmp_path / "u" / "wheels") not in pip and "--no-build" not in pip


def test_remove_takes_plain_names_only(installed: Path) -> None:
    """`remove ENGINE VERSION-VARIANT` names a directory under the root: '..' or a path never reaches outside."""
    env = installed / "toyengine" / "1.0-cpu"
    for engine, build_id, root in ((".", "1.0-cpu", env.parent), ("..", "1.0-cpu", env), ("x/..", "1.0-cpu", env)):
        code, _, stderr = cli("remove", engine, build_id, "--root", str(root))  # each names env, by a detour
        assert code == 1 and "no lockbuild environment" in stderr
    assert toy_version(installed / "toyengine" / "1.0-cpu") == "1.0"


def test_a_lock_file_with_another_name_is_refused(tmp_path: Path) -> None:
    """A lock file hard-linked elsewhere (to a file the installer must never truncate) is refused untouched."""
    engine_dir = tmp_path / "e"
    engine_dir.mkdir()
    other = tmp_path / "precious"
    other.write_text("keep\n")
    os.link(other, engine_dir / ".lockbuild.lock")
    with pytest.raises(InstallError, match="with one name"), engine_lock(engine_dir):
        pass
    assert other.read_text() == "keep\n"


SDIST_BACKEND = """\
import base64, hashlib, os, zipfile

INFO = "lksdist-1.0.dist-info"
FILES = {
    "lksdist/__init__.py": b"def main():\\n    print('lksdist 1.0')\\n",
    INFO + "/METADATA": b"Metadata-Version: 2.1\\nName: lksdist\\nVersion: 1.0\\n",
    INFO + "/WHEEL": b"Wheel-Version: 1.0\\nGenerator: tests\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n",
    INFO + "/entry_points.txt": b"[console_scripts]\\nlksdist = lksdist:main\\n",
}


def get_requires_for_build_wheel(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    name = "lksdist-1.0-py3-none-any.whl"
    lines = []
    for path, data in FILES.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        lines.append(f"{path},sha256={digest},{len(data)}\\n")
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w") as z:
        for path, data in FILES.items():
            z.writestr(path, data)
        z.writestr(INFO + "/RECORD", "".join(lines) + INFO + "/RECORD,,\\n")
    return name
"""

SDIST_RECIPE = build_on_node_recipe("lksdist")


def test_a_bundle_with_only_an_sdist_installs(env: FakeServer, keys: Keys, tmp_path: Path) -> None:
    """An engine whose only file is an sdist (built on the node by its in-tree backend, offline)."""
    from servers import make_tar_gz

    if not env.projects.get(("primary", "lksdist")):
        pyproject = b'[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n'
        sdist = make_tar_gz(
            {
                "lksdist-1.0/PKG-INFO": b"Metadata-Version: 2.2\nName: lksdist\nVersion: 1.0\n",
                "lksdist-1.0/pyproject.toml": pyproject,
                "lksdist-1.0/backend.py": SDIST_BACKEND.encode(),
            }
        )
        env.publish("lksdist-1.0.tar.gz", sdist, uploaded=day(1))
    bundle = build(SDIST_RECIPE, tmp_path, keys, "sdist")
    code, stdout, _ = cli("inspect", str(bundle))
    assert "sdists/lksdist-1.0.tar.gz" in stdout and "wheels/" not in stdout
    root = tmp_path / "engines"
    code, _, stderr = install(bundle, root, keys)
    assert code == 0, stderr
    out = subprocess.run([str(root / "lksdist" / "1.0-cpu" / "bin" / "lksdist")], capture_output=True, text=True)
    assert out.stdout.strip() == "lksdist 1.0"


def test_success_is_said_once_on_stdout(bundles: dict[str, Path], keys: Keys, tmp_path: Path) -> None:
    root = tmp_path / "engines"
    for verb in ("installed", "already installed"):
        code, stdout, stderr = install(bundles["v1"], root, keys)
        assert code == 0, stderr
        said = [line for line in (stdout + stderr).splitlines() if "installed" in line]
        assert said == [f"{verb}: toyengine 1.0-cpu at {root / 'toyengine' / '1.0-cpu'}"], said


@pytest.mark.parametrize(
    ("place", "name", "why"),
    [
        ("lib/python3.12/site-packages", "evil.pth", "lib/ belongs to the environment's own packages"),
        ("lib64", "libc.so.6", "lib64/ belongs to the environment's own packages"),
        ("lockbuild", "marker.json", "lockbuild/ belongs to the environment's own packages"),
        ("bin", "activate", "bin/activate is the environment's interpreter or activation script"),
    ],
)
def test_an_asset_placed_in_the_environments_own_files_is_refused(place: str, name: str, why: str) -> None:
    from hostile import manifest as make_manifest

    from lockbuild.bundle.manifestparse import parse_manifest
    from lockbuild.errors import IntegrityError

    base = Member("tools/uv-0.9.0-py3-none-any.whl", 1, "0" * 64, "tool", "")
    asset = Member(f"assets/{name}", 1, "0" * 64, "asset", "")
    table = InstallTable(
        "toyengine", ("toyengine", "--version"), "none", base.path, assets=(AssetPlace(asset.path, place),)
    )
    with pytest.raises(IntegrityError, match=re.escape(why)):
        parse_manifest(make_manifest([base, asset], install=table).to_toml())
