"""Runtime settings ([engine.env]) every entry point sees, and the self-test (`lockbuild test`)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import PLATFORM, PY, Keys, day, make_keys, uv_wheel
from servers import FakeServer, make_wheel

from lockbuild.bundle.installparse import parse_install
from lockbuild.bundle.instructions import InstallTable
from lockbuild.bundle.manifest import toml_string
from lockbuild.cli import main
from lockbuild.errors import IntegrityError, RecipeError
from lockbuild.recipe import parse_recipe

ENGINE = """\
import ctypes
import os
import socket
import subprocess
import sys
import time


def _sendmmsg(host: str, port: int) -> None:  # sendmmsg through ctypes: no audit event, no Python socket call
    class Iov(ctypes.Structure):
        _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]

    class Hdr(ctypes.Structure):
        _fields_ = [("name", ctypes.c_void_p), ("namelen", ctypes.c_uint32), ("iov", ctypes.POINTER(Iov)),
                    ("iovlen", ctypes.c_size_t), ("control", ctypes.c_void_p), ("controllen", ctypes.c_size_t),
                    ("flags", ctypes.c_int), ("len", ctypes.c_uint)]

    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.socket(socket.AF_INET, socket.SOCK_DGRAM, 0)
    addr = (ctypes.c_ubyte * 16)(*(socket.AF_INET.to_bytes(2, "little") + port.to_bytes(2, "big")
                                   + socket.inet_aton(host) + bytes(8)))
    data = ctypes.create_string_buffer(b"x")
    iov = Iov(ctypes.cast(data, ctypes.c_void_p), 1)
    hdr = Hdr(ctypes.cast(addr, ctypes.c_void_p), 16, ctypes.pointer(iov), 1, None, 0, 0, 0)
    libc.sendmmsg(fd, ctypes.byref(hdr), 1, 0)


def main() -> None:
    args = sys.argv[1:]
    if args == ["--version"]:
        print("netengine 1.0")
    elif args == ["--env"]:
        print(os.environ.get("HF_NETENGINE_MODE", "<unset>"), os.environ.get("HF_HUB_OFFLINE", "<unset>"))
    elif args == ["--smoke"]:  # quietly tries a connection, then falls back: the case the self-test exists for
        try:
            socket.create_connection(("10.255.255.1", 8080), timeout=2).close()
            print("fetched")
        except OSError:
            print("offline: falling back")
    elif args == ["--serve"]:  # a server on the namespace's own loopback, and a client of it
        with socket.create_server(("127.0.0.1", 0)) as srv:
            with socket.create_connection(srv.getsockname()[:2], timeout=5) as c:
                conn, _ = srv.accept()
                conn.sendall(b"pong")
                print("served", c.recv(4).decode())
                conn.close()
    elif args == ["--sendmsg"]:  # socket.sendmsg: an audit event the old hook did not listen to
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                s.sendmsg([b"x"], [], 0, ("10.255.255.3", 9))
            except OSError:
                pass
        print("netengine 1.0")
    elif args == ["--sendmmsg"]:
        _sendmmsg("10.255.255.4", 10)
        print("sent")
    elif args == ["--nosite"]:  # a child without site: the .pth with the watch hook never runs there
        code = "import socket\\ntry: socket.create_connection(('10.255.255.6', 83), timeout=1)\\nexcept OSError: pass"
        subprocess.run([sys.executable, "-S", "-c", code], check=True)
        print("child ran")
    elif args == ["--erase"]:  # connects, then destroys every record of it that it can find
        try:
            socket.create_connection(("10.255.255.7", 84), timeout=1)
        except OSError:
            pass
        found = []
        for top in ("/", os.environ.get("TMPDIR", "/tmp"), os.environ.get("HOME", "/")):
            for dirpath, _dirs, files in os.walk(top):
                if dirpath.startswith(("/proc", "/sys", "/usr", "/dev", "/root", "/work", "/opt")):
                    continue
                for f in files:
                    if f in ("strace.txt", "audit.jsonl") or f.endswith((".strace", ".trace")):
                        path = os.path.join(dirpath, f)
                        try:
                            open(path, "w").close()
                            os.unlink(path)
                            os.symlink("/dev/null", path)
                        except OSError:
                            continue
                        found.append(path)
        print("erased", len(found))
    elif args == ["--daemon"]:  # a double-forked daemon that outlives the smoke command
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.execvp("sleep", ["sleep", "299.25"])
            os._exit(0)
        os.wait()
        print("daemon started")
    elif args == ["--uring"]:
        params = ctypes.create_string_buffer(120)
        ctypes.CDLL(None, use_errno=True).syscall(425, 4, params)  # io_uring_setup(4, &params)
        print("ring")
    elif args == ["--untraced"]:  # a child the tracer would not follow (CLONE_UNTRACED), which then connects
        pid = ctypes.CDLL(None, use_errno=True).syscall(56, 0x00800000 | 17, 0, 0, 0, 0)  # clone(CLONE_UNTRACED)
        if pid == 0:
            try:
                socket.create_connection(("10.255.255.11", 88), timeout=1)
            except OSError:
                pass
            os._exit(0)
        os.waitpid(pid, 0)
        print("untraced child ran")
    elif args == ["--family"]:
        for family in (17, 40):  # AF_PACKET, AF_VSOCK
            try:
                socket.socket(family, socket.SOCK_DGRAM).close()
            except OSError:
                pass
        print("families")
    elif args == ["--fill"]:  # fills the disk the test's files are on, connects, and frees the space again
        filler = os.path.join(os.getcwd(), "filler")
        with open(filler, "wb") as f:
            try:
                while True:
                    f.write(bytes(1 << 20))
                    f.flush()
            except OSError:
                pass
        try:
            socket.create_connection(("10.255.255.9", 86), timeout=1)
        except OSError:
            pass
        os.unlink(filler)
        print("filled")
    elif args == ["--gpu-smoke"]:  # a lazily fetched kernel
        try:
            socket.create_connection(("10.255.255.8", 85), timeout=1)
        except OSError:
            pass
        print("forward pass done")
    elif args == ["--lookup"]:
        try:
            socket.getaddrinfo("hub.example", 443)
        except OSError:
            pass
        print("looked up")
    else:
        print("netengine ok")
"""

PREEMPT = "import sys, types; sys.modules['_lockbuild_selftest'] = types.ModuleType('_lockbuild_selftest')\n"

RECIPE = f'''\
[engine]
name = "netengine"
pypi = "netengine"
binary = "netengine"
verify = ["netengine", "--version"]
{{extra}}
[engine.env]
HF_NETENGINE_MODE = "offline it's $HOME `x`"
HF_HUB_OFFLINE = "1"

[[builds]]
version = "1.0"
variant = "{{variant}}"
python = "{PY}"
platform = "{PLATFORM}"
requirements = ["netengine==1.0"]
'''


def cli(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return r.exit_code, r.stdout, r.stderr


def _build(tmp: Path, keys: Keys, variant: str, extra: str = "", verify: str | None = None) -> Path:
    recipe = tmp / f"{variant}.toml"
    text = RECIPE.format(extra=extra, variant=variant)
    if verify is not None:
        text = text.replace('verify = ["netengine", "--version"]', f"verify = {verify}")
    recipe.write_text(text)
    code, out, err = cli("build", str(recipe), "--key", str(keys.secret), "--out", str(tmp / variant), "--json")
    assert code == 0, err
    return Path(json.loads(out)["bundles"][0]["bundle"])


@pytest.fixture(scope="module")
def bundles(
    blank_server: FakeServer, keys: Keys, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Path]]:
    s = blank_server
    s.reset()
    s.publish(*uv_wheel(), uploaded=day(1))
    s.publish(
        *make_wheel(
            "netengine",
            "1.0",
            modules={"netengine/__init__.py": ENGINE, "_a_preempt.pth": PREEMPT},
            scripts={"netengine": "netengine:main"},
        ),
        uploaded=day(1),
    )
    tmp = tmp_path_factory.mktemp("netengine")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LOCKBUILD_INDEX_URL", s.index_url())
        mp.setenv("LOCKBUILD_CACHE_DIR", str(tmp / "cache"))
        yield {
            "plain": _build(tmp, keys, "plain"),
            "quiet": _build(tmp, keys, "quiet", 'smoke = ["netengine", "--quiet"]'),
            "net": _build(tmp, keys, "net", 'smoke = ["netengine", "--smoke"]'),
            "allowed": _build(
                tmp, keys, "allowed", 'smoke = ["netengine", "--smoke"]\nallow-network = ["10.255.255.1"]'
            ),
            "serve": _build(tmp, keys, "serve", 'smoke = ["netengine", "--serve"]'),
            # verify and smoke commands that are not Python (no .pth runs): they see the settings all the same
            "shell": _build(
                tmp,
                keys,
                "shell",
                'smoke = ["sh", "-c", "test \\"$HF_HUB_OFFLINE\\" = 1"]',
                verify='["sh", "-c", "test \\"$HF_HUB_OFFLINE\\" = 1 && netengine --version"]',
            ),
            "native": _build(
                tmp, keys, "native", 'smoke = ["bash", "-c", "(exec 3<>/dev/tcp/10.255.255.2/81) 2>/dev/null; true"]'
            ),
            # the dodges a hostile engine tries, each one of them
            "sendmsg": _build(tmp, keys, "sendmsg", verify='["netengine", "--sendmsg"]'),
            "sendmmsg": _build(tmp, keys, "sendmmsg", 'smoke = ["netengine", "--sendmmsg"]'),
            "devtcp": _build(
                tmp,
                keys,
                "devtcp",
                verify='["bash", "-c", "(exec 3<>/dev/tcp/10.255.255.5/82) 2>/dev/null; netengine --version"]',
            ),
            "nosite": _build(tmp, keys, "nosite", 'smoke = ["netengine", "--nosite"]'),
            "erase": _build(tmp, keys, "erase", 'smoke = ["netengine", "--erase"]'),
            "daemon": _build(tmp, keys, "daemon", 'smoke = ["netengine", "--daemon"]'),
            "uring": _build(tmp, keys, "uring", 'smoke = ["netengine", "--uring"]'),
            "untraced": _build(tmp, keys, "untraced", 'smoke = ["netengine", "--untraced"]'),
            "family": _build(tmp, keys, "family", 'smoke = ["netengine", "--family"]'),
            "lookup": _build(
                tmp,
                keys,
                "lookup",
                'smoke = ["netengine", "--lookup"]',
                verify='["sh", "-c", "getent hosts native.example; netengine --version"]',
            ),
            "fill": _build(tmp, keys, "fill", 'smoke = ["netengine", "--fill"]'),
            "gpu": _build(
                tmp, keys, "gpu", 'smoke = ["netengine", "--quiet"]\ngpu-smoke = ["netengine", "--gpu-smoke"]'
            ),
            "lookup-allowed": _build(
                tmp,
                keys,
                "lookup-allowed",
                'smoke = ["netengine", "--lookup"]\nallow-network = ["hub.example", "native.example"]',
                verify='["sh", "-c", "getent hosts native.example; netengine --version"]',
            ),
        }


# --- [engine.env] -----------------------------------------------------------------------------------


def test_env_values_reach_the_binary_started_directly(bundles: dict[str, Path], keys: Keys, tmp_path: Path) -> None:
    root = tmp_path / "engines"
    code, _, err = cli("install", str(bundles["plain"]), "--root", str(root), "--trust", str(keys.trust))
    assert code == 0, err
    env_dir = root / "netengine" / "1.0-plain"
    # no activation, an empty environment: the console script alone must see the settings
    out = subprocess.run([str(env_dir / "bin" / "netengine"), "--env"], env={}, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "offline it's $HOME `x` 1"
    # an operator's own value wins for one run
    out = subprocess.run(
        [str(env_dir / "bin" / "netengine"), "--env"], env={"HF_HUB_OFFLINE": "0"}, capture_output=True, text=True
    )
    assert out.stdout.strip().endswith(" 0")
    # and an activated shell exports them to any program
    sh = f'. "{env_dir}/bin/activate" && printf "%s|%s" "$HF_NETENGINE_MODE" "$HF_HUB_OFFLINE"'
    out = subprocess.run(["sh", "-c", sh], env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True)
    assert out.stdout == "offline it's $HOME `x`|1", out.stderr
    # list and inspect show them
    code, out_text, _ = cli("list", "--root", str(root))
    assert "env HF_HUB_OFFLINE=1" in out_text
    code, out_json, _ = cli("list", "--root", str(root), "--json")
    assert json.loads(out_json)["installed"][0]["env"]["HF_HUB_OFFLINE"] == "1"
    code, out_text, _ = cli("inspect", str(bundles["plain"]))
    assert "install: env: HF_HUB_OFFLINE=1 HF_NETENGINE_MODE=" in out_text
    code, out_json, _ = cli("inspect", str(bundles["plain"]), "--json")
    assert json.loads(out_json)["install"]["env"] == {
        "HF_HUB_OFFLINE": "1",
        "HF_NETENGINE_MODE": "offline it's $HOME `x`",
    }


def test_the_verify_command_runs_with_the_env(bundles: dict[str, Path]) -> None:
    from lockbuild.install.runenv import engine_env

    env = engine_env(Path("/x"), {"HOME": "/h"}, (("HF_HUB_OFFLINE", "1"),))
    assert env["HF_HUB_OFFLINE"] == "1" and env["HOME"] == "/h"


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('hf_offline = "1"', "expected a name like"),
        ('"1X" = "1"', "expected a name like"),
        ('"A-B" = "1"', "expected a name like"),
        ('LD_PRELOAD = "/tmp/x.so"', "steers the loader"),
        ('PYTHONPATH = "/tmp"', "steers the loader"),
        ('PATH = "/tmp"', "steers the loader"),
        ("HF_A = 1", "expected a string value"),
        ('HF_A = "x\\ny"', "control character"),
        ('HF_A = "x\\u0000"', "control character"),
        ('HF_A = "\\u001b[31m"', "control character"),
    ],
)
def test_bad_env_entries_are_refused_by_the_recipe(line: str, expected: str) -> None:
    text = RECIPE.format(extra="", variant="v").replace('HF_HUB_OFFLINE = "1"', line)
    with pytest.raises(RecipeError) as exc:
        parse_recipe(text)
    assert expected in exc.value.message


def _table(**extra: object) -> dict[str, object]:
    return {"binary": "e", "verify": ["e"], "gpu-probe": "none", "uv": "tools/uv.whl", **extra}


def test_the_manifest_env_round_trips_and_is_parsed_strictly() -> None:
    t = InstallTable(
        "e",
        ("e",),
        "none",
        "tools/uv.whl",
        env=(("HF_A", "x y'\"$"), ("HF_HUB_OFFLINE", "1")),
        smoke=("e", "--smoke"),
        allow_network=("example.org",),
    )
    import tomllib

    data = tomllib.loads("\n".join(t.toml_lines(toml_string)))
    assert parse_install(data["install"], {"tools/uv.whl": "tool"}) == t
    for bad in (
        {"env": {"LD_PRELOAD": "x"}},
        {"env": {"HF_A": "x\ny"}},
        {"env": {"a": "1"}},
        {"env": ["HF_A=1"]},
        {"smoke": ["e", "\x1b[2J"]},
        {"allow-network": ["http://x/"]},
        {"allow-network": [1]},
    ):
        with pytest.raises(IntegrityError):
            parse_install(_table(**bad), {"tools/uv.whl": "tool"})


# --- lockbuild test -----------------------------------------------------------------------------------


def _can_sandbox() -> bool:
    try:
        from lockbuild.proc import sandbox

        sandbox.check_available()
    except Exception:  # any failure: this machine cannot run the sandbox
        return False
    return True


needs_netns = pytest.mark.skipif(not _can_sandbox(), reason="this machine cannot start the bubblewrap sandbox")
needs_strace = pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The self-test's work directories go under this test's tmp_path (checked empty afterwards)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path / f"lockbuild-selftest-{os.geteuid()}"


def selftest(bundle: Path, keys: Keys, *extra: str) -> tuple[int, dict[str, Any], str]:
    code, out, err = cli("test", str(bundle), "--trust", str(keys.trust), "--json", *extra)
    data = json.loads(out)
    return code, data, err


def refused(data: dict[str, Any]) -> list[dict[str, Any]]:
    return [a for a in data["self_test"][0]["attempts"] if a["verdict"] == "refused"]


@needs_netns
@needs_strace
def test_a_quiet_connection_attempt_fails_the_test_with_host_port_and_frame(
    bundles: dict[str, Path], keys: Keys, private_tmp: Path
) -> None:
    code, data, _ = selftest(bundles["net"], keys)
    assert code == 1 and data["ok"] is False
    assert data["error"]["exit_code"] == 1 and "hosts not allowed: 10.255.255.1:8080" in data["error"]["message"]
    report = data["self_test"][0]
    assert report["passed"] is False and report["verdict"] == "failed"
    assert {s["name"]: s["status"] for s in report["steps"]} == {
        "install": "passed",
        "verify": "passed",
        "gpu-probe": "skipped",
        "smoke": "passed",
    }
    assert "offline: falling back" in report["steps"][-1]["detail"]  # the engine hid its failure; the test did not
    [hit] = refused(data)
    assert (hit["source"], hit["event"], hit["family"], hit["host"], hit["port"]) == (
        "strace",
        "connect",
        "AF_INET",
        "10.255.255.1",
        8080,
    )
    # the frame, although the wheel's _a_preempt.pth put a dummy _lockbuild_selftest in sys.modules first
    assert hit["frame"].startswith("<env>/lib/") and "netengine/__init__.py" in hit["frame"]
    assert hit["frame"].endswith("in main")
    assert "strace -f, outside" in report["tracer"]
    assert "--seccomp-bpf: only these calls" in report["tracer"] or "every call stops" in report["tracer"]
    assert list(private_tmp.iterdir()) == []  # the test root is gone
    # the text report names the attempt too
    code, text, err = cli("test", str(bundles["net"]), "--trust", str(keys.trust))
    assert code == 1 and "refused 10.255.255.1:8080 (connect, AF_INET, strace" in text and "FAILED" in text
    assert "ERROR the self-test of netengine-1.0-net" in err and "TIP" in err


@needs_netns
@needs_strace
def test_the_same_engine_passes_with_allow_network_for_that_host(
    bundles: dict[str, Path], keys: Keys, private_tmp: Path
) -> None:
    code, data, err = selftest(bundles["allowed"], keys)
    assert code == 0, (data, err)
    report = data["self_test"][0]
    assert report["passed"] and report["refused"] == 0
    assert {a["verdict"] for a in report["attempts"]} == {"allowed"}


@needs_netns
@needs_strace
def test_an_engine_that_attempts_nothing_passes(bundles: dict[str, Path], keys: Keys, private_tmp: Path) -> None:
    code, data, err = selftest(bundles["quiet"], keys)
    assert code == 0, (data, err)
    report = data["self_test"][0]
    assert report["passed"] and report["attempts"] == [] and report["verdict"] == "passed"
    probe = next(s for s in report["steps"] if s["name"] == "gpu-probe")
    assert probe["status"] == "skipped" and probe["detail"]  # says why
    assert report["env"]["HF_HUB_OFFLINE"] == "1"
    code, text, _ = cli("test", str(bundles["quiet"]), "--trust", str(keys.trust))
    assert code == 0 and "network attempts: none" in text and "PASSED" in text
    assert list(private_tmp.iterdir()) == []


@needs_netns
@needs_strace
def test_a_native_attempt_is_caught_by_strace(bundles: dict[str, Path], keys: Keys, private_tmp: Path) -> None:
    code, data, _ = selftest(bundles["native"], keys)
    assert code == 1
    assert [(a["source"], a["event"], a["host"], a["port"]) for a in refused(data)] == [
        ("strace", "connect", "10.255.255.2", 81)
    ]


@needs_netns
def test_without_a_tracer_the_verdict_is_not_checked_never_passed(
    bundles: dict[str, Path], keys: Keys, private_tmp: Path
) -> None:
    for bundle in (bundles["native"], bundles["quiet"]):
        code, data, err = selftest(bundle, keys, "--no-strace")
        report = data["self_test"][0]
        assert code == 6 and report["verdict"] == "not checked" and report["passed"] is False, (data, err)
        assert data["error"]["type"] == "SelfTestNotChecked" and data["error"]["exit_code"] == 6
        assert report["tracer"].startswith("none (--no-strace")
    code, text, err = cli("test", str(bundles["quiet"]), "--trust", str(keys.trust), "--no-strace")
    assert code == 6 and "NOT CHECKED" in text and "PASSED" not in text and "install strace" in err.lower()
    code, data, _ = selftest(bundles["net"], keys, "--no-strace")  # nothing saw the attempt: no pass either
    assert code == 6 and data["self_test"][0]["verdict"] == "not checked"


# --- the dodges a hostile engine tries: each one fails the test, naming the address or family, the call and the frame ---


@needs_netns
@needs_strace
def test_socket_sendmsg_in_the_verify_command_is_caught(
    bundles: dict[str, Path], keys: Keys, private_tmp: Path
) -> None:
    code, data, _ = selftest(bundles["sendmsg"], keys)
    assert code == 1
    [hit] = refused(data)
    assert (hit["event"], hit["host"], hit["port"]) == ("sendmsg", "10.255.255.3", 9)
    assert "netengine/__init__.py" in hit["frame"] and hit["frame"].endswith("in main")


@needs_netns
@needs_strace
def test_sendmmsg_through_ctypes_is_caught(bundles: dict[str, Path], keys: Keys, private_tmp: Path) -> None:
    code, data, _ = selftest(bundles["sendmmsg"], keys)
    assert code == 1
    [hit] = refused(data)
    assert (hit["event"], hit["family"], hit["host"], hit["port"]) == ("sendmmsg", "AF_INET", "10.255.255.4", 10)


@needs_netns
@needs_strace
def test_a_native_attempt_in_the_verify_command_is_caught(
    bundles: dict[str, Path], keys: Keys, private_tmp: Path
) -> None:
    code, data, _ = selftest(bundles["devtcp"], keys)
    assert code == 1
    assert [(a["event"], a["host"], a["port"], a["frame"]) for a in refused(data)] == [
        ("connect", "10.255.255.5", 82, None)
    ]


@needs_netns
@needs_strace
def test_a_child_without_site_is_caught(bundles: dict[str, Path], keys: Keys, private_tmp: Path) -> None:
    code, data, _ = selftest(bundles["nosite"], keys)
    assert code == 1
    [hit] = refused(data)
    assert (hit["source"], hit["event"], hit["host"], hit["port"]) == ("strace", "connect", "10.255.255.6", 83)


@needs_netns
@needs_strace
def test_an_engine_cannot_erase_the_evidence(bundles: dict[str, Path], keys: Keys, private_tmp: Path) -> None:
    code, data, _ = selftest(bundles["erase"], keys)
    report = data["self_test"][0]
    assert code == 1
    assert "erased 0" in report["steps"][-1]["detail"]  # the sandbox holds no record of the test at all
    [hit] = refused(data)
    assert (hit["event"], hit["host"], hit["port"]) == ("connect", "10.255.255.7", 84)


@needs_netns
@needs_strace
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to mount a small tmpfs")
def test_an_engine_that_fills_the_disk_loses_no_evidence(
    bundles: dict[str, Path], keys: Keys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tracer's log never touches a disk (a FIFO the outer run reads), so a full disk drops no line."""
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=700m,mode=0700", "tmpfs", str(small)], check=True)
    try:
        monkeypatch.setattr(tempfile, "tempdir", str(small))
        code, data, err = selftest(bundles["fill"], keys)
        assert "filled" in data["self_test"][0]["steps"][-1]["detail"], (data, err)
        assert code == 1
        assert [(a["event"], a["host"], a["port"]) for a in refused(data)] == [("connect", "10.255.255.9", 86)]
    finally:
        subprocess.run(["umount", str(small)], check=True)


@needs_netns
@needs_strace
def test_a_child_the_tracer_would_not_follow_fails_the_test(
    bundles: dict[str, Path], keys: Keys, private_tmp: Path
) -> None:
    code, data, _ = selftest(bundles["untraced"], keys)
    assert code == 1
    assert "untraced child ran" in data["self_test"][0]["steps"][-1]["detail"]
    assert [(a["event"], a["host"]) for a in refused(data)] == [("clone", "CLONE_UNTRACED")]


def _processes_with(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@needs_netns
@needs_strace
def test_no_process_outlives_the_test_not_even_a_double_forked_daemon(
    bundles: dict[str, Path], keys: Keys, private_tmp: Path
) -> None:
    code, data, err = selftest(bundles["daemon"], keys)
    assert code == 0, (data, err)
    assert "daemon started" in data["self_test"][0]["steps"][-1]["detail"]
    assert _processes_with("299.25") == []  # the daemon's `sleep 299.25` died with the sandbox's PID namespace


@needs_netns
@needs_strace
def test_io_uring_and_other_socket_families_fail_the_test(
    bundles: dict[str, Path], keys: Keys, private_tmp: Path
) -> None:
    code, data, _ = selftest(bundles["uring"], keys)
    assert code == 1 and [(a["event"], a["host"]) for a in refused(data)] == [("io_uring_setup", "io_uring")]
    assert "netengine/__init__.py" not in (refused(data)[0]["frame"] or "")  # no socket event, no frame
    code, data, _ = selftest(bundles["family"], keys)
    assert code == 1
    assert [(a["event"], a["family"]) for a in refused(data)] == [("socket", "AF_PACKET"), ("socket", "AF_VSOCK")]
    assert all(a["frame"] and a["frame"].endswith("in main") for a in refused(data))


@needs_netns
@needs_strace
def test_name_look_ups_count_and_pass_only_for_allowed_names(
    bundles: dict[str, Path], keys: Keys, private_tmp: Path
) -> None:
    code, data, _ = selftest(bundles["lookup"], keys)
    assert code == 1
    hits = refused(data)
    names = {a["host"] for a in hits}
    assert names == {"native.example", "hub.example"}, hits
    assert all(a["lookup"] and a["address"].endswith(":53") for a in hits)
    python = [a for a in hits if a["host"] == "hub.example"]
    assert python and all(a["frame"] and "netengine/__init__.py" in a["frame"] for a in python)
    code, data, err = selftest(bundles["lookup-allowed"], keys)
    assert code == 0, (data, err)
    assert {a["verdict"] for a in data["self_test"][0]["attempts"]} == {"allowed"}


def test_a_machine_that_cannot_run_the_bundle_exits_6(
    bundles: dict[str, Path], keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lockbuild.install.node import Node

    monkeypatch.setattr("lockbuild.selftest.run.detect", lambda: Node("aarch64", "glibc", (2, 39), None, ()))
    code, out, err = cli("test", str(bundles["quiet"]), "--trust", str(keys.trust))
    assert code == 6 and "cannot run" in err and "the node is aarch64" in err
    monkeypatch.setattr("lockbuild.selftest.run.detect", lambda: Node("x86_64", "glibc", (2, 17), None, ()))
    code, out, err = cli("test", str(bundles["quiet"]), "--trust", str(keys.trust), "--json")
    assert code == 6 and json.loads(out)["error"]["exit_code"] == 6 and "needs glibc 2.28+" in err


def test_an_untrusted_bundle_is_not_run(bundles: dict[str, Path], tmp_path: Path) -> None:
    other = make_keys(tmp_path / "other")
    code, _, err = cli("test", str(bundles["quiet"]), "--trust", str(other.trust))
    assert code == 3 and "ERROR" in err


def test_a_killed_runs_directory_is_swept_by_the_next(tmp_path: Path) -> None:
    from lockbuild.selftest import workdir as sandbox

    parent = sandbox.parent_dir(tmp_path)
    dead = subprocess.Popen(["true"])
    dead.wait()
    left = parent / f"run-{dead.pid}-abc"
    (left / "root" / "e").mkdir(parents=True)
    (left / "root" / "e" / "f").write_text("x")
    (left / "root" / "e").chmod(0o500)  # even a read-only directory the engine made
    mine = parent / f"run-{os.getpid()}-live"
    mine.mkdir()
    with sandbox.workdir(tmp_path) as work:
        assert work.parent == parent and not left.exists() and mine.exists()
    assert not work.exists()


def test_the_self_test_parent_must_be_private(tmp_path: Path) -> None:
    from lockbuild.errors import LockbuildError
    from lockbuild.selftest import workdir as sandbox

    (tmp_path / f"lockbuild-selftest-{os.geteuid()}").mkdir(mode=0o777)
    (tmp_path / f"lockbuild-selftest-{os.geteuid()}").chmod(0o777)
    with pytest.raises(LockbuildError, match="not a private directory"):
        sandbox.parent_dir(tmp_path)


def _hex(s: str) -> str:
    return "".join(f"\\x{b:02x}" for b in s.encode())


def test_strace_lines_are_read_by_rule() -> None:
    from lockbuild.selftest.tracelog import MARKER, parse

    def marker(event: str, host: str, port: int) -> str:
        import base64

        note = json.dumps({"event": event, "host": host, "port": port, "frames": ["f.py:3 in g"]})
        return MARKER + base64.urlsafe_b64encode(note.encode()).decode().rstrip("=")

    dns = bytes(4) + b"\x00\x01" + bytes(6) + b"\x03hub\x07example\x00\x00\x01\x00\x01"
    text = "\n".join(
        [
            f'7 removexattr("{_hex(marker("socket.connect", "10.255.255.1", 8080))}", "{_hex("user.lockbuild")}", NULL, 0)'
            " = -1 ENOENT",
            f'7 connect(3<TCP:[11]>, {{sa_family=AF_INET, sin_port=htons(8080), sin_addr=inet_addr("{_hex("10.255.255.1")}")'
            "}, 16) = -1 ENETUNREACH",
            f'7 connect(4<UNIX-STREAM:[12]>, {{sa_family=AF_UNIX, sun_path="{_hex("/run/x")}"}}, 110) = -1 ENOENT',
            f"8 connect(5<TCPv6:[13]>, {{sa_family=AF_INET6, sin6_port=htons(443), sin6_flowinfo=htonl(0), "
            f'inet_pton(AF_INET6, "{_hex("2001:db8::1")}", &sin6_addr), sin6_scope_id=0}}, 28 <unfinished ...>',
            "8 <... connect resumed>) = -1 ENETUNREACH",
            f'9 connect(6<UDP:[14]>, {{sa_family=AF_INET, sin_port=htons(53), sin_addr=inet_addr("{_hex("127.0.0.1")}")'
            "}, 16) = 0",
            f'10 sendto(6<UDP:[14]>, "{_hex(dns.decode("latin-1"))}", 29, MSG_NOSIGNAL, NULL, 0) = 29',
            "11 socket(AF_PACKET, SOCK_RAW, 768) = -1 EPERM",
            "11 socket(0x2c /* AF_??? */, SOCK_STREAM, 0) = -1 EAFNOSUPPORT",
            "11 socket(AF_NETLINK, SOCK_RAW, NETLINK_ROUTE) = 3<NETLINK:[15]>",
            "12 io_uring_setup(4, 0x7ffd) = 3",
            "12 clone(child_stack=NULL, flags=CLONE_CHILD_SETTID|SIGCHLD, child_tidptr=0x7f) = 99",
            "12 clone3({flags=CLONE_VM|CLONE_UNTRACED, exit_signal=SIGCHLD, stack=NULL, stack_size=0}, 88 <unfinished ...>",
            '13 sendmmsg(7<UDP:[16]>, [{msg_hdr={msg_name={sa_family=AF_INET, sin_port=htons(10), sin_addr=inet_addr("'
            + _hex("10.255.255.4")
            + '")}, msg_namelen=16}}], 1, 0) = 1',
            f'14 bind(8<TCP:[17]>, {{sa_family=AF_INET, sin_port=htons(0), sin_addr=inet_addr("{_hex("0.0.0.0")}")}}, 16) = 0',
        ]
    )
    log = parse(text)
    got = [(t.call, t.family, t.host, t.port, t.pid, t.lookup, t.name, t.frames) for t in log.attempts]
    assert got == [
        ("connect", "AF_INET", "10.255.255.1", 8080, 7, False, None, ("f.py:3 in g",)),
        ("connect", "AF_INET6", "2001:db8::1", 443, 8, False, None, ()),
        ("sendto", "AF_INET", "127.0.0.1", 53, 10, True, "hub.example", ()),  # named by the query it sent
        ("socket", "AF_PACKET", "-", None, 11, False, None, ()),
        ("socket", "0x2c", "-", None, 11, False, None, ()),
        ("io_uring_setup", "io_uring", "-", None, 12, False, None, ()),
        ("sendmmsg", "AF_INET", "10.255.255.4", 10, 13, False, None, ()),
        ("clone3", "CLONE_UNTRACED", "-", None, 12, False, None, ()),  # never resumed: read at the log's end
    ]
    assert not log.canary and log.notes == []  # a connect's note gave its frame; Log.notes keeps look-ups only


def test_the_query_names_a_look_up_not_the_engines_note_and_an_unread_address_is_refused() -> None:
    import base64

    from lockbuild.selftest.tracelog import MARKER, parse

    note = json.dumps({"event": "socket.getaddrinfo", "host": "allowed.example", "port": 443, "frames": []})
    forged = MARKER + base64.urlsafe_b64encode(note.encode()).decode().rstrip("=")
    query = (bytes(4) + b"\x00\x01" + bytes(6) + b"\x04evil\x07example\x00\x00\x01\x00\x01").decode("latin-1")
    other = (bytes(4) + b"\x00\x01" + bytes(6) + b"\x05other\x07example\x00\x00\x01\x00\x01").decode("latin-1")
    text = "\n".join(
        [
            f'5 removexattr("{_hex(forged)}", "{_hex("user.lockbuild")}") = -1 ENOENT',
            f'5 connect(6<UDP:[14]>, {{sa_family=AF_INET, sin_port=htons(53), sin_addr=inet_addr("{_hex("127.0.0.1")}")'
            "}, 16) = 0",
            f'5 sendto(6<UDP:[14]>, "{_hex(query)}", 30, MSG_NOSIGNAL, NULL, 0) = 30',
            f'5 sendto(6<UDP:[14]>, "{_hex(query)}", 30, MSG_NOSIGNAL, NULL, 0) = 30',
            f'5 sendto(6<UDP:[14]>, "{_hex(other)}", 31, MSG_NOSIGNAL, NULL, 0) = 31',
            "6 connect(7<TCP:[15]>, 0x7ffd0000, 16) = -1 EFAULT",  # an address strace could not read
        ]
    )
    log = parse(text)
    assert [(t.call, t.name, t.frames) for t in log.attempts if t.lookup] == [
        ("sendto", "evil.example", ()),
        ("sendto", "other.example", ()),
    ]  # the forged note names nothing
    assert [(t.call, t.family, t.host) for t in log.attempts if not t.lookup] == [("connect", "AF_INET", "?")]
    assert not parse(text, limit=3).overflow and parse(text, limit=2).overflow


@needs_netns
@needs_strace
def test_more_attempts_than_the_report_keeps_fails_the_verdict(
    bundles: dict[str, Path], keys: Keys, private_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lockbuild.selftest import tracelog

    monkeypatch.setattr(tracelog, "LIMIT", 0)
    code, data, err = selftest(bundles["serve"], keys)  # local attempts only, none of them kept
    assert code == 1 and data["self_test"][0]["verdict"] == "failed", (data, err)
    [unread] = [a for a in data["self_test"][0]["attempts"] if a["verdict"] == "refused"]
    assert unread["host"] == "an unreadable destination" and unread["why"].startswith("more than 0 distinct")
    assert "an unreadable destination" in data["error"]["message"]


def test_verdicts_local_allowed_and_name_look_ups() -> None:
    from lockbuild.selftest.line import Note
    from lockbuild.selftest.report import judge
    from lockbuild.selftest.tracelog import Traced

    notes = [
        Note("socket.getaddrinfo", "hub.example", 443, ("f.py:1 in g",), 1),
        Note("socket.getaddrinfo", "10.0.0.9", 443, (), 1),
        Note("socket.connect", "127.0.0.1", 80, (), 1),
    ]
    traced = [
        Traced("connect", "AF_INET", "127.0.0.1", 53, 1, name="hub.example", lookup=True),
        Traced("connect", "AF_INET", "127.0.0.1", 53, 1, lookup=True),
        Traced("connect", "AF_INET", "127.0.0.1", 80, 1),
        Traced("connect", "AF_INET6", "::1", 80, 1),
        Traced("sendto", "AF_INET", "10.0.0.9", 443, 1),
        Traced("socket", "AF_PACKET", "-", None, 1),
    ]
    assert [a.verdict for a in judge(notes, traced, ["hub.example", "10.0.0.9"])] == [
        "allowed",
        "refused",
        "local",
        "local",
        "allowed",
        "refused",
    ]  # an unnamed look-up is never allowed
    assert [a.verdict for a in judge(notes, traced, [])] == [
        "refused",
        "refused",
        "local",
        "local",
        "refused",
        "refused",
    ]
    # a look-up only Python noted (no query reached the tracer) is an attempt too; an address is no look-up
    only = judge(notes, [], [])
    assert [(a.source, a.host, a.verdict) for a in only] == [("watch-hook", "hub.example", "refused")]


@needs_netns
@needs_strace
def test_build_self_test_runs_the_test_after_the_build(
    blank_server: FakeServer,
    bundles: dict[str, Path],
    keys: Keys,
    tmp_path: Path,
    private_tmp: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LOCKBUILD_INDEX_URL", blank_server.index_url())
    for variant, extra, expected in (
        ("quiet", 'smoke = ["netengine", "--quiet"]', 0),
        ("net", 'smoke = ["netengine", "--smoke"]', 1),
    ):
        recipe = tmp_path / f"{variant}.toml"
        recipe.write_text(RECIPE.format(extra=extra, variant=variant))
        code, out, err = cli(
            "build", str(recipe), "--key", str(keys.secret), "--out", str(tmp_path / variant), "--self-test", "--json"
        )
        data = json.loads(out)
        assert code == expected, err
        assert Path(data["bundles"][0]["bundle"]).exists()  # the bundle is built either way; the report says why
        assert data["self_test"][0]["passed"] is (expected == 0)  # trusted through the key that signed it


@needs_netns
@needs_strace
def test_a_killed_test_leaves_nothing_after_the_next_run(
    bundles: dict[str, Path], keys: Keys, tmp_path: Path, private_tmp: Path
) -> None:
    import signal
    import sys
    import time

    from lockbuild.selftest import workdir as sandbox

    env = {**os.environ, "TMPDIR": str(tmp_path)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "lockbuild", "test", str(bundles["daemon"]), "--trust", str(keys.trust)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not list(private_tmp.glob("run-*/box/root/netengine")):
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed = list(private_tmp.glob("run-*"))
    assert killed, "the run was killed before it made its work directory"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (
        _processes_with(str(killed[0])) or _processes_with("lockbuild.selftest.inner")
    ):
        time.sleep(0.1)  # the tracer and the sandbox die with the run (PR_SET_PDEATHSIG)
    assert _processes_with(str(killed[0])) == [] and _processes_with("299.25") == []
    with sandbox.workdir(tmp_path) as work:
        assert list(private_tmp.iterdir()) == [work]  # the killed run's directory is gone
    assert list(private_tmp.iterdir()) == []


@needs_netns
@needs_strace
def test_a_server_on_the_namespaces_loopback_is_local_not_a_failure(
    bundles: dict[str, Path], keys: Keys, private_tmp: Path
) -> None:
    code, data, err = selftest(bundles["serve"], keys)
    report = data["self_test"][0]
    assert code == 0, (report, err)
    assert "served pong" in report["steps"][-1]["detail"]
    assert report["attempts"] and {a["verdict"] for a in report["attempts"]} == {"local"}


@needs_netns
@needs_strace
def test_the_verify_and_smoke_commands_run_with_the_env(
    bundles: dict[str, Path], keys: Keys, private_tmp: Path
) -> None:
    """Shell commands (no Python start-up file runs): install's verify fails, and the smoke fails, without it."""
    code, data, err = selftest(bundles["shell"], keys)
    assert code == 0, (data, err)
    assert [s["status"] for s in data["self_test"][0]["steps"]] == ["passed", "passed", "skipped", "passed"]


@needs_netns
def test_a_strace_that_cannot_trace_here_is_not_checked(
    bundles: dict[str, Path], keys: Keys, private_tmp: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "strace").write_text("#!/bin/sh\necho 'strace: PTRACE_TRACEME: Operation not permitted' >&2\nexit 1\n")
    (fake / "strace").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}:{os.environ['PATH']}")
    code, data, err = selftest(bundles["quiet"], keys)
    assert code == 6, (data, err)
    report = data["self_test"][0]
    assert report["verdict"] == "not checked"
    assert "strace cannot trace here (strace: PTRACE_TRACEME: Operation not permitted)" in report["tracer"]


@needs_netns
def test_a_tracer_that_does_not_see_inside_the_sandbox_is_not_checked(
    bundles: dict[str, Path], keys: Keys, private_tmp: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tracer that runs but follows nothing (here: one that execs its command untraced) gives no verdict."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "strace").write_text('#!/bin/sh\nwhile [ "$1" != "--" ]; do shift; done; shift; exec "$@"\n')
    (fake / "strace").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}:{os.environ['PATH']}")
    code, data, err = selftest(bundles["net"], keys)
    assert code == 6 and data["self_test"][0]["verdict"] == "not checked", (data, err)


@needs_netns
@needs_strace
def test_gpu_steps_run_under_gpu_on_a_machine_with_a_gpu_and_are_traced(
    bundles: dict[str, Path], keys: Keys, private_tmp: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, data, err = selftest(bundles["gpu"], keys)  # without --gpu: passes, and says the GPU steps did not run
    assert code == 0, (data, err)
    steps = {s["name"]: s for s in data["self_test"][0]["steps"]}
    assert steps["gpu-smoke"]["status"] == "not run" and "GPU steps not run" in steps["gpu-smoke"]["detail"]
    code, text, _ = cli("inspect", str(bundles["gpu"]))
    assert "self-test GPU smoke (--gpu): netengine --gpu-smoke" in text  # signed in the manifest
    if not Path("/proc/driver/nvidia").exists() and shutil.which("nvidia-smi") is None:
        code, data, err = selftest(bundles["gpu"], keys, "--gpu")
        steps = {s["name"]: s for s in data["self_test"][0]["steps"]}
        assert code == 0 and "no NVIDIA driver" in steps["gpu-smoke"]["detail"], (data, err)
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nvidia-smi").write_text("#!/bin/sh\necho '580.65, 9.0, Fake H100'\n")
    (fake / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}:{os.environ['PATH']}")
    code, data, err = selftest(bundles["gpu"], keys, "--gpu")
    assert code == 1, (data, err)
    steps = {s["name"]: s for s in data["self_test"][0]["steps"]}
    assert steps["gpu-smoke"]["status"] == "passed" and "forward pass done" in steps["gpu-smoke"]["detail"]
    [hit] = refused(data)
    assert (hit["event"], hit["host"], hit["port"]) == ("connect", "10.255.255.8", 85)
    assert hit["frame"].endswith("in main")


# --- an ordinary user -----------------------------------------------------------------------------------

NOBODY = 65534


def _nobody_python() -> str | None:
    """A python<PY> that uid 65534 can run with this checkout and its dependencies, or None."""
    exe = shutil.which(f"python{PY}", path="/usr/local/bin:/usr/bin:/bin")
    if os.geteuid() != 0 or shutil.which("setpriv") is None or exe is None:
        return None
    probe = subprocess.run(
        [
            "setpriv",
            "--reuid",
            str(NOBODY),
            "--regid",
            str(NOBODY),
            "--clear-groups",
            "env",
            "-i",
            f"PYTHONPATH={_nobody_path()}",
            exe,
            "-c",
            "import lockbuild.selftest.run, zstandard",
        ],
        capture_output=True,
        cwd="/",
    )
    return exe if probe.returncode == 0 else None


def _nobody_path() -> str:
    import lockbuild

    sites = [p for p in __import__("sys").path if p.endswith("site-packages") and Path(p, "click").is_dir()]
    return ":".join([str(Path(lockbuild.__file__).parent.parent), *sites])


@needs_netns
@needs_strace
@pytest.mark.skipif(
    _nobody_python() is None, reason="needs root (to become uid 65534 with setpriv) and a shared Python"
)
def test_a_clean_bundle_passes_for_an_ordinary_user_and_a_dirty_one_fails(bundles: dict[str, Path], keys: Keys) -> None:
    """`lockbuild test` as uid 65534 with a scratch HOME and TMPDIR: inside the sandbox's user namespace root's
    directories show as the overflow uid, and the test root still lies under directories the sandbox made."""
    scratch = Path(tempfile.mkdtemp(prefix="lockbuild-nobody-", dir="/tmp"))  # 65534 must reach it
    try:
        scratch.chmod(0o755)
        for d in ("home", "tmp"):
            (scratch / d).mkdir(mode=0o700)
            os.chown(scratch / d, NOBODY, NOBODY)
        shutil.copytree(keys.trust, scratch / "trust")
        for name in ("quiet", "net"):
            shutil.copy(bundles[name], scratch)
            shutil.copy(bundles[name].with_name(bundles[name].name + ".minisig"), scratch)
        for p in [scratch / "trust", *scratch.glob("*.lbz*"), *(scratch / "trust").iterdir()]:
            p.chmod(0o755 if p.is_dir() else 0o644)

        def as_nobody(name: str) -> tuple[int, dict[str, Any]]:
            argv = [
                "setpriv",
                "--reuid",
                str(NOBODY),
                "--regid",
                str(NOBODY),
                "--clear-groups",
                "env",
                "-i",
                "PATH=/usr/bin:/bin",
                f"HOME={scratch / 'home'}",
                f"TMPDIR={scratch / 'tmp'}",
                f"PYTHONPATH={_nobody_path()}",
                str(_nobody_python()),
                "-m",
                "lockbuild",
                "test",
                str(scratch / bundles[name].name),
                "--trust",
                str(scratch / "trust"),
                "--json",
            ]
            proc = subprocess.run(argv, capture_output=True, text=True, cwd=scratch, timeout=600)
            return proc.returncode, json.loads(proc.stdout or "{}") | {"stderr": proc.stderr}

        code, data = as_nobody("quiet")
        assert code == 0, data
        assert data["self_test"][0]["verdict"] == "passed"
        code, data = as_nobody("net")
        assert code == 1, data
        assert [(a["host"], a["port"]) for a in refused(data)] == [("10.255.255.1", 8080)]
        assert list((scratch / "tmp" / f"lockbuild-selftest-{NOBODY}").iterdir()) == []
    finally:
        shutil.rmtree(scratch)


def test_an_ancestor_of_root_owned_by_another_user_gets_no_chmod_tip(tmp_path: Path) -> None:
    """The ownership rule's tip: a directory of another owner cannot be fixed with `chmod +t` (it may already
    be sticky, like /tmp seen from a user namespace)."""
    from lockbuild.errors import InstallError
    from lockbuild.install.places import check_ancestors

    if os.geteuid() != 0:
        pytest.skip("needs root to give a directory to another user")
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    os.chown(shared, NOBODY, NOBODY)
    with pytest.raises(InstallError) as exc:
        check_ancestors(shared / "root")
    assert f"owned by uid {NOBODY}" in exc.value.message
    assert "chmod +t" not in (exc.value.tip or "") and "owned by root or by the installing user" in (
        exc.value.tip or ""
    )
    shared.chmod(0o777)
    os.chown(shared, 0, 0)
    with pytest.raises(InstallError) as exc:
        check_ancestors(shared / "root")
    assert f"chmod +t {shared}" in (exc.value.tip or "")


@needs_netns
@needs_strace
@pytest.mark.parametrize("kind", ["parts", "delta", "store"])
def test_the_self_test_takes_every_source(
    kind: str, bundles: dict[str, Path], keys: Keys, private_tmp: Path, tmp_path: Path
) -> None:
    """`lockbuild test` names its bundle as every command does: a part list, a delta completed by a store,
    or ENGINE/VERSION-VARIANT in a store; a clean engine passes from each, a dirty one fails."""
    quiet = bundles["quiet"]
    store = tmp_path / "store"
    if kind == "parts":
        code, out, err = cli("split", str(quiet), "--size", "2M", "--out", str(tmp_path / "p"), "--json")
        assert code == 0, err
        args: tuple[str, ...] = (json.loads(out)["part_list"],)
    else:
        code, _, err = cli("import", str(quiet), "--trust", str(keys.trust), "--store", str(store))
        assert code == 0, err
        if kind == "store":
            name = quiet.name.removesuffix("-x86_64-manylinux_2_28.lbz")
            engine, _, build = name.partition("-")
            args = (f"{engine}/{build}", "--store", str(store))
        else:  # a delta of the same build against itself carries nothing: the store completes it
            code, out, err = cli(
                "delta",
                str(quiet),
                "--base",
                str(quiet),
                "--out",
                str(tmp_path / "d"),
                "--trust",
                str(keys.trust),
                "--json",
            )
            assert code == 0, err
            args = (json.loads(out)["delta"], "--store", str(store))
    code, out, err = cli("test", *args, "--trust", str(keys.trust), "--json")
    data = json.loads(out)
    assert code == 0, (data, err)
    assert data["self_test"][0]["verdict"] == "passed"
    assert list(private_tmp.iterdir()) == []
