"""Issue 15: runtime settings ([engine.env]) every entry point sees, and the self-test (`lockbuild test`)."""

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

from lockbuild.bundle.instructions import InstallTable, parse_install
from lockbuild.bundle.manifest import toml_string
from lockbuild.cli import main
from lockbuild.errors import IntegrityError, RecipeError
from lockbuild.recipe import parse_recipe

ENGINE = '''\
import os
import socket
import sys


def main() -> None:
    args = sys.argv[1:]
    if args == ["--version"]:
        print("netengine 1.0")
    elif args == ["--env"]:
        print(os.environ.get("NETENGINE_MODE", "<unset>"), os.environ.get("HF_HUB_OFFLINE", "<unset>"))
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
    else:
        print("netengine ok")
'''

RECIPE = f'''\
[engine]
name = "netengine"
pypi = "netengine"
binary = "netengine"
verify = ["netengine", "--version"]
{{extra}}
[engine.env]
NETENGINE_MODE = "offline it's $HOME `x`"
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
def bundles(blank_server: FakeServer, keys: Keys, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    s = blank_server
    s.reset()
    s.publish(*uv_wheel(), uploaded=day(1))
    s.publish(*make_wheel("netengine", "1.0", modules={"netengine/__init__.py": ENGINE},
                          scripts={"netengine": "netengine:main"}), uploaded=day(1))  # fmt: skip
    tmp = tmp_path_factory.mktemp("netengine")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LOCKBUILD_INDEX_URL", s.index_url())
        mp.setenv("LOCKBUILD_CACHE_DIR", str(tmp / "cache"))
        yield {
            "plain": _build(tmp, keys, "plain"),
            "quiet": _build(tmp, keys, "quiet", 'smoke = ["netengine", "--quiet"]'),
            "net": _build(tmp, keys, "net", 'smoke = ["netengine", "--smoke"]'),
            "allowed": _build(tmp, keys, "allowed", 'smoke = ["netengine", "--smoke"]\nallow-network = ["10.255.255.1"]'),
            "serve": _build(tmp, keys, "serve", 'smoke = ["netengine", "--serve"]'),
            # verify and smoke commands that are not Python (no .pth runs): they see the settings all the same
            "shell": _build(tmp, keys, "shell", 'smoke = ["sh", "-c", "test \\"$HF_HUB_OFFLINE\\" = 1"]',
                            verify='["sh", "-c", "test \\"$HF_HUB_OFFLINE\\" = 1 && netengine --version"]'),
            "native": _build(tmp, keys, "native",
                             'smoke = ["bash", "-c", "(exec 3<>/dev/tcp/10.255.255.2/81) 2>/dev/null; true"]'),
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
    out = subprocess.run([str(env_dir / "bin" / "netengine"), "--env"], env={"HF_HUB_OFFLINE": "0"},
                         capture_output=True, text=True)  # fmt: skip
    assert out.stdout.strip().endswith(" 0")
    # and an activated shell exports them to any program
    sh = f'. "{env_dir}/bin/activate" && printf "%s|%s" "$NETENGINE_MODE" "$HF_HUB_OFFLINE"'
    out = subprocess.run(["sh", "-c", sh], env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True)
    assert out.stdout == "offline it's $HOME `x`|1", out.stderr
    # list and inspect show them
    code, out_text, _ = cli("list", "--root", str(root))
    assert "env HF_HUB_OFFLINE=1" in out_text
    code, out_json, _ = cli("list", "--root", str(root), "--json")
    assert json.loads(out_json)["installed"][0]["env"]["HF_HUB_OFFLINE"] == "1"
    code, out_text, _ = cli("inspect", str(bundles["plain"]))
    assert "install: env: HF_HUB_OFFLINE=1 NETENGINE_MODE=" in out_text
    code, out_json, _ = cli("inspect", str(bundles["plain"]), "--json")
    assert json.loads(out_json)["install"]["env"] == {"HF_HUB_OFFLINE": "1", "NETENGINE_MODE": "offline it's $HOME `x`"}


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
        ("A = 1", "expected a string value"),
        ('A = "x\\ny"', "control character"),
        ('A = "x\\u0000"', "control character"),
        ('A = "\\u001b[31m"', "control character"),
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
    t = InstallTable("e", ("e",), "none", "tools/uv.whl", env=(("A", "x y'\"$"), ("HF_HUB_OFFLINE", "1")),
                     smoke=("e", "--smoke"), allow_network=("example.org",))  # fmt: skip
    import tomllib

    data = tomllib.loads("\n".join(t.toml_lines(toml_string)))
    assert parse_install(data["install"], {"tools/uv.whl": "tool"}) == t
    for bad in ({"env": {"LD_PRELOAD": "x"}}, {"env": {"A": "x\ny"}}, {"env": {"a": "1"}}, {"env": ["A=1"]},
                {"smoke": ["e", "\x1b[2J"]}, {"allow-network": ["http://x/"]}, {"allow-network": [1]}):  # fmt: skip
        with pytest.raises(IntegrityError):
            parse_install(_table(**bad), {"tools/uv.whl": "tool"})


# --- lockbuild test -----------------------------------------------------------------------------------

needs_netns = pytest.mark.skipif(
    shutil.which("unshare") is None or subprocess.run(["unshare", "-rn", "true"], capture_output=True).returncode != 0,
    reason="this machine cannot make a network namespace",
)
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


@needs_netns
def test_a_quiet_connection_attempt_fails_the_test_with_host_port_and_frame(
    bundles: dict[str, Path], keys: Keys, private_tmp: Path
) -> None:
    code, data, _ = selftest(bundles["net"], keys)
    assert code == 1 and data["ok"] is False
    assert data["error"]["exit_code"] == 1 and "hosts not allowed: 10.255.255.1:8080" in data["error"]["message"]
    report = data["self_test"][0]
    assert report["passed"] is False
    assert {s["name"]: s["status"] for s in report["steps"]} == {
        "install": "passed", "verify": "passed", "gpu-probe": "skipped", "smoke": "passed"}  # fmt: skip
    assert "offline: falling back" in report["steps"][-1]["detail"]  # the engine hid its failure; the test did not
    hooked = [a for a in report["attempts"] if a["source"] == "audit-hook" and a["event"] == "socket.connect"]
    assert hooked and hooked[0]["host"] == "10.255.255.1" and hooked[0]["port"] == 8080
    assert hooked[0]["verdict"] == "refused"
    assert "netengine/__init__.py" in hooked[0]["frame"] and hooked[0]["frame"].endswith("in main")
    assert any(a["event"] == "socket.getaddrinfo" for a in report["attempts"])
    if shutil.which("strace"):
        assert any(a["source"] == "strace" and a["host"] == "10.255.255.1" and a["port"] == 8080
                   for a in report["attempts"])  # fmt: skip
    assert list(private_tmp.iterdir()) == []  # the test root is gone
    # the text report names the attempt too
    code, text, err = cli("test", str(bundles["net"]), "--trust", str(keys.trust))
    assert code == 1 and "refused 10.255.255.1:8080" in text and "FAILED" in text
    assert "ERROR the self-test of netengine-1.0-net" in err and "TIP" in err


@needs_netns
def test_the_same_engine_passes_with_allow_network_for_that_host(
    bundles: dict[str, Path], keys: Keys, private_tmp: Path
) -> None:
    code, data, err = selftest(bundles["allowed"], keys)
    assert code == 0, (data, err)
    report = data["self_test"][0]
    assert report["passed"] and report["refused"] == 0
    assert {a["verdict"] for a in report["attempts"]} == {"allowed"}


@needs_netns
def test_an_engine_that_attempts_nothing_passes(bundles: dict[str, Path], keys: Keys, private_tmp: Path) -> None:
    code, data, err = selftest(bundles["quiet"], keys)
    assert code == 0, (data, err)
    report = data["self_test"][0]
    assert report["passed"] and report["attempts"] == []
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
    report = data["self_test"][0]
    assert code == 1 and report["tracer"] == "strace"
    assert [(a["source"], a["host"], a["port"]) for a in report["attempts"]] == [("strace", "10.255.255.2", 81)]
    code, data, _ = selftest(bundles["native"], keys, "--no-strace")  # the audit hook alone cannot see it
    assert code == 0 and data["self_test"][0]["tracer"].startswith("not available")


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
    from lockbuild.selftest import sandbox

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
    from lockbuild.selftest import sandbox

    (tmp_path / f"lockbuild-selftest-{os.geteuid()}").mkdir(mode=0o777)
    (tmp_path / f"lockbuild-selftest-{os.geteuid()}").chmod(0o777)
    with pytest.raises(LockbuildError, match="not a private directory"):
        sandbox.parent_dir(tmp_path)


def test_strace_lines_are_read() -> None:
    from lockbuild.selftest.trace import parse

    text = (
        '12696 connect(3, {sa_family=AF_INET, sin_port=htons(8080), sin_addr=inet_addr("10.255.255.1")}, 16) = -1\n'
        '12696 connect(3, {sa_family=AF_UNIX, sun_path="/var/run/nscd/socket"}, 110) = -1 ENOENT\n'
        '7 connect(4, {sa_family=AF_INET6, sin6_port=htons(443), sin6_flowinfo=htonl(0), '
        'inet_pton(AF_INET6, "2001:db8::1", &sin6_addr), sin6_scope_id=0}, 28) = -1 ENETUNREACH\n'
        '8 sendto(5, "x", 1, 0, {sa_family=AF_INET, sin_port=htons(53), sin_addr=inet_addr("10.0.0.53")}, 16) = 1\n'
    )
    assert [(t.call, t.host, t.port, t.pid) for t in parse(text)] == [
        ("connect", "10.255.255.1", 8080, 12696), ("connect", "2001:db8::1", 443, 7), ("sendto", "10.0.0.53", 53, 8)]


def test_verdicts_local_allowed_and_name_server_queries() -> None:
    from lockbuild.selftest.audit import Seen
    from lockbuild.selftest.report import judge
    from lockbuild.selftest.trace import Traced

    seen = [Seen("socket.getaddrinfo", "hub.example", 443, ("f.py:1 in g",), 1),
            Seen("socket.connect", "127.0.0.1", 80, (), 1), Seen("socket.connect", "::1", 80, (), 1)]  # fmt: skip
    dns = [Traced("connect", "10.0.0.53", 53, 1)]
    assert [a.verdict for a in judge(seen, dns, ["hub.example"])] == ["allowed", "local", "local", "allowed"]
    assert [a.verdict for a in judge(seen, dns, [])] == ["refused", "local", "local", "refused"]
    assert next(a.verdict for a in judge(seen, dns, ["HUB.example"])) == "allowed"


@needs_netns
def test_build_self_test_runs_the_test_after_the_build(
    blank_server: FakeServer, bundles: dict[str, Path], keys: Keys, tmp_path: Path, private_tmp: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setenv("LOCKBUILD_INDEX_URL", blank_server.index_url())
    for variant, extra, expected in (("quiet", 'smoke = ["netengine", "--quiet"]', 0),
                                     ("net", 'smoke = ["netengine", "--smoke"]', 1)):  # fmt: skip
        recipe = tmp_path / f"{variant}.toml"
        recipe.write_text(RECIPE.format(extra=extra, variant=variant))
        code, out, err = cli("build", str(recipe), "--key", str(keys.secret), "--out", str(tmp_path / variant),
                             "--self-test", "--json")  # fmt: skip
        data = json.loads(out)
        assert code == expected, err
        assert Path(data["bundles"][0]["bundle"]).exists()  # the bundle is built either way; the report says why
        assert data["self_test"][0]["passed"] is (expected == 0)  # trusted through the key that signed it


@needs_netns
def test_a_killed_test_leaves_nothing_after_the_next_run(
    bundles: dict[str, Path], keys: Keys, tmp_path: Path, private_tmp: Path
) -> None:
    import signal
    import sys
    import time

    from lockbuild.selftest import sandbox

    env = {**os.environ, "TMPDIR": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-m", "lockbuild", "test", str(bundles["net"]), "--trust",
                             str(keys.trust)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not list(private_tmp.glob("run-*/root/netengine")):
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed = list(private_tmp.glob("run-*"))
    assert killed, "the run was killed before it made its work directory"
    time.sleep(0.5)  # the namespace's process dies with its parent (PR_SET_PDEATHSIG)
    with sandbox.workdir(tmp_path) as work:
        assert list(private_tmp.iterdir()) == [work]  # the killed run's directory is gone
    assert list(private_tmp.iterdir()) == []


@needs_netns
def test_a_server_on_the_namespaces_loopback_is_local_not_a_failure(
    bundles: dict[str, Path], keys: Keys, private_tmp: Path
) -> None:
    code, data, err = selftest(bundles["serve"], keys)
    report = data["self_test"][0]
    assert code == 0, (report, err)
    assert "served pong" in report["steps"][-1]["detail"] and "loopback up" in report["namespace"]
    assert report["attempts"] and {a["verdict"] for a in report["attempts"]} == {"local"}


@needs_netns
def test_an_unprivileged_user_namespace_works_too(bundles: dict[str, Path], keys: Keys, tmp_path: Path) -> None:
    from lockbuild.selftest import SelfTestOptions, self_test

    opts = SelfTestOptions(trust_dir=keys.trust, environ=dict(os.environ), base=tmp_path, user_namespace=True)
    net = self_test(bundles["net"], opts)
    assert net.namespace.startswith("unshare -r -n") and not net.passed
    assert [(a.host, a.port) for a in net.refused if a.event == "socket.connect"] == [("10.255.255.1", 8080)]
    assert self_test(bundles["quiet"], opts).passed



@needs_netns
def test_the_verify_and_smoke_commands_run_with_the_env(bundles: dict[str, Path], keys: Keys, private_tmp: Path) -> None:
    """Shell commands (no Python start-up file runs): install's verify fails, and the smoke fails, without it."""
    code, data, err = selftest(bundles["shell"], keys)
    assert code == 0, (data, err)
    assert [s["status"] for s in data["self_test"][0]["steps"]] == ["passed", "passed", "skipped", "passed"]


@needs_netns
def test_a_strace_that_cannot_trace_here_is_said_not_a_failure(
    bundles: dict[str, Path], keys: Keys, private_tmp: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "strace").write_text("#!/bin/sh\necho 'strace: PTRACE_TRACEME: Operation not permitted' >&2\nexit 1\n")
    (fake / "strace").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}:{os.environ['PATH']}")
    code, data, err = selftest(bundles["quiet"], keys)
    assert code == 0, (data, err)
    assert "strace cannot trace here (strace: PTRACE_TRACEME: Operation not permitted)" in data["self_test"][0]["tracer"]
