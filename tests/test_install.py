"""The offline installer: every refusal leaves the previous environment untouched and nothing behind."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import PLATFORM, PY, TOY_RECIPE, Keys, day
from servers import FakeServer, make_wheel

from lockbuild.cli import main
from lockbuild.install.swap import engine_lock

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
    argv = [sys.executable, "-m", "lockbuild", "install", str(bundles["v2"]), "--root", str(installed), "--trust",
            str(keys.trust)]  # fmt: skip
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
    assert code == 3 and "does not verify" in stderr
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
