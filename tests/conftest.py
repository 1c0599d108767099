"""Shared fixtures: local index/release servers on 127.0.0.1, a toy engine, keys and a trust dir."""

from __future__ import annotations

import datetime as dt
import io
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

# The kits (servers.py, hubkit.py, ...) sit here; each test sits one folder down, in the folder of the package
# it tests (tests/structure/test_suite_layout.py holds the rule). Each folder is on sys.path as well, so a test
# imports another's helpers by its module name, unique across tests/ (``from test_gpu_fit import VLLM``).
sys.path.insert(0, str(Path(__file__).parent))
sys.path.extend(sorted(str(d) for d in Path(__file__).parent.iterdir() if d.is_dir() and any(d.glob("test_*.py"))))

from servers import FakeHub, FakeServer, make_wheel

from lockbuild.minisign import write_keypair
from lockbuild.proc.uvtool import uv_binary, uv_version

REPO_ROOT = Path(__file__).resolve().parent.parent  # for a test that reads docs/, scripts/, bundles/, lockbuild/
PY = f"{sys.version_info[0]}.{sys.version_info[1]}"
PLATFORM = "x86_64-manylinux_2_28"


def build_on_node_recipe(name: str) -> str:
    """A one-package engine that PyPI serves only as an sdist, named in build-on-node."""
    return f"""\
[engine]
name = "{name}"
pypi = "{name}"
binary = "{name}"
verify = ["{name}"]
gpu-probe = "none"

[[builds]]
version = "1.0"
variant = "cpu"
python = "{PY}"
platform = "{PLATFORM}"
requirements = ["{name}==1.0"]
build-on-node = ["{name}"]
"""


T0 = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)


def day(n: int) -> dt.datetime:
    return T0 + dt.timedelta(days=n - 1)


def uv_wheel() -> tuple[str, bytes]:
    """A wheel carrying this machine's uv binary, shaped like the uv wheels on PyPI."""
    version = uv_version(uv_binary())
    filename = f"uv-{version}-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        zi = zipfile.ZipInfo(f"uv-{version}.data/scripts/uv", (2020, 1, 1, 0, 0, 0))
        zi.external_attr = 0o755 << 16
        z.writestr(zi, Path(uv_binary()).read_bytes())
        z.writestr(f"uv-{version}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: uv\nVersion: {version}\n")
    return filename, buf.getvalue()


ENGINE_MODULE = """\
import sys

__version__ = "{version}"


def main() -> None:
    if sys.argv[1:] == ["--version"]:
        print("toyengine", __version__)
        return
    if sys.argv[1:] == ["--fail"]:
        raise SystemExit(3)
    print("toyengine serving")
"""


def publish_toy(server: FakeServer) -> None:
    """toyengine 1.0 (published day 5) needs toydep; toydep 2.0 appears on day 20, after the cut-off."""
    server.publish(*uv_wheel(), uploaded=day(1))
    server.publish(*make_wheel("toydep", "1.0"), uploaded=day(1))
    server.publish(*make_wheel("toydep", "2.0"), uploaded=day(20))
    for version, when in (("1.0", day(5)), ("1.1", day(30))):
        server.publish(
            *make_wheel(
                "toyengine",
                version,
                deps=("toydep",),
                modules={"toyengine/__init__.py": ENGINE_MODULE.format(version=version)},
                scripts={"toyengine": "toyengine:main"},
            ),
            uploaded=when,
        )


@pytest.fixture(scope="session")
def server() -> Iterator[FakeServer]:
    s = FakeServer()
    publish_toy(s)
    yield s
    s.close()


@pytest.fixture(scope="module")
def blank_server() -> Iterator[FakeServer]:
    s = FakeServer()
    yield s
    s.close()


@pytest.fixture
def srv(blank_server: FakeServer) -> FakeServer:
    """An empty server shared by the module (closing one takes 0.5 s); each test registers its files."""
    blank_server.reset()
    return blank_server


@pytest.fixture(scope="module")
def blank_hub() -> Iterator[FakeHub]:
    cdn = FakeServer()
    h = FakeHub(cdn)
    yield h
    h.close()
    cdn.close()


@pytest.fixture
def hub(blank_hub: FakeHub, monkeypatch: pytest.MonkeyPatch) -> FakeHub:
    """A fake Hugging Face Hub (``HF_ENDPOINT`` points at it) and its CDN, on another port (another
    origin), shared by the module; each test publishes its repos."""
    blank_hub.reset()
    blank_hub.cdn.reset()
    monkeypatch.setenv("HF_ENDPOINT", blank_hub.endpoint)
    return blank_hub


@pytest.fixture(scope="session")
def shared_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(autouse=True)
def lockbuild_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No test reaches a public host: every address points at 127.0.0.1 or nowhere."""
    monkeypatch.setenv("LOCKBUILD_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("LOCKBUILD_GITHUB_API", "http://127.0.0.1:9/api")
    monkeypatch.setenv("LOCKBUILD_GITHUB_DOWNLOAD", "http://127.0.0.1:9/gh")
    monkeypatch.setenv("LOCKBUILD_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("LOCKBUILD_TRUST_DIR", raising=False)
    monkeypatch.delenv("LOCKBUILD_KEY_PASSWORD", raising=False)
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("LOCKBUILD_OSV_URL", "none")  # the vulnerability tests name their fake OSV service


@pytest.fixture
def env(server: FakeServer, monkeypatch: pytest.MonkeyPatch, shared_cache: Path) -> FakeServer:
    monkeypatch.setenv("LOCKBUILD_INDEX_URL", server.index_url())
    monkeypatch.setenv("LOCKBUILD_GITHUB_API", server.github_api)
    monkeypatch.setenv("LOCKBUILD_GITHUB_DOWNLOAD", server.github_download)
    return server


def no_python_path() -> str:
    """This PATH without any directory that holds a python<X.Y>."""
    dirs = [d for d in os.environ.get("PATH", "").split(":") if d and not (Path(d) / f"python{PY}").exists()]
    path = ":".join(dirs)
    assert shutil.which(f"python{PY}", path=path) is None
    return path


@dataclass(frozen=True)
class Keys:
    secret: Path
    public: Path
    trust: Path


def make_keys(base: Path, name: str = "release") -> Keys:
    base.mkdir(parents=True, exist_ok=True)
    secret, public = write_keypair(base / name, password=None)
    trust = base / f"trust-{name}"
    trust.mkdir()
    (trust / public.name).write_bytes(public.read_bytes())
    return Keys(secret, public, trust)


@pytest.fixture(scope="session")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    return make_keys(tmp_path_factory.mktemp("keys"))


TOY_RECIPE = f'''\
[engine]
name = "toyengine"
pypi = "toyengine"
binary = "toyengine"
verify = ["toyengine", "--version"]
gpu-probe = "torch"

[[builds]]
version = "1.0"
variant = "cpu"
python = "{PY}"
platform = "{PLATFORM}"
requirements = ["toyengine==1.0"]
'''


@pytest.fixture
def toy_recipe(tmp_path: Path) -> Path:
    p = tmp_path / "toyengine.toml"
    p.write_text(TOY_RECIPE)
    return p


def install_in_sandbox(
    bundle: Path, root: Path, trust: Path, *, writable: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``lockbuild install`` with no network, root or not: in lockbuild's sandbox, seeing only this Python,
    lockbuild, the bundle, the trust directory and ``writable`` (which holds ``root``). A user namespace
    made by ``unshare -rn`` would show root's directories above --root as uid 65534, which the installer
    rightly refuses; inside the sandbox the directories above the binds are its own."""
    import lockbuild
    from lockbuild.proc import sandbox

    here = [Path(sys.prefix), Path(sys.base_prefix), Path(lockbuild.__file__).resolve().parent.parent]
    binds = [sandbox.Bind(p, p) for p in dict.fromkeys(here) if not p.is_relative_to("/usr")]
    binds += [sandbox.Bind(trust, trust), sandbox.Bind(writable, writable, writable=True)]
    if not bundle.is_relative_to(writable):
        binds.append(sandbox.Bind(bundle.parent, bundle.parent))
    environ = {"PATH": "/usr/local/bin:/usr/bin:/bin", **(env or {}), "TMPDIR": "/tmp"}
    argv = [
        sys.executable,
        "-m",
        "lockbuild",
        "install",
        str(bundle),
        "--root",
        str(root),
        "--trust",
        str(trust),
        "--json",
    ]
    ran = sandbox.run(sandbox.Spec(binds=tuple(binds), env=environ), argv, timeout=300)
    return subprocess.CompletedProcess(ran.args, ran.returncode, ran.stdout.decode(), ran.stderr.decode())
