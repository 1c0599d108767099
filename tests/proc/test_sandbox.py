"""The one sandbox for other people's code: what the code inside can and cannot reach.

Each test runs a real bubblewrap; each fails if the flag or restriction it names is removed from
``lockbuild/proc/sandbox.py``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from lockbuild.proc import sandbox
from lockbuild.proc.sandbox import Bind, SandboxError, SandboxTimeout, Spec

PATH_ENV = {"PATH": "/usr/bin:/bin"}


def sh(script: str, spec: Spec | None = None, timeout: float = 30) -> subprocess.CompletedProcess[bytes]:
    return sandbox.run(spec or Spec(env=PATH_ENV), ["sh", "-c", script], timeout=timeout)


def out(proc: subprocess.CompletedProcess[bytes]) -> str:
    return proc.stdout.decode()


def test_the_sandbox_sees_only_the_system_and_a_short_list_of_etc() -> None:
    proc = sh("ls -A /; echo --; ls -A /etc")
    top, etc = out(proc).split("--\n")
    assert set(top.split()) <= {
        "bin",
        "sbin",
        "lib",
        "lib32",
        "lib64",
        "libx32",
        "usr",
        "etc",
        "proc",
        "dev",
        "tmp",
        "home",
    }
    assert set(etc.split()) <= {Path(p).name for p in sandbox.ETC_FILES}
    assert "shadow" not in etc and "resolv.conf" not in etc


def test_no_host_tmp_home_run_or_sockets(tmp_path: Path) -> None:
    marker = tmp_path / "host-file"
    marker.write_text("secret")
    proc = sh(f"cat {marker} 2>&1; ls /run /var/run /root 2>&1; ls -A /tmp $HOME; echo HOME=$HOME")
    text = out(proc)
    assert "secret" not in text
    assert "No such file" in text
    assert "HOME=/home/sandbox" in text


def test_a_unix_socket_of_the_host_is_out_of_reach(tmp_path: Path) -> None:
    path = tmp_path / "agent.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)
    server.settimeout(0.2)
    try:
        code = f"import socket; s=socket.socket(socket.AF_UNIX); s.connect({str(path)!r}); print('CONNECTED')"
        proc = sandbox.run(Spec(env=PATH_ENV), ["python3", "-c", code], timeout=30)
        assert b"CONNECTED" not in proc.stdout
        assert proc.returncode != 0
        with pytest.raises(TimeoutError):
            server.accept()
    finally:
        server.close()


def _tcp_server() -> tuple[socket.socket, list[bytes]]:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    seen: list[bytes] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            seen.append(conn.recv(100) or b"(connected)")
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    return srv, seen


def test_no_network_the_hosts_loopback_included() -> None:
    srv, seen = _tcp_server()
    try:
        port = srv.getsockname()[1]
        code = (
            f"import socket; s=socket.create_connection(('127.0.0.1', {port}), timeout=5); s.send(b'hi'); print('SENT')"
        )
        proc = sandbox.run(Spec(env=PATH_ENV), ["python3", "-c", code], timeout=30)
        assert b"SENT" not in proc.stdout
        assert b"Connection refused" in proc.stderr
        time.sleep(0.2)
        assert seen == []
    finally:
        srv.close()


def test_network_true_keeps_the_network() -> None:
    srv, seen = _tcp_server()
    try:
        port = srv.getsockname()[1]
        code = f"import socket; s=socket.create_connection(('127.0.0.1', {port}), timeout=5); s.send(b'hi')"
        proc = sandbox.run(Spec(env=PATH_ENV, network=True), ["python3", "-c", code], timeout=30)
        assert proc.returncode == 0, proc.stderr
        for _ in range(50):
            if seen:
                break
            time.sleep(0.05)
        assert seen == [b"hi"]
    finally:
        srv.close()


def test_the_environment_is_only_the_specs_and_proc_1_holds_none_of_ours(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCKBUILD_KEY_PASSWORD", "hunter2-passphrase")
    proc = sh(
        "env; echo --; tr '\\0' '\\n' < /proc/1/environ; for p in /proc/[0-9]*; do tr '\\0' '\\n' < $p/environ; done"
    )
    text = out(proc)
    assert "hunter2" not in text
    assert "LOCKBUILD" not in text
    assert "PATH=/usr/bin:/bin" in text


def test_proc_shows_only_the_sandboxs_processes() -> None:
    proc = sh("ls -d /proc/[0-9]*")
    pids = [int(Path(p).name) for p in out(proc).split()]
    assert os.getpid() not in pids or max(pids) < 50
    assert max(pids) < 50  # a new PID namespace: a handful of low pids, none of the host's


def test_no_capabilities_and_no_nested_user_namespace() -> None:
    # `unshare -U` alone, not `-r`: writing a uid map fails in the sandbox with or without --disable-userns,
    # so only a bare new user namespace tells whether nesting is really off.
    proc = sh("grep CapEff /proc/self/status; unshare -U true && echo NESTED")
    assert "CapEff:\t0000000000000000" in out(proc)
    assert "NESTED" not in out(proc)


def test_the_sandbox_is_a_session_of_its_own() -> None:
    # With --new-session the sandbox cannot push keystrokes into the caller's terminal (TIOCSTI): its
    # session leader lies inside its own PID namespace, so getsid answers a PID it can see, not 0.
    proc = sh("python3 -c 'import os; print(\"SID\", os.getsid(0))'")
    assert "SID " in out(proc)
    assert "SID 0" not in out(proc)


def test_no_setns_back_into_the_hosts_network(tmp_path: Path) -> None:
    # The host's /proc is not there, so /proc/<lockbuild>/ns/net cannot be opened to rejoin it.
    proc = sh(f"ls /proc/{os.getpid()}/ns/net 2>&1 || echo ABSENT")
    assert "ABSENT" in out(proc)


def test_read_only_binds_are_read_only_and_writable_ones_writable(tmp_path: Path) -> None:
    ro, rw = tmp_path / "ro", tmp_path / "rw"
    ro.mkdir()
    rw.mkdir()
    spec = Spec(env=PATH_ENV, binds=(Bind(ro, Path("/in")), Bind(rw, Path("/out"), writable=True)))
    proc = sh("touch /in/x 2>&1; touch /out/y; touch /usr/z 2>&1; echo done", spec)
    assert "Read-only file system" in out(proc)
    assert not (ro / "x").exists()
    assert (rw / "y").exists()


def test_the_root_is_read_only_outside_tmp_and_home() -> None:
    proc = sh("mkdir /work 2>&1; touch /etc/x 2>&1; touch /tmp/ok $HOME/ok && echo WROTE")
    assert out(proc).count("Read-only file system") == 2
    assert "WROTE" in out(proc)


def test_a_double_forked_daemon_dies_with_the_sandbox(tmp_path: Path) -> None:
    rw = tmp_path / "rw"
    rw.mkdir()
    script = (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        time.sleep(3)\n"
        "        open('/out/survived', 'w').write('yes')\n"
        "    os._exit(0)\n"
        "print('parent done')\n"
    )
    spec = Spec(env=PATH_ENV, binds=(Bind(rw, Path("/out"), writable=True),))
    proc = sandbox.run(spec, ["python3", "-c", script], timeout=30)
    assert proc.returncode == 0
    time.sleep(4)
    assert not (rw / "survived").exists()


def test_a_timeout_kills_everything(tmp_path: Path) -> None:
    rw = tmp_path / "rw"
    rw.mkdir()
    spec = Spec(env=PATH_ENV, binds=(Bind(rw, Path("/out"), writable=True),))
    started = time.monotonic()
    with pytest.raises(SandboxTimeout, match="did not finish within 1 s"):
        sandbox.run(spec, ["sh", "-c", "(sleep 3; touch /out/late) & sleep 60"], timeout=1)
    assert time.monotonic() - started < 10
    time.sleep(3)
    assert not (rw / "late").exists()


def test_root_gets_a_user_namespace_too() -> None:
    args = sandbox.argv(Spec(), ["true"])
    assert "--unshare-user" in args and "--unshare-all" in args and "--share-net" not in args
    proc = sh("cat /proc/self/uid_map")
    # A new user namespace maps one id; the host's initial namespace maps the whole 0..4294967295 range.
    assert "4294967295" not in out(proc)


def test_stdin_and_prefix(tmp_path: Path) -> None:
    proc = sandbox.run(Spec(env=PATH_ENV), ["cat"], timeout=30, stdin=b"hello")
    assert proc.stdout == b"hello"
    proc = sandbox.run(Spec(env=PATH_ENV), ["true"], timeout=30, prefix=["env", "MARK=1"])
    assert proc.args[:3] == ["env", "MARK=1", str(sandbox.bwrap_path())]


def test_no_bwrap_refuses_with_a_tip(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sandbox.shutil, "which", lambda _name: None)
    with pytest.raises(SandboxError) as exc:
        sandbox.run(Spec(), ["true"], timeout=5)
    assert "never runs that code unsandboxed" in exc.value.message
    assert exc.value.tip is not None and "apt-get install bubblewrap" in exc.value.tip


def test_a_bwrap_that_cannot_start_refuses_with_a_tip(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to creating new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setattr(sandbox.shutil, "which", lambda _name: str(fake))
    sandbox._probe.cache_clear()
    try:
        with pytest.raises(SandboxError) as exc:
            sandbox.check_available()
    finally:
        sandbox._probe.cache_clear()
    assert "No permissions to creating new namespace" in exc.value.message
    assert exc.value.tip is not None and "user namespaces" in exc.value.tip


def test_bad_specs_are_refused() -> None:
    with pytest.raises(SandboxError, match="absolute"):
        sandbox.argv(Spec(binds=(Bind(Path("rel"), Path("/x")),)), ["true"])
    with pytest.raises(SandboxError, match="NAME=value"):
        sandbox.argv(Spec(env={"A=B": "c"}), ["true"])
    with pytest.raises(SandboxError, match="empty"):
        sandbox.argv(Spec(), [])


def test_this_python_runs_inside_when_bound() -> None:
    base = Path(sys.base_prefix)
    spec = Spec(env=PATH_ENV, binds=(Bind(base, base),))
    exe = Path(sys.executable).resolve()
    proc = sandbox.run(spec, [str(exe), "-c", "print('ok')"], timeout=30)
    assert proc.stdout.strip() == b"ok", proc.stderr
